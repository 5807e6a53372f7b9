"""Local worker processes (:func:`run_local_pool`), each given one cell at a time.

Each worker has its own pipe, so the driver always knows which cell each worker runs:

- progress inside a cell (optimizer steps, a sampler's warm-up and draws) comes back
  through the pipe (:mod:`zoo.inference.progress`) and goes to ``on_progress(cell_id,
  desc, phase, i, n)``;
- a sampler's saved state (:mod:`zoo.inference.checkpoint`) comes back as
  ``("checkpoint", cell_id, bytes)`` for the driver to store, and a cell is sent with the
  state an earlier run saved, so the worker resumes it;
- a worker that dies (killed by the kernel when memory runs out, a crash in native code)
  fails only the cell it was running, with a record saying so (``retry: true``: a resume
  runs it again); a new worker takes its place and the other cells go on;
- closing the generator (Ctrl-C, SIGTERM: the runner stops) kills the workers at once;
  workers ignore SIGINT (a Ctrl-C in the terminal reaches every process of the group: the
  driver decides) and die with the driver even when it is killed with SIGKILL, from
  before their first heavy import (:mod:`zoo.execution.worker_start`).

GPUs: with a CUDA runtime a local worker process takes one GPU for its lifetime
(:func:`_init_worker`).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from multiprocessing.connection import Connection, wait
from typing import Any

import torch

from zoo.execution.execute import (
    CellCheckpoints,
    CellResult,
    ProgressCallback,
    execute_cell,
    failed_result,
    set_worker_device,
)
from zoo.execution.worker_start import openmp_environment, start_worker
from zoo.inference.checkpoint import CheckpointChannel, set_checkpoint_channel
from zoo.inference.progress import set_progress_sink
from zoo.runtime import Runtime

__all__ = [
    "MAX_START_FAILURES",
    "STOP_GRACE",
    "WORKER_ENTRY",
    "WorkerStartError",
    "death_cause",
    "run_local_pool",
]

#: Workers that die before taking a cell, in a row, before the pool gives up.
MAX_START_FAILURES = 3
#: Seconds a stopping worker gets after SIGTERM before SIGKILL.
STOP_GRACE = 2.0
#: What a worker process runs once it dies with the driver (imported only then).
WORKER_ENTRY = "zoo.execution.local_pool:_worker_main"


class WorkerStartError(RuntimeError):
    """Worker processes die before they can take a cell (the cells stay pending)."""


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


def _init_worker(threads: int, device: str | None) -> None:
    """Start a local worker: fix torch threads, take a GPU if any (it already dies with the
    driver: :func:`zoo.execution.worker_start.start_worker` saw to it before the imports)."""
    torch.set_num_threads(threads)
    torch.set_num_interop_threads(1)
    if device is not None:
        set_worker_device(device)
        torch.cuda.set_device(torch.device(device))


def _pipe_sink(conn: Connection, cell_id: str) -> Callable[[str, str, int, int], None]:
    def sink(desc: str, phase: str, i: int, n: int) -> None:
        conn.send(("progress", cell_id, desc, phase, i, n))

    return sink


def _pipe_channel(conn: Connection, cell_id: str, resume: tuple[bytes | None, float]):
    saved, every_s = resume
    return CheckpointChannel(
        lambda: saved,
        lambda data: conn.send(("checkpoint", cell_id, data)),
        every_s,
        lambda line: conn.send(("say", cell_id, line)),
    )


def _worker_main(conn: Connection, threads: int, device: str | None) -> None:
    """A local worker: take ``(cell, runtime, resume)`` from ``conn`` (``resume``: the saved
    state and the seconds between saves, or None), send back progress, checkpoints and the
    :class:`CellResult`; end on ``None`` or when the driver goes away."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the driver handles Ctrl-C
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    _init_worker(threads, device)
    conn.send(("ready", os.getpid()))
    while True:
        try:
            job = conn.recv()
        except (EOFError, OSError):
            return
        if job is None:
            return
        cell, runtime, resume = job
        set_progress_sink(_pipe_sink(conn, cell.cell_id))
        if resume is not None:
            set_checkpoint_channel(_pipe_channel(conn, cell.cell_id, resume))
        try:
            res = execute_cell(cell, runtime, True)
        finally:
            set_progress_sink(None)
            set_checkpoint_channel(None)
        conn.send(("done", res))


