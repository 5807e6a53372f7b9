"""Run a spec cell by cell into a run directory, and rebuild its tables and report.

The run directory's layout and atomic writes are the store's (:mod:`zoo.execution.store`).
Cells already stored in the directory (same id: same resolved configuration) are skipped,
so rerunning ``zoo run SPEC --out DIR`` (or ``zoo run DIR``) resumes. A cell that failed in
its own code (an exception: the same configuration and seed fail again) is rerun only when
asked (``--retry-failed``); a cell that failed outside it (its worker process died, most
often out of memory) or whose stored files are damaged runs again on a plain resume. A
cell's record is written last, after its artifacts, so a run killed at any moment (even
with SIGKILL) loses only the cells that were in flight. Cells run through an executor
(:mod:`zoo.execution.executors`): in this process, in local worker processes, or as Ray tasks,
all on one :class:`~zoo.runtime.Runtime` built once from the spec's ``runtime:`` section
and ``--device``.

Before the first cell the run directory is checked: a file, or a non-empty directory that
is not a run directory, is refused (nothing in it is touched, not even with ``fresh``); a
run holds the directory's lock for its whole length (a second run of it is refused); and
the directory must be writable. All of these raise :class:`~zoo.execution.store.RunDirError`.

Faults while running: SIGINT and SIGTERM stop the run and keep what is stored
(:mod:`zoo.execution.signals`); a result that cannot be written is kept, tried again and at
worst saved elsewhere (:mod:`zoo.execution.saver`); a cell whose metrics hold NaN or infinity
is stored with ``nonfinite: [names]`` and a warning line. What the run says while it runs
is :mod:`zoo.execution.feedback`'s.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zoo.execution.execute import failed_result
from zoo.execution.executors import EXECUTORS, plan_workers, with_threads
from zoo.execution.phase import Phases
from zoo.execution.report import build_report as _build_report
from zoo.execution.rundir import OutdatedRunDir, RunDirError, check_version
from zoo.execution.saver import Saver, describe_os_error
from zoo.execution.signals import RunInterrupted, Stopper, describe_signal
from zoo.execution.store import RunStore
from zoo.execution.tune import TunePlan, search_lines
from zoo.execution.tune import plan as tune_plan
from zoo.runtime import Runtime
from zoo.spec import Spec
from zoo.studies import SIMULATIONS

#: ``RunInterrupted`` and the run directory's errors are re-exported: :func:`run_spec`
#: raises them.
__all__ = [
    "CHECKPOINT_EVERY",
    "OutdatedRunDir",
    "RunDirError",
    "RunInterrupted",
    "RunOutcome",
    "build_report",
    "check_version",
    "run_spec",
    "spec_runtime",
]

#: Seconds between two saves of a running sampler's state (``zoo run --checkpoint-every``):
#: a save of Trippe & Turner's concrete cell takes well under a second, a stop loses at
#: most this much of a 2.5-hour cell.
CHECKPOINT_EVERY = 600.0


@dataclass(frozen=True)
class RunOutcome:
    """What :func:`run_spec` did.

    ``n_unsaved`` cells were computed but could not be stored in the run directory (they
    are in ``rescued_to`` when that could be written); ``report_error`` says why the
    report could not be written, if it could not.
    """

    out_dir: Path
    n_cells: int
    n_ran: int
    n_skipped: int
    n_failed: int
    n_unsaved: int = 0
    rescued_to: Path | None = None
    report_error: str = ""
    problems: list[str] = field(default_factory=list)


def spec_runtime(spec: Spec, device: str | None = None) -> Runtime:
    """The runtime of ``spec`` (its ``runtime:`` section), with ``--device`` winning."""
    return Runtime.from_section(getattr(spec, "runtime", None), device_override=device)


# --------------------------------------------------------------------------- the run


def _open_run(
    spec: Spec, out_dir: Path, executor: str, device: str | None, runtime: Runtime | None
) -> tuple[RunStore, Runtime | None]:
    """The run directory's store, its version and target checked, and the runtime the cells
    get (none for a simulation), before anything runs or is deleted."""
    store = RunStore(out_dir)
    check_version(store, damaged_ok=True)  # a damaged spec.yaml is written anew
    if executor not in EXECUTORS:
        raise ValueError(f"unknown executor {executor!r}; use one of {sorted(EXECUTORS)}")
    if spec.simulation is None:
        runtime = runtime or spec_runtime(spec, device)
    store.check_target()
    return store, runtime


def _simulate(spec: Spec, store: RunStore, out_dir: Path, log: Callable[[str], None]):
    """A spec with a ``simulation`` section: no cells, its one study run and stored."""
    SIMULATIONS[type(spec.simulation)](spec, store, log=log)
    return RunOutcome(out_dir, 1, 1, 0, 0)


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
    fresh: bool = False,
    checkpoint_every: float | None = CHECKPOINT_EVERY,
) -> RunOutcome:
    """Run every cell of ``spec`` not yet done in ``out_dir``, then build the report.

    Parameters
    ----------
    spec : Spec
    out_dir : Path
        Run directory (new, empty, or a run directory): stored cells are skipped (resume).
    executor : {"local", "ray", "inprocess"}
        ``local`` runs cells in worker processes (in this process when ``workers == 1``),
        ``ray`` submits them as Ray tasks (to ``address``, or a local Ray instance).
    workers : int, optional
        Number of cells run at once (default: one per core, or one per GPU with CUDA);
        each gets ``cores // workers`` torch threads unless the spec fixes them.
    retry_failed : bool
        Rerun the cells stored as failed in their own code (those whose worker died are).
    progress, log : bool, callable, optional
        Show progress inside running cells (bars on a terminal, status lines otherwise);
        where the lines go (default: print to stderr).
    device, runtime : str or Runtime, optional
        ``cpu``, ``cuda`` or ``cuda:N``, overriding the spec's ``runtime.device``; or the
        runtime itself, overriding both.
    fresh : bool
        Delete the cells already stored (only in a run directory, holding its lock).
    checkpoint_every : float, optional
        Seconds between saves of a running sampled cell's sampler state in ``checkpoints/``
        (in-process and local executors), whence a next run resumes the cell; None or 0: none.

    Raises
    ------
    OutdatedRunDir
        ``out_dir`` was written with another spec_version (compute it in a new directory).
    RunDirError
        ``out_dir`` is a file or a non-empty directory that is not a run directory,
        another run is using it (:class:`~zoo.execution.store.RunDirBusy`), or it cannot be
        written; checked before anything runs or is deleted.
    zoo.runtime.RuntimeUnavailable
        The device cannot be had on this machine (checked before anything runs).
    RunInterrupted
        SIGINT or SIGTERM stopped the run (what was stored stays; a line says so).

    A failing cell (exception, NaN loss, sampler failure) is recorded with its error; the
    others go on. Each cell is written as soon as it finishes, atomically.
    """
    log = log or (lambda msg: print(msg, file=sys.stderr))
    store, runtime = _open_run(spec, out_dir, executor, device, runtime)
    stopper = Stopper()
    with _said_if_stopped_early(out_dir, log), store.lock(), stopper.installed():
        store.check_writable()
        if fresh:
            store.clear_cells()
        if spec.simulation is not None:  # no cells: seconds of numpy
            return _simulate(spec, store, out_dir, log)
        return _run_cells(
            spec,
            store,
            stopper,
            executor=executor,
            workers=workers,
            address=address,
            retry_failed=retry_failed,
            progress=progress,
            log=log,
            runtime=runtime,
            checkpoint_every=checkpoint_every,
        )


@contextmanager
def _said_if_stopped_early(out_dir: Path, log: Callable[[str], None]) -> Iterator[None]:
    """A SIGINT or SIGTERM that stops the run before any cell ran (one that the run has not
    reported itself) gets a line saying how to resume; it is raised again."""
    try:
        yield
    except RunInterrupted as e:
        if not e.reported:
            log(
                f"\nzoo: {describe_signal(e.signum)} before any cell ran; resume with: "
                f"zoo run {out_dir}"
            )
        raise


def _run_cells(
    spec: Spec,
    store: RunStore,
    stopper: Stopper,
    *,
    executor: str,
    workers: int | None,
    address: str | None,
    retry_failed: bool,
    progress: bool,
    log: Callable[[str], None],
    runtime: Runtime,
    checkpoint_every: float | None,
) -> RunOutcome:
    out_dir = store.root
    n_workers, threads = plan_workers(workers, runtime=runtime)
    runtime = with_threads(runtime, threads)
    if executor == "local" and n_workers == 1:
        executor = "inprocess"
    store.prepare()
    try:
        store.write_spec(spec)
    except OSError as e:
        raise RunDirError(f"cannot write in {out_dir}: {describe_os_error(e)}") from None
    run = Phases(
        store,
        stopper,
        executor,
        n_workers,
        threads,
        runtime,
        address,
        progress,
        log,
        checkpoint_every=checkpoint_every,
    )
    tp = tune_plan(spec, store.record)
    ran, report_error, rescued = 0, "", None
    try:
        if tp.tuning:
            ran += run.phase(tp.tuning, retry_failed, "tuning cells")
            tp = _after_tuning(spec, store, run, runtime, log)
        main = [c for c in tp.main if c.cell_id not in tp.failed and c.cell_id not in tp.waiting]
        if len(main) < len(tp.main) - len(tp.failed):
            log(
                f"zoo: {len(tp.waiting)} main cells wait for their tuning cells; resume to run them"
            )
        ran += run.phase(main, retry_failed, "cells" if not tp.tuning else "main cells")
        run.saver.retry(final=True)
        rescued = run.saver.rescue()
        report_error = _final_report(store, spec, run.status, log)
    except RunInterrupted as e:
        _stopped(e.signum, tp.cells, store, run.saver, run.status, log)
        e.reported = True
        raise
    cells = tp.cells
    failed = sum(run.status.get(c.cell_id) == "failed" for c in cells)
    return RunOutcome(
        out_dir,
        len(cells),
        ran,
        run.skipped,
        failed,
        n_unsaved=len(run.saver.unsaved) + len(run.saver.rescued),
        rescued_to=rescued,
        report_error=report_error,
        problems=store.problems(),
    )


def _after_tuning(
    spec: Spec, store: RunStore, run: Phases, runtime: Runtime, log: Callable[[str], None]
) -> TunePlan:
    """Once the tuning cells ran: the plan with the values chosen, its search lines logged,
    and each main cell whose tuning cells all failed stored as failed (it fails again until
    its tuning cells do not)."""
    tp = tune_plan(spec, store.record)
    for line in search_lines(tp, spec.tune.metric):
        log(line)
    for c in tp.main:  # every tuning cell of its search failed: it cannot run
        if c.cell_id in tp.failed:
            res = failed_result(c, tp.failed[c.cell_id], runtime)
            res.record.pop("retry")  # it fails again until its tuning cells do not
            run.save(res)
    return tp


def _final_report(
    store: RunStore, spec: Spec, status: dict[str, str], log: Callable[[str], None]
) -> str:
    """Build the report once any cell is stored; why it was not written ("" if it was).

    A disk that is full or cannot be written loses no cell: a line says to run ``zoo
    report`` once there is room."""
    out_dir = store.root
    try:
        if not any(s != "pending" for s in status.values()):
            return "no cell is stored"
        _build_report(store, spec)
        for note in store.notes():  # a hand-edited table was replaced
            log(f"zoo: warning: {note}")
    except OSError as e:
        report_error = describe_os_error(e)
        log(
            f"zoo: could not write the report in {out_dir} ({report_error}); every "
            f"stored cell is kept: once there is room, run: zoo report {out_dir}"
        )
        return report_error
    return ""


def _stopped(
    signum: int,
    cells: list[Any],
    store: RunStore,
    saver: Saver,
    status: dict[str, str],
    log: Callable[[str], None],
) -> None:
    """Store what can be stored and say what was kept and how to resume."""
    saver.retry()
    saver.rescue()
    stored = sum(status.get(c.cell_id) in ("ok", "failed") for c in cells)
    log(
        f"\nzoo: {describe_signal(signum)}: the running cells were stopped. {stored} of "
        f"{len(cells)} "
        f"cells are stored in {store.root} ({len(cells) - stored} not yet); resume with: "
        f"zoo run {store.root}"
    )


def build_report(
    out_dir: Path | RunStore, spec: Spec, *, log: Callable[[str], None] | None = None
) -> dict[str, Path]:
    """Write results.csv, summary.csv and the report from the stored cells of ``spec``.

    Damaged cell files are left out and named through ``log``.
    """
    store = out_dir if isinstance(out_dir, RunStore) else RunStore(out_dir)
    if spec.simulation is not None:
        return SIMULATIONS[type(spec.simulation)](spec, store, log=lambda msg: None)
    files = _build_report(store, spec)
    for problem in store.problems():
        (log or (lambda msg: None))(f"zoo: damaged file: {problem}")
    for note in store.notes():  # a hand-edited table was replaced
        (log or (lambda msg: None))(f"zoo: warning: {note}")
    return files
