"""Run a spec cell by cell into a run directory, and rebuild its tables and report.

A run directory holds::

    spec.yaml            the resolved spec (defaults filled in)
    cells/<cell id>.json one per cell: axes, resolved config, metrics, timings, status
    results.csv          one tidy row per cell: axes, then metrics (no timings: same spec
                         and seed give byte-identical files)
    summary.csv          mean and standard error over seeds per remaining combination
    report.md, report.html, figures/*.png

Cells already stored in the directory (same id: same resolved configuration) are skipped, so
rerunning ``zoo run SPEC --out DIR`` (or ``zoo run DIR``) resumes; cells stored as failed
are rerun only when asked (``--retry-failed``). Every file is written atomically (temporary
name, then rename), and a cell's record is written last, after its posterior file, so a run
killed at any moment (even with SIGKILL) leaves only whole files and loses only the cells
that were in flight. Cells run through an executor (:mod:`zoo.run.executors`): in this process,
in local worker processes, or as Ray tasks.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from zoo.spec.schema import Cell, Spec

__all__ = ["RunOutcome", "build_report", "default_out_dir", "dump_spec", "load_cells", "run_spec"]


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


def write_bytes_atomic(data: bytes, path: Path) -> None:
    """Write ``data`` to ``path`` through a temporary file and a rename (fsynced)."""
    from reports.tables import write_bytes_atomic as write

    write(data, path)


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename (fsynced)."""
    write_bytes_atomic(text.encode("utf-8"), path)


def _cell_path(out_dir: Path, cell: Cell) -> Path:
    return out_dir / "cells" / f"{cell.cell_id}.json"


def _stored_status(path: Path) -> str:
    """``ok``, ``failed`` or ``pending`` (no record, or one that cannot be read)."""
    try:
        status = json.loads(path.read_text())["status"]
    except (OSError, ValueError, KeyError, TypeError):
        return "pending"
    return status if status in ("ok", "failed") else "pending"


def _write_result(out_dir: Path, res) -> None:
    """Store one finished cell: its files first, then the record that marks it done."""
    cell_id = res.record["cell_id"]
    for suffix, data in res.artifacts.items():
        write_bytes_atomic(data, out_dir / "cells" / f"{cell_id}{suffix}")
    write_atomic(out_dir / "cells" / f"{cell_id}.json",
                 json.dumps(res.record, indent=1, sort_keys=True))  # fmt: skip


def run_spec(
    spec: Spec,
    out_dir: Path,
    *,
    executor: str = "local",
    workers: int | None = None,
    address: str | None = None,
    retry_failed: bool = False,
    progress: bool = True,
    log=None,
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
        Number of cells run at once (default: one per core); each gets
        ``cores // workers`` torch threads.
    retry_failed : bool
        Rerun cells stored as failed (by default they are kept as they are).

    A failing cell (exception, NaN loss, sampler failure) is recorded with its error; the
    others go on. Each cell is written as soon as it finishes, atomically.
    """
    from zoo.run.executors import EXECUTORS, plan_workers

    if spec.simulation is not None:  # no cells: seconds of numpy
        from zoo.studies.product_matrix.simulate import run_simulation

        run_simulation(spec, out_dir, log=log)
        return RunOutcome(out_dir, 1, 1, 0, 0)
    if executor not in EXECUTORS:
        raise ValueError(f"unknown executor {executor!r}; use one of {sorted(EXECUTORS)}")
    log = log or (lambda msg: print(msg, file=sys.stderr))
    n_workers, threads = plan_workers(workers)
    if executor == "local" and n_workers == 1:
        executor = "inprocess"
    (out_dir / "cells").mkdir(parents=True, exist_ok=True)
    for stale in [*out_dir.glob(".*.tmp"), *(out_dir / "cells").glob(".*.tmp")]:
        stale.unlink(missing_ok=True)  # left by a killed run; this process is the only writer
    write_atomic(out_dir / "spec.yaml", dump_spec(spec))
    cells = spec.cells()
    status = {c.cell_id: _stored_status(_cell_path(out_dir, c)) for c in cells}
    rerun = ("pending", "failed") if retry_failed else ("pending",)
    todo = [c for c in cells if status[c.cell_id] in rerun]
    skipped = len(cells) - len(todo)
    if skipped:
        kept_failed = sum(s == "failed" for s in status.values()) if not retry_failed else 0
        extra = f" ({kept_failed} failed: rerun with --retry-failed)" if kept_failed else ""
        log(f"resuming {out_dir}: {skipped} of {len(cells)} cells already done{extra}")
    if todo and executor != "inprocess":
        log(f"running {len(todo)} cells on {executor}: {n_workers} workers x {threads} "
            f"torch threads")  # fmt: skip
    bar = _bar(len(cells), skipped) if progress else None
    t_start = time.perf_counter()
    run = EXECUTORS[executor]
    results = run(todo, workers=n_workers, threads=threads, address=address,
                  progress=progress and executor == "inprocess")  # fmt: skip
    for i, res in enumerate(results):
        _write_result(out_dir, res)
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
    build_report(out_dir, spec)
    failed = sum(status[c.cell_id] == "failed" for c in cells)
    return RunOutcome(out_dir, len(cells), len(todo), skipped, failed)


def _cell_line(rec: dict, k: int, n: int, elapsed: float, done: int, todo: int) -> str:
    eta = elapsed / done * (todo - done)
    if rec["status"] == "ok":
        m = rec["metrics"]
        shown = ", ".join(f"{key}={m[key]:.4g}" for key in ("accuracy", "nll", "rmse") if key in m)
        status = f"ok {shown}"
    else:
        status = f"FAILED {rec['error']}"
    return f"[{k}/{n}] {rec['cell_id']}: {status} ({rec['time_s']:.1f}s; ~{eta:.0f}s left)"


def _bar(total: int, initial: int):
    from tqdm.auto import tqdm

    # disable=None: no bar when stderr is not a terminal (CI logs get one line per cell)
    return tqdm(
        total=total, initial=initial, desc="cells", unit="cell", dynamic_ncols=True, disable=None
    )


def dump_spec(spec: Spec) -> str:
    """The resolved spec as YAML (defaults filled in, keys in schema order)."""
    return yaml.safe_dump(
        spec.model_dump(mode="json"), sort_keys=False, width=100, default_flow_style=None
    )


def load_cells(out_dir: Path) -> list[dict[str, Any]]:
    """Every cell record stored in ``out_dir/cells``, sorted by cell id."""
    paths = sorted((out_dir / "cells").glob("*.json"))
    return [json.loads(p.read_text()) for p in paths]


def build_report(out_dir: Path, spec: Spec) -> dict[str, Path]:
    """Write results.csv, summary.csv and the report from the stored cells of ``spec``."""
    if spec.simulation is not None:
        from zoo.studies.product_matrix.simulate import run_simulation

        return run_simulation(spec, out_dir, log=lambda msg: None)
    from zoo.run.report import build_report as build

    return build(out_dir, spec)
