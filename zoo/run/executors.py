"""Where the cells of a sweep run: in this process, in local worker processes, or on Ray.

Every executor runs the same function, :func:`execute_cell`, on each cell and yields a
:class:`CellResult` as soon as a cell finishes (in completion order); the runner hands each
result to the run store at once, so a killed sweep loses only the cells in flight. Workers
never write to the run directory themselves: files (the cell record and its artifacts)
travel back as bytes, which is what a Ray cluster without a shared file system needs, and
keeps the driver the only writer.

Local workers (:func:`run_local_pool`) are processes of their own, each given one cell at
a time through its own pipe, so the driver always knows which cell each worker runs:

- progress inside a cell (optimizer steps, a sampler's warm-up and draws) comes back
  through the pipe (:mod:`zoo.inference.progress`) and goes to ``on_progress(cell_id,
  desc, phase, i, n)``;
- a worker that dies (killed by the kernel when memory runs out, a crash in native code)
  fails only the cell it was running, with a record saying so (``retry: true``: a resume
  runs it again); a new worker takes its place and the other cells go on;
- closing the generator (Ctrl-C, SIGTERM: the runner stops) kills the workers at once;
  workers ignore SIGINT (a Ctrl-C in the terminal reaches every process of the group: the
  driver decides) and die with the driver even when it is killed with SIGKILL.

Threads: each cell runs with ``runtime.threads`` torch intra-op threads, chosen so that
``workers x threads <= cores`` (:func:`plan_workers`). The numbers of a cell depend only
on its configuration, its runtime's device and dtype, and this thread count, so a sweep run
with the same ``--workers`` on the local executor and on Ray gives the same ``results.csv``.

GPUs: with a CUDA runtime there is one worker per visible GPU by default. A local worker
process takes one GPU for its lifetime (:func:`_init_worker`); a Ray task asks for
``num_gpus=1`` and Ray makes its GPU the only visible one.
"""

from __future__ import annotations

import ctypes
import dataclasses
import math
import multiprocessing as mp
import os
import signal
import sys
import time
import traceback
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any

import torch

from zoo.inference.progress import set_progress_sink
from zoo.run.cell import run_cell
from zoo.runtime import Runtime

__all__ = [
    "EXECUTORS",
    "CellResult",
    "ProgressCallback",
    "WorkerStartError",
    "execute_cell",
    "nonfinite_metrics",
    "plan_workers",
    "run_in_process",
    "run_local_pool",
    "run_ray",
    "short_error",
    "with_threads",
]

#: ``on_progress(cell_id, desc, phase, i, n)``: step ``i`` of ``n`` of a phase of a cell.
ProgressCallback = Callable[[str, str, str, int, int], None]

#: The device a local worker process was given at start (None: use the runtime's own).
_WORKER_DEVICE: str | None = None
#: Workers that die before taking a cell, in a row, before the pool gives up.
MAX_START_FAILURES = 3
#: Seconds a stopping worker gets after SIGTERM before SIGKILL.
STOP_GRACE = 2.0


class WorkerStartError(RuntimeError):
    """Worker processes die before they can take a cell (the cells stay pending)."""


@dataclass(frozen=True)
class CellResult:
    """One finished cell: its JSON record and any files to store beside it.

    Attributes
    ----------
    record : dict
        ``cell_id``, ``axes``, ``config``, ``status`` (ok or failed), ``error``,
        ``traceback`` (failed cells), ``metrics``, ``time_s``, ``threads``, ``device``.
    artifacts : dict of str to bytes
        File suffix (e.g. ``".nc"``) to contents, written as ``cells/<cell id><suffix>``.
    """

    record: dict[str, Any]
    artifacts: dict[str, bytes] = field(default_factory=dict)


