"""Run a spec cell by cell into a run directory, and rebuild its tables and report.

The run directory's layout and atomic writes are the store's (:mod:`zoo.run.store`).
Cells already stored in the directory (same id: same resolved configuration) are skipped,
so rerunning ``zoo run SPEC --out DIR`` (or ``zoo run DIR``) resumes; cells stored as failed
are rerun only when asked (``--retry-failed``). A cell's record is written last, after its
artifacts, so a run killed at any moment (even with SIGKILL) loses only the cells that were
in flight. Cells run through an executor (:mod:`zoo.run.executors`): in this process, in
local worker processes, or as Ray tasks, all on one :class:`~zoo.runtime.Runtime` built
once from the spec's ``runtime:`` section and ``--device``.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from zoo.run.executors import EXECUTORS, plan_workers, with_threads
from zoo.run.report import build_report as _build_report
from zoo.run.store import OutdatedRunDir, RunStore, check_version
from zoo.runtime import Runtime
from zoo.spec import Spec
from zoo.studies.product_matrix.simulate import run_simulation

__all__ = [
    "OutdatedRunDir",
    "RunOutcome",
    "build_report",
    "check_version",
    "default_out_dir",
    "run_spec",
    "spec_runtime",
]


@dataclass(frozen=True)
class RunOutcome:
    """What :func:`run_spec` did."""

    out_dir: Path
    n_cells: int
    n_ran: int
    n_skipped: int
    n_failed: int


def default_out_dir(spec: Spec, root: Path = Path("runs")) -> Path:
    """``runs/<spec name>/<timestamp>``."""
    return root / spec.name / datetime.now().strftime("%Y%m%d-%H%M%S")


def spec_runtime(spec: Spec, device: str | None = None) -> Runtime:
    """The runtime of ``spec`` (its ``runtime:`` section), with ``--device`` winning."""
    return Runtime.from_section(getattr(spec, "runtime", None), device_override=device)


def run_spec(
    spec: Spec,
    out_dir: Path,
    *,
    executor: str = "local",
    workers: int | None = None,
    address: str | None = None,
    retry_failed: bool = False,
    progress: bool = True,
    log: Callable[[str], None] | None = None,
    device: str | None = None,
    runtime: Runtime | None = None,
) -> RunOutcome:
    """Run every cell of ``spec`` not yet done in ``out_dir``, then build the report.

    Parameters
    ----------
    spec : Spec
    out_dir : Path
        Run directory; cells already stored there are skipped (resume).
    executor : {"local", "ray", "inprocess"}
        ``local`` runs cells in worker processes (in this process when ``workers == 1``),
        ``ray`` submits them as Ray tasks (to ``address``, or a local Ray instance).
    workers : int, optional
        Number of cells run at once (default: one per core, or one per GPU with CUDA);
        each gets ``cores // workers`` torch threads unless the spec fixes them.
    retry_failed : bool
        Rerun cells stored as failed (by default they are kept as they are).
    device : str, optional
        ``cpu``, ``cuda`` or ``cuda:N``: overrides the spec's ``runtime.device``.
    runtime : Runtime, optional
        The runtime itself (overrides the spec and ``device``).

    Raises
    ------
    OutdatedRunDir
        ``out_dir`` was written with another spec_version (``zoo migrate`` renames it).
    zoo.runtime.RuntimeUnavailable
        The device cannot be had on this machine (checked before anything runs).

    A failing cell (exception, NaN loss, sampler failure) is recorded with its error; the
    others go on. Each cell is written as soon as it finishes, atomically.
    """
    log = log or (lambda msg: print(msg, file=sys.stderr))
    store = RunStore(out_dir)
    check_version(store)
    if spec.simulation is not None:  # no cells: seconds of numpy
        run_simulation(spec, store, log=log)
        return RunOutcome(out_dir, 1, 1, 0, 0)
    if executor not in EXECUTORS:
        raise ValueError(f"unknown executor {executor!r}; use one of {sorted(EXECUTORS)}")
    runtime = runtime or spec_runtime(spec, device)
    n_workers, threads = plan_workers(workers, runtime=runtime)
    runtime = with_threads(runtime, threads)
    if executor == "local" and n_workers == 1:
        executor = "inprocess"
    store.prepare()
    store.write_spec(spec)
    cells = spec.cells()
    status = {c.cell_id: store.status(c.cell_id) for c in cells}
    rerun = ("pending", "failed") if retry_failed else ("pending",)
    todo = [c for c in cells if status[c.cell_id] in rerun]
    skipped = len(cells) - len(todo)
    if skipped:
        kept_failed = sum(s == "failed" for s in status.values()) if not retry_failed else 0
        extra = f" ({kept_failed} failed: rerun with --retry-failed)" if kept_failed else ""
        log(f"resuming {out_dir}: {skipped} of {len(cells)} cells already done{extra}")
    if todo and executor != "inprocess":
        on = f" on {runtime.device}" if runtime.is_cuda else ""
        log(f"running {len(todo)} cells on {executor}: {n_workers} workers x {threads} "
            f"torch threads{on}")  # fmt: skip
    # disable=None: no bar when stderr is not a terminal (CI logs get one line per cell)
    bar = tqdm(total=len(cells), initial=skipped, desc="cells", unit="cell",
               dynamic_ncols=True, disable=None) if progress else None  # fmt: skip
    t_start = time.perf_counter()
    results = EXECUTORS[executor](todo, workers=n_workers, runtime=runtime, address=address,
                                  progress=progress and executor == "inprocess")  # fmt: skip
    for i, res in enumerate(results):
        store.write_cell(res.record, res.artifacts)
        status[res.record["cell_id"]] = res.record["status"]
        msg = _cell_line(res.record, skipped + i + 1, len(cells), time.perf_counter() - t_start,
                         i + 1, len(todo))  # fmt: skip
        if bar is not None:
            bar.update(1)
            bar.write(msg, file=sys.stderr)
        else:
            log(msg)
    if bar is not None:
        bar.close()
    _build_report(store, spec)
    failed = sum(status[c.cell_id] == "failed" for c in cells)
    return RunOutcome(out_dir, len(cells), len(todo), skipped, failed)


def _cell_line(rec: dict[str, Any], k: int, n: int, elapsed: float, done: int, todo: int) -> str:
    eta = elapsed / done * (todo - done)
    if rec["status"] == "ok":
        m = rec["metrics"]
        shown = ", ".join(f"{key}={m[key]:.4g}" for key in ("accuracy", "nll", "rmse") if key in m)
        status = f"ok {shown}"
    else:
        status = f"FAILED {rec['error']}"
    return f"[{k}/{n}] {rec['cell_id']}: {status} ({rec['time_s']:.1f}s; ~{eta:.0f}s left)"


def build_report(out_dir: Path | RunStore, spec: Spec) -> dict[str, Path]:
    """Write results.csv, summary.csv and the report from the stored cells of ``spec``."""
    store = out_dir if isinstance(out_dir, RunStore) else RunStore(out_dir)
    if spec.simulation is not None:
        return run_simulation(spec, store, log=lambda msg: None)
    return _build_report(store, spec)