class _Worker:
    """One local worker process, its pipe and the cell it runs."""

    def __init__(self, ctx: Any, slot: int, threads: int, device: str | None) -> None:
        self.slot, self.device = slot, device
        self.conn, child = ctx.Pipe(duplex=True)
        self.proc = ctx.Process(
            target=start_worker,  # the parent-death signal first, then the imports
            name=f"zoo-worker-{slot}",
            daemon=True,
            args=(os.getpid(), WORKER_ENTRY, child, threads, device),
        )
        # the worker starts with SIGINT blocked (a mask survives fork and exec), so a Ctrl-C
        # during its start cannot print a traceback; here it is delivered right after
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            with openmp_environment():  # read by OpenMP once, when the worker imports torch
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
    checkpoints: CellCheckpoints | None = None,
    **_: Any,
) -> Iterator[CellResult]:
    """Run the cells in ``workers`` fresh (spawned) worker processes, one cell each at a time.

    With ``checkpoints``, each cell goes with its saved sampler state and the states the
    workers send back are handed to ``checkpoints.save``.

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
            _hand_out(pool, queue, runtime, checkpoints)
            live = [w for w in pool if not w.dead]
            wait([x for w in live for x in (w.conn, w.proc.sentinel)], timeout=1.0)
            for i, w in enumerate(pool):
                if w.dead:
                    continue
                for res in _read(w, on_progress, checkpoints):
                    if res is None:  # the worker is ready
                        start_failures = 0
                    else:
                        yield res
                if not w.gone and w.proc.is_alive():
                    continue
                res, cause = _reap(w, runtime)
                if res is not None:
                    yield res
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


def _hand_out(
    pool: Sequence[_Worker],
    queue: deque,
    runtime: Runtime,
    checkpoints: CellCheckpoints | None,
) -> None:
    """Give each idle, ready worker the next cell, with its saved sampler state and the
    checkpoint interval when there are ``checkpoints`` (a broken pipe marks the worker
    gone)."""
    for w in pool:
        if w.ready and w.cell is None and queue and not (w.gone or w.dead):
            w.cell = queue.popleft()
            cid = w.cell.cell_id
            resume = None if checkpoints is None else (checkpoints.load(cid), checkpoints.every_s)
            try:
                w.conn.send((w.cell, runtime, resume))
            except (OSError, ValueError):
                w.gone = True


def _read(
    w: _Worker,
    on_progress: ProgressCallback | None,
    checkpoints: CellCheckpoints | None,
) -> Iterator[CellResult | None]:
    """Act on a worker's waiting messages: None when it says it is ready, the result of
    each cell it finished; progress goes to ``on_progress``, sampler states and their
    notes to ``checkpoints``."""
    for msg in w.messages():
        if msg[0] == "ready":
            w.ready = True
            yield None
        elif msg[0] == "progress":
            if on_progress is not None and w.cell is not None:
                on_progress(*msg[1:])
        elif msg[0] == "checkpoint" and checkpoints is not None:
            checkpoints.save(msg[1], msg[2])
        elif msg[0] == "say" and checkpoints is not None:
            checkpoints.say(msg[1], msg[2])
        elif msg[0] == "done":
            w.cell = None
            yield msg[1]


def _reap(w: _Worker, runtime: Runtime) -> tuple[CellResult | None, str]:
    """A worker that ended or whose pipe broke, stopped: the failed result of the cell it
    was running (None if it had none), and why it died (:func:`death_cause`)."""
    w.proc.join(5.0)
    cause = death_cause(w.proc.exitcode)
    w.stop()
    w.dead = True
    if w.cell is None:
        return None, cause
    res = failed_result(
        w.cell,
        f"WorkerDied: the worker process (pid {w.proc.pid}) running this cell died ({cause})",
        runtime,
        died=cause,
    )
    w.cell = None
    return res, cause