def plan_workers(
    workers: int | None, cores: int | None = None, runtime: Runtime | None = None
) -> tuple[int, int]:
    """``(workers, torch threads per worker)`` with ``workers x threads <= cores``.

    ``workers=None`` means one worker per core on the CPU (``cores // runtime.threads``
    when the spec fixes the threads) and one worker per visible GPU with CUDA. A spec's
    ``runtime.threads`` is kept as given.
    """
    cores = cores or os.cpu_count() or 1
    fixed = runtime.threads if runtime is not None else None
    if workers is None:
        if runtime is not None and runtime.is_cuda:
            workers = len(runtime.worker_runtimes())
        else:
            workers = max(1, cores // fixed) if fixed else cores
    if workers < 1:
        raise ValueError(f"--workers must be at least 1, got {workers}")
    return workers, fixed or max(1, cores // workers)


def execute_cell(cell: Any, runtime: Runtime, progress: bool = False) -> CellResult:
    """Run one cell on ``runtime``; never raises for a failing cell.

    An exception inside the cell (a bad configuration, a NaN loss, a sampler failure) is
    caught and recorded with its message and traceback. Metrics that are NaN or infinite
    are named in the record's ``nonfinite`` list.
    """
    if _WORKER_DEVICE is not None and runtime.is_cuda:
        runtime = runtime.on_device(_WORKER_DEVICE)
    t0 = time.perf_counter()
    record: dict[str, Any] = _record(cell, runtime)
    artifacts: dict[str, bytes] = {}
    try:
        with runtime.threads_scope():
            out = run_cell(cell, runtime, progress=progress)
        artifacts = dict(out.artifacts)
        record.update(status="ok", error="", metrics=out.metrics)
        if bad := nonfinite_metrics(out.metrics):
            record["nonfinite"] = bad
    except Exception as e:  # a failing cell must not stop the sweep
        record.update(
            status="failed",
            error=short_error(e),
            traceback=traceback.format_exc(),
            metrics={},
        )
    record["time_s"] = time.perf_counter() - t0
    return CellResult(record, artifacts)


def nonfinite_metrics(metrics: dict[str, Any]) -> list[str]:
    """Names of the metrics that are NaN or infinite numbers, in order."""
    out = []
    for name, v in metrics.items():
        try:
            bad = isinstance(v, int | float) and not isinstance(v, bool) and not math.isfinite(v)
        except (TypeError, ValueError, OverflowError):
            bad = False
        if bad:
            out.append(name)
    return out


def _record(cell: Any, runtime: Runtime) -> dict[str, Any]:
    return {
        "cell_id": cell.cell_id,
        "axes": cell.axes,
        "config": cell.config(),
        "threads": runtime.threads,
        "device": str(runtime.device),
    }


def short_error(e: BaseException, limit: int = 300) -> str:
    """``Type: first line of the message`` cut to ``limit`` characters (the full text is in
    the cell's traceback), so one failed cell cannot flood results.csv or the report."""
    text = str(e).strip().splitlines()[0] if str(e).strip() else ""
    msg = f"{type(e).__name__}: {text}" if text else type(e).__name__
    return msg if len(msg) <= limit else msg[: limit - 3] + "..."


def _failed(cell: Any, error: str, runtime: Runtime, *, died: str | None = None) -> CellResult:
    """The record of a cell that failed outside its own code (a resume runs it again:
    ``retry: true``); ``died`` says how its worker process ended."""
    record = _record(cell, runtime)
    record.update(status="failed", error=error, metrics={}, time_s=0.0, retry=True)
    if died is not None:
        record["worker_died"] = died
    return CellResult(record)


def death_cause(exitcode: int | None) -> str:
    """How a worker process ended, in words (``killed by signal 9 (SIGKILL), likely out
    of memory``)."""
    if exitcode is None:
        return "stopped answering"
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = "unknown signal"
        why = ", likely out of memory" if -exitcode == signal.SIGKILL else ""
        return f"killed by signal {-exitcode} ({name}){why}"
    return f"exit code {exitcode}"


def _sink_to(on_progress: ProgressCallback | None, cell_id: str):
    if on_progress is None:
        return None
    return lambda desc, phase, i, n: on_progress(cell_id, desc, phase, i, n)


def run_in_process(
    cells: Sequence[Any],
    *,
    runtime: Runtime,
    progress: bool,
    on_progress: ProgressCallback | None = None,
    **_: Any,
) -> Iterator[CellResult]:
    """Run the cells one after the other in this process.

    With ``on_progress``, the fits report to it; else, with ``progress``, they draw
    their own bars.
    """
    runtime = runtime.worker_runtimes()[0]
    for cell in cells:
        before = set_progress_sink(_sink_to(on_progress, cell.cell_id))
        try:
            yield execute_cell(cell, runtime, progress or on_progress is not None)
        finally:
            set_progress_sink(before)


def _init_worker(threads: int, parent: int, device: str | None) -> None:
    """Start a local worker: die with the driver, fix torch threads, take a GPU if any."""
    global _WORKER_DEVICE
    _die_with_parent(parent)
    torch.set_num_threads(threads)
    torch.set_num_interop_threads(1)
    if device is not None:
        _WORKER_DEVICE = device
        torch.cuda.set_device(torch.device(device))


def _die_with_parent(parent: int) -> None:
    """Ask Linux to kill this worker when the driver dies (even by SIGKILL), so that a
    killed sweep leaves no orphan workers computing cells nobody will store."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the driver died before prctl took effect
        os._exit(1)


def _pipe_sink(conn: Connection, cell_id: str) -> Callable[[str, str, int, int], None]:
    def sink(desc: str, phase: str, i: int, n: int) -> None:
        conn.send(("progress", cell_id, desc, phase, i, n))

    return sink


def _worker_main(conn: Connection, threads: int, parent: int, device: str | None) -> None:
    """A local worker: take ``(cell, runtime)`` from ``conn``, send back progress and the
    :class:`CellResult`; end on ``None`` or when the driver goes away."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the driver handles Ctrl-C
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    _init_worker(threads, parent, device)
    conn.send(("ready", os.getpid()))
    while True:
        try:
            job = conn.recv()
        except (EOFError, OSError):
            return
        if job is None:
            return
        cell, runtime = job
        set_progress_sink(_pipe_sink(conn, cell.cell_id))
        try:
            res = execute_cell(cell, runtime, True)
        finally:
            set_progress_sink(None)
        conn.send(("done", res))


class _Worker:
    """One local worker process, its pipe and the cell it runs."""

    def __init__(self, ctx: Any, slot: int, threads: int, device: str | None) -> None:
        self.slot, self.device = slot, device
        self.conn, child = ctx.Pipe(duplex=True)
        self.proc = ctx.Process(
            target=_worker_main,
            name=f"zoo-worker-{slot}",
            daemon=True,
            args=(child, threads, os.getpid(), device),
        )
        # the worker starts with SIGINT blocked (a mask survives fork and exec), so a Ctrl-C
        # during its start cannot print a traceback; here it is delivered right after
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            self.proc.start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        child.close()
        self.ready = False
        self.cell: Any = None
        self.gone = False  # the pipe broke
        self.dead = False  # ended and handled

    def messages(self) -> Iterator[tuple]:
        """The messages waiting in the pipe; sets :attr:`gone` when the pipe broke."""
        while not self.gone:
            try:
                if not self.conn.poll():
                    return
                msg = self.conn.recv()
            except Exception:  # EOF, or a message cut short by the worker's death
                self.gone = True
                return
            yield msg

    def stop(self) -> None:
        """End the process now (SIGTERM, then SIGKILL after :data:`STOP_GRACE` s)."""
        if self.proc.is_alive():
            self.proc.terminate()
        self.conn.close()


def _stop_all(workers: Sequence[_Worker]) -> None:
    for w in workers:
        w.stop()
    deadline = time.monotonic() + STOP_GRACE
    for w in workers:
        w.proc.join(max(0.0, deadline - time.monotonic()))
        if w.proc.is_alive():
            w.proc.kill()
            w.proc.join(1.0)


def run_local_pool(
    cells: Sequence[Any],
    *,
    workers: int,
    runtime: Runtime,
    on_progress: ProgressCallback | None = None,
    **_: Any,
) -> Iterator[CellResult]:
    """Run the cells in ``workers`` fresh (spawned) worker processes, one cell each at a time.

    With CUDA the workers take the visible GPUs in turn (worker ``i`` gets GPU
    ``i mod n``) and keep theirs for their lifetime. A worker that dies fails its cell
    (:func:`death_cause` in the error) and is replaced; closing the generator stops the
    workers at once.

    Raises
    ------
    WorkerStartError
        When :data:`MAX_START_FAILURES` workers in a row die before taking a cell.
    """
    if not cells:
        return
    ctx = mp.get_context("spawn")  # no fork of a process that already holds torch threads
    slots = runtime.worker_runtimes() if runtime.is_cuda else []
    n_workers = max(1, min(workers, len(cells)))

    def device(i: int) -> str | None:
        return str(slots[i % len(slots)].device) if slots else None

    queue = deque(cells)
    pool: list[_Worker] = []
    start_failures = 0
    try:
        pool = [_Worker(ctx, i, runtime.threads, device(i)) for i in range(n_workers)]
        while queue or any(w.cell is not None for w in pool):
            for w in pool:  # give idle workers a cell
                if w.ready and w.cell is None and queue and not (w.gone or w.dead):
                    w.cell = queue.popleft()
                    try:
                        w.conn.send((w.cell, runtime))
                    except (OSError, ValueError):
                        w.gone = True
            live = [w for w in pool if not w.dead]
            wait([x for w in live for x in (w.conn, w.proc.sentinel)], timeout=1.0)
            for i, w in enumerate(pool):
                if w.dead:
                    continue
                for msg in w.messages():
                    if msg[0] == "ready":
                        w.ready, start_failures = True, 0
                    elif msg[0] == "progress":
                        if on_progress is not None and w.cell is not None:
                            on_progress(*msg[1:])
                    elif msg[0] == "done":
                        w.cell = None
                        yield msg[1]
                if not w.gone and w.proc.is_alive():
                    continue
                w.proc.join(5.0)
                cause = death_cause(w.proc.exitcode)
                w.stop()
                w.dead = True
                if w.cell is not None:
                    yield _failed(
                        w.cell,
                        f"WorkerDied: the worker process (pid {w.proc.pid}) "
                        f"running this cell died ({cause})",
                        runtime,
                        died=cause,
                    )
                    w.cell = None
                elif not w.ready:
                    start_failures += 1
                    if start_failures >= MAX_START_FAILURES:
                        raise WorkerStartError(
                            f"{start_failures} worker processes in a row died before taking "
                            f"a cell (the last: {cause}); see the messages above"
                        )
                if queue:
                    pool[i] = _Worker(ctx, w.slot, runtime.threads, w.device)
    finally:
        _stop_all(pool)


def _ray():
    try:
        import ray  # optional dependency: only the Ray executor needs it
    except ImportError:
        raise RuntimeError(
            'the Ray executor needs Ray: pip install "bnn-zoo[ray]" (or pip install "ray[default]")'
        ) from None
    return ray


def run_ray(
    cells: Sequence[Any],
    *,
    workers: int,
    runtime: Runtime,
    address: str | None = None,
    **_: Any,
) -> Iterator[CellResult]:
    """Submit the cells as Ray tasks (``num_cpus=threads`` each, ``num_gpus=1`` with CUDA).

    With ``address`` (e.g. ``auto`` or ``ray://host:10001``) they go to that running
    cluster, whose nodes must have bnn-zoo installed; without it a local Ray instance with
    ``workers x threads`` CPUs (and this machine's GPUs) is started for this run and
    stopped afterwards. Ray shows each GPU task only its own GPU, so tasks run on ``cuda``.
    """
    ray = _ray()
    threads = runtime.threads
    gpus = 1 if runtime.is_cuda else 0
    task_runtime = runtime.on_device("cuda") if gpus else runtime
    started_here = not ray.is_initialized()
    if started_here:
        if address:
            ray.init(address=address, log_to_driver=False)
        else:
            ray.init(
                num_cpus=workers * threads,
                num_gpus=len(runtime.worker_runtimes()) * gpus,
                include_dashboard=False,
                log_to_driver=False,
            )
    pending: dict[Any, Any] = {}
    try:
        task = ray.remote(num_cpus=threads, num_gpus=gpus, max_retries=0)(execute_cell)
        pending = {task.remote(c, task_runtime, False): c for c in cells}
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                cell = pending.pop(ref)
                try:
                    res = ray.get(ref)
                except Exception as e:  # the task itself died (worker crash, node lost)
                    res = _failed(cell, f"RayTaskError: {short_error(e)}", task_runtime)
                yield res
    finally:
        for ref in list(pending):
            ray.cancel(ref, force=True)
        if started_here:
            ray.shutdown()


#: ``--executor`` name -> runner of a list of cells.
EXECUTORS = {"local": run_local_pool, "ray": run_ray, "inprocess": run_in_process}


def with_threads(runtime: Runtime, threads: int) -> Runtime:
    """``runtime`` with ``threads`` torch threads unless the spec fixed them."""
    return runtime if runtime.threads is not None else dataclasses.replace(runtime, threads=threads)
