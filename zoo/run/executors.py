"""Where the cells of a sweep run: in this process, in local worker processes, or on Ray.

Every executor runs the same function, :func:`execute_cell`, on each cell and yields a
:class:`CellResult` as soon as a cell finishes (in completion order); the runner hands each
result to the run store at once, so a killed sweep loses only the cells in flight. Workers
never write to the run directory themselves: files (the cell record and its artifacts)
travel back as bytes, which is what a Ray cluster without a shared file system needs, and
keeps the driver the only writer.

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
import multiprocessing as mp
import os
import signal
import sys
import time
import traceback
from collections.abc import Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import Any

import torch

from zoo.run.cell import run_cell
from zoo.runtime import Runtime

__all__ = [
    "EXECUTORS",
    "CellResult",
    "execute_cell",
    "plan_workers",
    "run_in_process",
    "run_local_pool",
    "run_ray",
    "short_error",
    "with_threads",
]

#: The device a local worker process was given at start (None: use the runtime's own).
_WORKER_DEVICE: str | None = None


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
    caught and recorded with its message and traceback.
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
    except Exception as e:  # a failing cell must not stop the sweep
        record.update(
            status="failed",
            error=short_error(e),
            traceback=traceback.format_exc(),
            metrics={},
        )
    record["time_s"] = time.perf_counter() - t0
    return CellResult(record, artifacts)


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


def _failed(cell: Any, error: str, runtime: Runtime) -> CellResult:
    record = _record(cell, runtime)
    record.update(status="failed", error=error, metrics={}, time_s=0.0)
    return CellResult(record)


def run_in_process(
    cells: Sequence[Any], *, runtime: Runtime, progress: bool, **_: Any
) -> Iterator[CellResult]:
    """Run the cells one after the other in this process (with per-cell progress bars)."""
    runtime = runtime.worker_runtimes()[0]
    for cell in cells:
        yield execute_cell(cell, runtime, progress)


def _init_worker(threads: int, parent: int, devices: Any) -> None:
    """Start a local worker: die with the driver, fix torch threads, take a GPU if any."""
    global _WORKER_DEVICE
    _die_with_parent(parent)
    torch.set_num_threads(threads)
    torch.set_num_interop_threads(1)
    if devices is not None:
        _WORKER_DEVICE = devices.get()
        torch.cuda.set_device(torch.device(_WORKER_DEVICE))


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


def run_local_pool(
    cells: Sequence[Any], *, workers: int, runtime: Runtime, **_: Any
) -> Iterator[CellResult]:
    """Run the cells in ``workers`` fresh (spawned) worker processes.

    With CUDA the workers take the visible GPUs in turn (worker ``i`` gets GPU
    ``i mod n``) and keep theirs for their lifetime.
    """
    ctx = mp.get_context("spawn")  # no fork of a process that already holds torch threads
    devices = None
    if runtime.is_cuda:
        slots = runtime.worker_runtimes()
        devices = ctx.Queue()
        for i in range(workers):
            devices.put(str(slots[i % len(slots)].device))
    pool = ProcessPoolExecutor(workers, mp_context=ctx, initializer=_init_worker,
                               initargs=(runtime.threads, os.getpid(), devices))  # fmt: skip
    try:
        pending = {pool.submit(execute_cell, c, runtime, False): c for c in cells}
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for fut in done:
                cell = pending.pop(fut)
                try:
                    yield fut.result()
                except BrokenProcessPool:
                    yield _failed(cell, "WorkerDied: the worker process running this cell "
                                  "died (out of memory or killed?)", runtime)  # fmt: skip
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


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
            ray.init(num_cpus=workers * threads, num_gpus=len(runtime.worker_runtimes()) * gpus,
                     include_dashboard=False, log_to_driver=False)  # fmt: skip
    pending: dict[Any, Any] = {}
    try:
        task = ray.remote(num_cpus=threads, num_gpus=gpus, max_retries=0)(execute_cell)
        pending = {task.remote(c, task_runtime, False): c for c in cells}
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                cell = pending.pop(ref)
                try:
                    yield ray.get(ref)
                except Exception as e:  # the task itself died (worker crash, node lost)
                    yield _failed(cell, f"RayTaskError: {type(e).__name__}: {e}", task_runtime)
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
