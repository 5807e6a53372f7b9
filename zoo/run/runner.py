"""Run a spec cell by cell into a run directory, and rebuild its tables and report.

The run directory's layout and atomic writes are the store's (:mod:`zoo.run.store`).
Cells already stored in the directory (same id: same resolved configuration) are skipped,
so rerunning ``zoo run SPEC --out DIR`` (or ``zoo run DIR``) resumes. A cell that failed in
its own code (an exception: the same configuration and seed fail again) is rerun only when
asked (``--retry-failed``); a cell that failed outside it (its worker process died, most
often out of memory) or whose stored files are damaged runs again on a plain resume. A
cell's record is written last, after its artifacts, so a run killed at any moment (even
with SIGKILL) loses only the cells that were in flight. Cells run through an executor
(:mod:`zoo.run.executors`): in this process, in local worker processes, or as Ray tasks,
all on one :class:`~zoo.runtime.Runtime` built once from the spec's ``runtime:`` section
and ``--device``.

Before the first cell the run directory is checked: a file, or a non-empty directory that
is not a run directory, is refused (nothing in it is touched, not even with ``fresh``); a
run holds the directory's lock for its whole length (a second run of it is refused); and
the directory must be writable. All of these raise :class:`~zoo.run.store.RunDirError`.

Faults while running: SIGINT and SIGTERM stop the run and keep what is stored
(:mod:`zoo.run.signals`); a result that cannot be written is kept, tried again and at
worst saved elsewhere (:mod:`zoo.run.saver`); a cell whose metrics hold NaN or infinity
is stored with ``nonfinite: [names]`` and a warning line. What the run says while it runs
is :mod:`zoo.run.feedback`'s.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zoo.run.executors import EXECUTORS, plan_workers, with_threads
from zoo.run.feedback import Feedback
from zoo.run.report import build_report as _build_report
from zoo.run.rundir import OutdatedRunDir, RunDirError, check_version, default_run_dir
from zoo.run.saver import Saver, describe_os_error
from zoo.run.signals import RunInterrupted, Stopper, describe_signal
from zoo.run.store import RunStore
from zoo.runtime import Runtime
from zoo.spec import Spec
from zoo.studies import SIMULATIONS

#: ``RunInterrupted`` and the run directory's errors are re-exported: :func:`run_spec`
#: raises them.
__all__ = [
    "OutdatedRunDir",
    "RunDirError",
    "RunInterrupted",
    "RunOutcome",
    "build_report",
    "check_version",
    "default_out_dir",
    "run_spec",
    "spec_runtime",
]


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


def default_out_dir(spec: Spec, root: Path = Path("runs")) -> Path:
    """``runs/<spec name>/<timestamp>`` (:func:`zoo.run.rundir.default_run_dir`)."""
    return default_run_dir(spec.name, root)


def spec_runtime(spec: Spec, device: str | None = None) -> Runtime:
    """The runtime of ``spec`` (its ``runtime:`` section), with ``--device`` winning."""
    return Runtime.from_section(getattr(spec, "runtime", None), device_override=device)


# --------------------------------------------------------------------------- the run


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
) -> RunOutcome:
    """Run every cell of ``spec`` not yet done in ``out_dir``, then build the report.

    Parameters
    ----------
    spec : Spec
    out_dir : Path
        Run directory; cells already stored there are skipped (resume). A new or empty
        directory, or a run directory.
    executor : {"local", "ray", "inprocess"}
        ``local`` runs cells in worker processes (in this process when ``workers == 1``),
        ``ray`` submits them as Ray tasks (to ``address``, or a local Ray instance).
    workers : int, optional
        Number of cells run at once (default: one per core, or one per GPU with CUDA);
        each gets ``cores // workers`` torch threads unless the spec fixes them.
    retry_failed : bool
        Rerun the cells stored as failed in their own code (by default they are kept;
        cells whose worker died are rerun anyway).
    progress : bool
        Show progress inside running cells (bars on a terminal, status lines otherwise).
    log : callable, optional
        Receives the lines (default: print to stderr).
    device : str, optional
        ``cpu``, ``cuda`` or ``cuda:N``: overrides the spec's ``runtime.device``.
    runtime : Runtime, optional
        The runtime itself (overrides the spec and ``device``).
    fresh : bool
        Delete the cells already stored (only in a run directory, holding its lock).

    Raises
    ------
    OutdatedRunDir
        ``out_dir`` was written with another spec_version (its cells are computed again
        in a fresh directory).
    RunDirError
        ``out_dir`` is a file or a non-empty directory that is not a run directory,
        another run is using it (:class:`~zoo.run.store.RunDirBusy`), or it cannot be
        written; checked before anything runs or is deleted.
    zoo.runtime.RuntimeUnavailable
        The device cannot be had on this machine (checked before anything runs).
    RunInterrupted
        SIGINT or SIGTERM stopped the run (what was stored stays; a line says so).

    A failing cell (exception, NaN loss, sampler failure) is recorded with its error; the
    others go on. Each cell is written as soon as it finishes, atomically.
    """
    log = log or (lambda msg: print(msg, file=sys.stderr))
    store = RunStore(out_dir)
    check_version(store, damaged_ok=True)  # a damaged spec.yaml is written anew
    if executor not in EXECUTORS:
        raise ValueError(f"unknown executor {executor!r}; use one of {sorted(EXECUTORS)}")
    if spec.simulation is None:
        runtime = runtime or spec_runtime(spec, device)
    store.check_target()
    stopper = Stopper()
    try:
        with store.lock(), stopper.installed():
            store.check_writable()
            if fresh:
                store.clear_cells()
            if spec.simulation is not None:  # no cells: seconds of numpy
                SIMULATIONS[type(spec.simulation)](spec, store, log=log)
                return RunOutcome(out_dir, 1, 1, 0, 0)
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
            )
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
    cells = spec.cells()
    records = {c.cell_id: store.record(c.cell_id) for c in cells}
    for problem in store.problems():
        log(f"zoo: damaged file: {problem}; it is computed again")
    status = {cid: (r or {}).get("status", "pending") for cid, r in records.items()}

    def to_run(cid: str) -> bool:
        rec = records[cid]
        return rec is None or (rec["status"] == "failed" and (retry_failed or rec.get("retry")))

    todo = [c for c in cells if to_run(c.cell_id)]
    done_before = len(cells) - len(todo)
    if any(r is not None for r in records.values()):
        kept_failed = sum(s == "failed" for cid, s in status.items() if not to_run(cid))
        again = sum(status[c.cell_id] == "failed" for c in todo)
        extra = f" ({kept_failed} failed: rerun with --retry-failed)" if kept_failed else ""
        why = "" if retry_failed else " whose worker died"
        more = f"; running {again} failed cells{why} again" if again else ""
        log(f"resuming {out_dir}: {done_before} of {len(cells)} cells already done{extra}{more}")
    if todo and executor != "inprocess":
        on = f" on {runtime.device}" if runtime.is_cuda else ""
        log(
            f"running {len(todo)} cells on {executor}: {n_workers} workers x {threads} "
            f"torch threads{on}"
        )
    shown = Feedback(cells, todo, done_before, n_workers, log, progress)
    saver = Saver(store, stopper, shown.say)
    # Ray's tasks report no progress: no list, so zoo status does not call them queued
    started = _Started(store, shown.on_progress if progress else None, executor != "ray")
    results = EXECUTORS[executor](
        todo,
        workers=n_workers,
        runtime=runtime,
        address=address,
        progress=False,
        on_progress=started.on_progress,
    )
    ran, report_error = 0, ""
    try:
        try:
            for res in results:
                ran += 1
                rec = res.record
                if saver.save(res):
                    status[rec["cell_id"]] = rec["status"]
                started.finished(rec["cell_id"])
                shown.finished(rec)
                _warn_about(rec, shown.say)
                saver.retry()
        finally:
            results.close()  # stops the workers at once when the loop ends early
            shown.close()
            started.clear()
        saver.retry(final=True)
        rescued = saver.rescue()
        try:
            if any(s != "pending" for s in status.values()):
                _build_report(store, spec)
                for note in store.notes():  # a hand-edited table was replaced
                    log(f"zoo: warning: {note}")
            else:
                report_error = "no cell is stored"
        except OSError as e:
            report_error = describe_os_error(e)
            log(
                f"zoo: could not write the report in {out_dir} ({report_error}); every "
                f"stored cell is kept: once there is room, run: zoo report {out_dir}"
            )
    except RunInterrupted as e:
        _stopped(e.signum, spec, store, saver, status, log)
        e.reported = True
        raise
    failed = sum(status[c.cell_id] == "failed" for c in cells)
    return RunOutcome(
        out_dir,
        len(cells),
        ran,
        done_before,
        failed,
        n_unsaved=len(saver.unsaved) + len(saver.rescued),
        rescued_to=rescued,
        report_error=report_error,
        problems=store.problems(),
    )


class _Started:
    """The cells whose fit has started (their first progress message) and are not stored
    yet, kept in the run directory for ``zoo status`` (:meth:`RunStore.write_running`) from
    the start of the run to its end, so it can tell running cells from queued ones (with
    ``track`` False, for executors that report no progress, no list is kept). A failed
    write only costs that hint."""

    def __init__(self, store: RunStore, show: Callable[..., None] | None, track: bool) -> None:
        self.store, self.show, self.track, self.ids = store, show, track, set()
        self._write(self.ids)

    def _write(self, ids: set[str] | None) -> None:
        if self.track:
            try:
                self.store.write_running(ids)
            except OSError:
                pass

    def on_progress(self, cell_id: str, desc: str, phase: str, i: int, n: int) -> None:
        if cell_id not in self.ids:
            self.ids.add(cell_id)
            self._write(self.ids)
        if self.show is not None:
            self.show(cell_id, desc, phase, i, n)

    def finished(self, cell_id: str) -> None:
        if cell_id in self.ids:
            self.ids.discard(cell_id)
            self._write(self.ids)

    def clear(self) -> None:
        self.ids.clear()
        self._write(None)


def _warn_about(rec: dict[str, Any], say: Callable[[str], None]) -> None:
    """Warning lines for a dead worker and for non-finite metrics."""
    cid = rec["cell_id"]
    if rec.get("worker_died"):
        say(
            f"zoo: worker died ({rec['worker_died']}) while running cell {cid}; the other "
            "cells go on, and a plain resume runs this one again (fewer --workers need "
            "less memory)"
        )
    if rec.get("nonfinite"):
        met = rec.get("metrics", {})
        bad = ", ".join(f"{k}={met.get(k)}" for k in rec["nonfinite"])
        say(
            f"zoo: warning: cell {cid} has non-finite metrics: {bad} (kept in results.csv; "
            "the summary's means are over the finite values only)"
        )


def _stopped(
    signum: int,
    spec: Spec,
    store: RunStore,
    saver: Saver,
    status: dict[str, str],
    log: Callable[[str], None],
) -> None:
    """Store what can be stored and say what was kept and how to resume."""
    saver.retry()
    saver.rescue()
    cells = spec.cells()
    stored = sum(status[c.cell_id] in ("ok", "failed") for c in cells)
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
