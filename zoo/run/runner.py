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

Faults while running:

- SIGINT (Ctrl-C) and SIGTERM stop the run at once: the workers are stopped, the cells
  already stored stay, and :class:`RunInterrupted` (a :class:`KeyboardInterrupt`) says
  which signal, after a line saying what was kept and how to resume. The command line
  exits with ``128 + signal``: 130 for SIGINT, 143 for SIGTERM.
- A result that cannot be written (full disk) is kept in memory and written again after
  later cells and at the end (:data:`WRITE_RETRY_DELAYS`); what still cannot be written is
  saved to a new directory under the system's temporary directory, and the run says where.
  Nothing computed is dropped without a line saying so.
- A cell whose metrics hold NaN or infinity is stored with ``nonfinite: [names]`` and a
  warning line.

Feedback: one line per finished cell with the time left, estimated per method (the mean
time of the method's finished cells times its cells still to run, over the workers). With
``progress`` the steps inside each running cell (optimizer steps; a sampler's warm-up and
draws) are shown: one bar per running cell on a terminal, else a status line per cell at
most every :data:`STATUS_EVERY` seconds.
"""

from __future__ import annotations

import json
import signal
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from zoo.run.executors import EXECUTORS, CellResult, plan_workers, with_threads
from zoo.run.report import build_report as _build_report
from zoo.run.store import OutdatedRunDir, RunDirError, RunStore, check_version
from zoo.runtime import Runtime
from zoo.spec import Spec
from zoo.studies import SIMULATIONS

__all__ = [
    "STATUS_EVERY",
    "WRITE_RETRY_DELAYS",
    "OutdatedRunDir",
    "RunDirError",
    "RunInterrupted",
    "RunOutcome",
    "build_report",
    "check_version",
    "default_out_dir",
    "format_seconds",
    "run_spec",
    "spec_runtime",
]

#: Seconds between two status lines of one running cell when stderr is not a terminal.
STATUS_EVERY = 30.0
#: Pauses (s) between the last tries to store results that could not be written.
WRITE_RETRY_DELAYS = (1.0, 2.0, 4.0)
#: Seconds between tries to store an unsaved result while other cells still run.
RETRY_EVERY = 5.0


class RunInterrupted(KeyboardInterrupt):
    """The run was stopped by a signal (SIGINT or SIGTERM); ``signum`` says which.

    Everything stored before it stays; a resume runs the rest.
    """

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = int(signum)
        self.reported = False  # a line has said what was kept


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
    """``runs/<spec name>/<timestamp>``."""
    return root / spec.name / datetime.now().strftime("%Y%m%d-%H%M%S")


def spec_runtime(spec: Spec, device: str | None = None) -> Runtime:
    """The runtime of ``spec`` (its ``runtime:`` section), with ``--device`` winning."""
    return Runtime.from_section(getattr(spec, "runtime", None), device_override=device)


def format_seconds(s: float) -> str:
    """``42s``, ``12m05s``, ``3h10m``."""
    s = max(0.0, s)
    if s < 90:
        return f"{s:.0f}s"
    if s < 5400:
        return f"{int(s // 60)}m{int(s % 60):02d}s"
    return f"{int(s // 3600)}h{int(s % 3600 // 60):02d}m"


# --------------------------------------------------------------------------- signals


class _Stopper:
    """SIGINT and SIGTERM raise :class:`RunInterrupted`, except inside :meth:`deferring`
    (a cell being written), where they are raised when the write is done."""

    def __init__(self) -> None:
        self.deferred = 0
        self.pending: int | None = None

    def _handler(self, signum: int, frame: Any) -> None:
        if self.deferred:
            self.pending = signum
            return
        raise RunInterrupted(signum)

    @contextmanager
    def installed(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield  # signal handlers can only be set from the main thread
            return
        old = {s: signal.signal(s, self._handler) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for s, h in old.items():
                signal.signal(s, h)

    @contextmanager
    def deferring(self) -> Iterator[None]:
        self.deferred += 1
        try:
            yield
        finally:
            self.deferred -= 1
            if not self.deferred and self.pending is not None:
                signum, self.pending = self.pending, None
                raise RunInterrupted(signum)


# --------------------------------------------------------------------------- storing


class _Saver:
    """Writes results to the store; keeps those it cannot write and tries them again."""

    def __init__(self, store: RunStore, stopper: _Stopper, say: Callable[[str], None]) -> None:
        self.store, self.stopper, self.say = store, stopper, say
        self.unsaved: list[CellResult] = []
        self.rescued: list[CellResult] = []
        self.next_try = 0.0

    def _write(self, res: CellResult) -> None:
        with self.stopper.deferring():
            self.store.write_cell(res.record, res.artifacts)

    def save(self, res: CellResult) -> bool:
        """Store ``res``; on failure keep it (and say so). True when stored."""
        try:
            self._write(res)
            return True
        except OSError as e:
            self.unsaved.append(res)
            self.next_try = time.monotonic() + RETRY_EVERY
            self.say(
                f"zoo: could not store cell {res.record['cell_id']} in {self.store.root} "
                f"({_why(e)}); its result is kept in memory and written again "
                "later"
            )
            return False

    def retry(self, final: bool = False) -> None:
        """Try the unsaved results again: now if due (or ``final``: with pauses)."""
        delays = (0.0, *WRITE_RETRY_DELAYS) if final else (0.0,)
        if not final and time.monotonic() < self.next_try:
            return
        for delay in delays:
            if not self.unsaved:
                return
            time.sleep(delay)
            still = []
            for res in self.unsaved:
                try:
                    self._write(res)
                    self.say(f"zoo: stored cell {res.record['cell_id']} on a later try")
                except OSError:
                    still.append(res)
            self.unsaved = still
        self.next_try = time.monotonic() + RETRY_EVERY

    def rescue(self) -> Path | None:
        """Write what is still unsaved to a new temporary directory; say where (or that
        it is lost). Returns that directory, None when nothing was left or it failed."""
        if not self.unsaved:
            return None
        ids = [r.record["cell_id"] for r in self.unsaved]
        try:
            where = Path(tempfile.mkdtemp(prefix="zoo-unsaved-")) / "cells"
            where.mkdir()
            for res in self.unsaved:
                cid = res.record["cell_id"]
                for suffix, data in res.artifacts.items():
                    (where / f"{cid}{suffix}").write_bytes(data)
                text = json.dumps(res.record, indent=1, sort_keys=True)
                (where / f"{cid}.json").write_text(text, encoding="utf-8")
        except OSError as e:
            self.say(
                f"zoo: LOST: the results of {len(ids)} computed cells could not be "
                f"written anywhere ({_why(e)}): {', '.join(ids)}; a resume computes "
                "them again"
            )
            return None
        self.say(
            f"zoo: {len(ids)} computed cells could not be stored in {self.store.root}; "
            f"they were saved to {where}. Once there is room, move them in with: "
            f"mv {where}/* {self.store.cells_dir}/  (or a resume computes them "
            "again)"
        )
        self.rescued += self.unsaved
        self.unsaved = []
        return where.parent


def _why(e: OSError) -> str:
    return e.strerror or str(e) or type(e).__name__


# --------------------------------------------------------------------------- feedback


class _Feedback:
    """Cell lines, per-method time left, and progress inside running cells."""

    def __init__(
        self,
        cells: list[Any],
        todo: list[Any],
        done_before: int,
        workers: int,
        log: Callable[[str], None],
        progress: bool,
    ) -> None:
        self.method = {c.cell_id: c.method.name for c in cells}
        self.left = Counter(self.method[c.cell_id] for c in todo)
        self.times: dict[str, list[float]] = defaultdict(list)
        self.workers = max(1, workers)
        self.log = log
        self.k, self.n = done_before, len(cells)
        self.progress = progress
        self.tty = progress and _isatty()
        self.running: dict[str, dict[str, Any]] = {}
        self.bar = None
        self.slots: list[Any] = []
        if self.tty:
            fmt = "{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}{postfix}]"
            self.bar = tqdm(
                total=self.n,
                initial=self.k,
                desc="cells",
                unit="cell",
                dynamic_ncols=True,
                bar_format=fmt,
                file=sys.stderr,
            )
            self.slots = [
                tqdm(
                    total=1,
                    position=i + 1,
                    leave=False,
                    bar_format="  {desc}",
                    dynamic_ncols=True,
                    file=sys.stderr,
                )
                for i in range(min(self.workers, len(todo)))
            ]
            self.free = list(range(len(self.slots)))

    def say(self, msg: str) -> None:
        """A line that stays (above the bars on a terminal)."""
        if self.bar is not None:
            self.bar.write(msg, file=sys.stderr)
        else:
            self.log(msg)

    def on_progress(self, cell_id: str, desc: str, phase: str, i: int, n: int) -> None:
        """Progress inside a running cell (from :mod:`zoo.inference.progress`)."""
        now = time.monotonic()
        st = self.running.setdefault(cell_id, {"t0": now, "shown": now, "phase": None})
        label = "" if cell_id.startswith(desc) else f"{desc} "
        what = f"{label}{phase}"
        if self.tty:
            if "slot" not in st:
                if not self.free:
                    return
                st["slot"] = self.free.pop(0)
            filled = round(20 * i / n) if n else 0
            meter = "#" * filled + "-" * (20 - filled)
            text = f"{_cut(cell_id, 40)} {what} [{meter}] {i}/{n}"
            self.slots[st["slot"]].set_description_str(text, refresh=True)
            return
        if not self.progress:
            return
        changed = st["phase"] is not None and st["phase"] != what
        if now - st["shown"] >= STATUS_EVERY or (changed and now - st["t0"] >= STATUS_EVERY):
            st["shown"] = now
            self.log(f"  {cell_id}: {what} {i}/{n} ({format_seconds(now - st['t0'])} in)")
        st["phase"] = what

    def finished(self, rec: dict[str, Any]) -> None:
        """A cell's line: status, headline metrics, its time and the time left."""
        cid = rec["cell_id"]
        st = self.running.pop(cid, {})
        if "slot" in st:
            self.slots[st["slot"]].set_description_str("", refresh=True)
            self.free.append(st["slot"])
            self.free.sort()
        m = self.method.get(cid)
        if m is not None:
            self.left[m] -= 1
            if rec.get("status") == "ok":
                self.times[m].append(float(rec.get("time_s", 0.0)))
        self.k += 1
        eta = self.eta()
        if rec.get("status") == "ok":
            met = rec.get("metrics", {})
            shown = ", ".join(
                f"{key}={met[key]:.4g}"
                for key in ("accuracy", "nll", "rmse")
                if isinstance(met.get(key), int | float)
            )
            status = f"ok {shown}"
        else:
            status = f"FAILED {rec.get('error', '')}"
        self.say(f"[{self.k}/{self.n}] {cid}: {status} ({rec.get('time_s', 0.0):.1f}s; {eta})")
        if self.bar is not None:
            self.bar.update(1)
            self.bar.set_postfix_str(eta)

    def eta(self) -> str:
        """Time left: per method, the mean time of its finished cells times its cells to
        run, summed and spread over the workers; methods with no finished cell are named."""
        work, unknown, cells_left = 0.0, [], 0
        for m, left in self.left.items():
            if left <= 0:
                continue
            cells_left += left
            if self.times[m]:
                work += sum(self.times[m]) / len(self.times[m]) * left
            else:
                unknown.append(m)
        if not cells_left:
            return "done"
        text = f"~{format_seconds(work / min(self.workers, cells_left))} left" if work else ""
        if unknown:
            more = f"{', '.join(unknown)}: no cell timed yet"
            text = f"{text} + {more}" if text else f"time left unknown ({more})"
        return text

    def close(self) -> None:
        for b in self.slots:
            b.close()
        if self.bar is not None:
            self.bar.close()


def _isatty() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


def _cut(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


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
    check_version(store)
    if executor not in EXECUTORS:
        raise ValueError(f"unknown executor {executor!r}; use one of {sorted(EXECUTORS)}")
    if spec.simulation is None:
        runtime = runtime or spec_runtime(spec, device)
    store.check_target()
    stopper = _Stopper()
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
            log(f"\nzoo: {_how(e.signum)} before any cell ran; resume with: zoo run {out_dir}")
        raise


def _run_cells(
    spec: Spec,
    store: RunStore,
    stopper: _Stopper,
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
        raise RunDirError(f"cannot write in {out_dir}: {_why(e)}") from None
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
    shown = _Feedback(cells, todo, done_before, n_workers, log, progress)
    saver = _Saver(store, stopper, shown.say)
    results = EXECUTORS[executor](
        todo,
        workers=n_workers,
        runtime=runtime,
        address=address,
        progress=False,
        on_progress=shown.on_progress if progress else None,
    )
    ran, report_error = 0, ""
    try:
        try:
            for res in results:
                ran += 1
                rec = res.record
                if saver.save(res):
                    status[rec["cell_id"]] = rec["status"]
                shown.finished(rec)
                _warn_about(rec, shown.say)
                saver.retry()
        finally:
            results.close()  # stops the workers at once when the loop ends early
            shown.close()
        saver.retry(final=True)
        rescued = saver.rescue()
        try:
            if any(s != "pending" for s in status.values()):
                _build_report(store, spec)
            else:
                report_error = "no cell is stored"
        except OSError as e:
            report_error = _why(e)
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
    saver: _Saver,
    status: dict[str, str],
    log: Callable[[str], None],
) -> None:
    """Store what can be stored and say what was kept and how to resume."""
    saver.retry()
    saver.rescue()
    cells = spec.cells()
    stored = sum(status[c.cell_id] in ("ok", "failed") for c in cells)
    log(
        f"\nzoo: {_how(signum)}: the running cells were stopped. {stored} of {len(cells)} "
        f"cells are stored in {store.root} ({len(cells) - stored} not yet); resume with: "
        f"zoo run {store.root}"
    )


def _how(signum: int) -> str:
    if signum == signal.SIGINT:
        return "interrupted (Ctrl-C)"
    return f"stopped by {signal.Signals(signum).name}"


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
    return files
