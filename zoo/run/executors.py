"""Where the cells of a sweep run: in this process, in local worker processes, or on Ray.

Every executor runs the same function, :func:`execute_cell`, on each cell and yields a
:class:`CellResult` as soon as a cell finishes (in completion order); the runner writes each
result to the run directory at once, so a killed sweep loses only the cells in flight.
Workers never write to the run directory themselves: files (the cell record and its
posterior) travel back as bytes, which is what a Ray cluster without a shared file system
needs, and keeps the driver the only writer.

Threads: each cell runs with ``threads`` torch intra-op threads, chosen so that
``workers x threads <= cores``. The numbers of a cell depend only on its configuration and
this thread count, so a sweep run with the same ``--workers`` on the local executor and on
Ray gives the same ``results.csv``.
"""

from __future__ import annotations

import os
import time
import traceback
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from zoo.spec.schema import Cell

__all__ = [
    "EXECUTORS",
    "CellResult",
    "execute_cell",
    "plan_workers",
    "run_in_process",
    "run_local_pool",
    "run_ray",
    "short_error",
]


@dataclass(frozen=True)
class CellResult:
    """One finished cell: its JSON record and any files to store beside it.

    Attributes
    ----------
    record : dict
        ``cell_id``, ``axes``, ``config``, ``status`` (ok or failed), ``error``,
        ``traceback`` (failed cells), ``metrics``, ``time_s``, ``threads``.
    artifacts : dict of str to bytes
        File suffix (e.g. ``".nc"``) to contents, written as ``cells/<cell id><suffix>``.
    """

    record: dict[str, Any]
    artifacts: dict[str, bytes] = field(default_factory=dict)


def plan_workers(workers: int | None, cores: int | None = None) -> tuple[int, int]:
    """``(workers, threads per worker)`` with ``workers x threads <= cores``.

    ``workers=None`` means one worker per core.
    """
    cores = cores or os.cpu_count() or 1
    workers = cores if workers is None else workers
    if workers < 1:
        raise ValueError(f"--workers must be at least 1, got {workers}")
    return workers, max(1, cores // workers)


def execute_cell(cell: Cell, threads: int, progress: bool = False) -> CellResult:
    """Run one cell with ``threads`` torch threads; never raises for a failing cell.

    An exception inside the cell (a bad configuration, a NaN loss, a sampler failure) is
    caught and recorded with its message and traceback.
    """
    import torch

    from zoo.run.cell import run_cell

    torch.set_num_threads(threads)
    t0 = time.perf_counter()
    record: dict[str, Any] = {
        "cell_id": cell.cell_id,
        "axes": cell.axes,
        "config": cell.config(),
        "threads": threads,
    }
    artifacts: dict[str, bytes] = {}
    try:
        out = run_cell(cell, progress=progress)
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


def short_error(e: BaseException, limit: int = 300) -> str:
    """``Type: first line of the message`` cut to ``limit`` characters (the full text is in
    the cell's traceback), so one failed cell cannot flood results.csv or the report."""
    text = str(e).strip().splitlines()[0] if str(e).strip() else ""
    msg = f"{type(e).__name__}: {text}" if text else type(e).__name__
    return msg if len(msg) <= limit else msg[: limit - 3] + "..."


def _failed(cell: Cell, error: str, threads: int) -> CellResult:
    return CellResult(
        {
            "cell_id": cell.cell_id,
            "axes": cell.axes,
            "config": cell.config(),
            "threads": threads,
            "status": "failed",
            "error": error,
            "metrics": {},
            "time_s": 0.0,
        }
    )


def run_in_process(
    cells: Sequence[Cell], *, threads: int, progress: bool, **_: Any
) -> Iterator[CellResult]:
    """Run the cells one after the other in this process (with per-cell progress bars)."""
    for cell in cells:
        yield execute_cell(cell, threads, progress)


def _init_worker(threads: int, parent: int) -> None:
    import torch

    _die_with_parent(parent)
    torch.set_num_threads(threads)
    torch.set_num_interop_threads(1)


def _die_with_parent(parent: int) -> None:
    """Ask Linux to kill this worker when the driver dies (even by SIGKILL), so that a
    killed sweep leaves no orphan workers computing cells nobody will store."""
    import signal
    import sys

    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the driver died before prctl took effect
        os._exit(1)


def run_local_pool(
    cells: Sequence[Cell], *, workers: int, threads: int, **_: Any
) -> Iterator[CellResult]:
    """Run the cells in ``workers`` fresh (spawned) worker processes."""
    import multiprocessing as mp
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
    from concurrent.futures.process import BrokenProcessPool

    ctx = mp.get_context("spawn")  # no fork of a process that already holds torch threads
    pool = ProcessPoolExecutor(workers, mp_context=ctx, initializer=_init_worker,
                               initargs=(threads, os.getpid()))  # fmt: skip
    try:
        pending = {pool.submit(execute_cell, c, threads, False): c for c in cells}
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for fut in done:
                cell = pending.pop(fut)
                try:
                    yield fut.result()
                except BrokenProcessPool:
                    yield _failed(cell, "WorkerDied: the worker process running this cell "
                                  "died (out of memory or killed?)", threads)  # fmt: skip
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


def _ray():
    try:
        import ray
    except ImportError:
        raise RuntimeError(
            'the Ray executor needs Ray: pip install "bnn-zoo[ray]" (or pip install "ray[default]")'
        ) from None
    return ray


def run_ray(
    cells: Sequence[Cell], *, workers: int, threads: int, address: str | None = None, **_: Any
) -> Iterator[CellResult]:
    """Submit the cells as Ray tasks (``num_cpus=threads`` each).

    With ``address`` (e.g. ``auto`` or ``ray://host:10001``) they go to that running
    cluster, whose nodes must have bnn-zoo installed; without it a local Ray instance with
    ``workers x threads`` CPUs is started for this run and stopped afterwards.
    """
    ray = _ray()
    started_here = not ray.is_initialized()
    if started_here:
        if address:
            ray.init(address=address, log_to_driver=False)
        else:
            ray.init(num_cpus=workers * threads, include_dashboard=False, log_to_driver=False)
    try:
        task = ray.remote(num_cpus=threads, max_retries=0)(execute_cell)
        pending = {task.remote(c, threads, False): c for c in cells}
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                cell = pending.pop(ref)
                try:
                    yield ray.get(ref)
                except Exception as e:  # the task itself died (worker crash, node lost)
                    yield _failed(cell, f"RayTaskError: {type(e).__name__}: {e}", threads)
    finally:
        for ref in list(locals().get("pending", {})):
            ray.cancel(ref, force=True)
        if started_here:
            ray.shutdown()


#: ``--executor`` name -> runner of a list of cells.
EXECUTORS = {"local": run_local_pool, "ray": run_ray, "inprocess": run_in_process}
