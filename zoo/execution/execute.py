"""One cell executed on a runtime: its :class:`CellResult`, what every executor yields.

:func:`execute_cell` runs a cell and never raises for a failing one: the record says what
failed. Workers never write to the run directory themselves: files (the cell record and
its artifacts) travel back as bytes, which is what a Ray cluster without a shared file
system needs, and keeps the driver the only writer.

Threads: each cell runs with ``runtime.threads`` torch intra-op threads, chosen so that
``workers x threads <= cores`` (:func:`plan_workers`). The numbers of a cell depend only
on its configuration, its runtime's device and dtype, and this thread count, so a sweep run
with the same ``--workers`` on the local executor and on Ray gives the same ``results.csv``.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from zoo.execution.cell import run_cell
from zoo.execution.worker_start import keep_freed_memory
from zoo.inference.checkpoint import CheckpointChannel
from zoo.runtime import Runtime

__all__ = [
    "CellCheckpoints",
    "CellResult",
    "ProgressCallback",
    "execute_cell",
    "failed_result",
    "nonfinite_metrics",
    "plan_workers",
    "set_worker_device",
    "short_error",
    "with_threads",
]

#: ``on_progress(cell_id, desc, phase, i, n)``: step ``i`` of ``n`` of a phase of a cell.
ProgressCallback = Callable[[str, str, str, int, int], None]

#: The device a local worker process was given at start (None: use the runtime's own).
_WORKER_DEVICE: str | None = None


def set_worker_device(device: str | None) -> None:
    """Give this worker process its device for good (a local worker's GPU; None: none)."""
    global _WORKER_DEVICE
    _WORKER_DEVICE = device


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


@dataclass(frozen=True)
class CellCheckpoints:
    """Where the executors keep the sampler state of running cells, by cell id
    (:mod:`zoo.inference.checkpoint`); the driver's store reads and writes it.

    Attributes
    ----------
    load : callable
        ``load(cell_id) -> bytes | None``: the state an earlier run saved.
    save : callable
        ``save(cell_id, data)``: keep the state (the driver writes it; never raises).
    every_s : float
        Seconds between two saves inside a cell.
    say : callable
        ``say(cell_id, line)``: a resume or an unusable checkpoint, for the run's log.
    """

    load: Callable[[str], bytes | None]
    save: Callable[[str, bytes], None]
    every_s: float
    say: Callable[[str, str], None]

    def channel(self, cell_id: str) -> CheckpointChannel:
        """The channel of ``cell_id`` in this process (the in-process executor)."""
        return CheckpointChannel(
            lambda: self.load(cell_id),
            lambda data: self.save(cell_id, data),
            self.every_s,
            lambda line: self.say(cell_id, line),
        )


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


def with_threads(runtime: Runtime, threads: int) -> Runtime:
    """``runtime`` with ``threads`` torch threads unless the spec fixed them."""
    return runtime if runtime.threads is not None else dataclasses.replace(runtime, threads=threads)


def execute_cell(cell: Any, runtime: Runtime, progress: bool = False) -> CellResult:
    """Run one cell on ``runtime``; never raises for a failing cell.

    An exception inside the cell (a bad configuration, a NaN loss, a sampler failure) is
    caught and recorded with its message and traceback. Metrics that are NaN or infinite
    are named in the record's ``nonfinite`` list.
    """
    if _WORKER_DEVICE is not None and runtime.is_cuda:
        runtime = runtime.on_device(_WORKER_DEVICE)
    keep_freed_memory()  # large temporaries reuse their pages (local, Ray and in-process)
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


def failed_result(
    cell: Any, error: str, runtime: Runtime, *, died: str | None = None
) -> CellResult:
    """The record of a cell that failed outside its own code (a resume runs it again:
    ``retry: true``); ``died`` says how its worker process ended."""
    record = _record(cell, runtime)
    record.update(status="failed", error=error, metrics={}, time_s=0.0, retry=True)
    if died is not None:
        record["worker_died"] = died
    return CellResult(record)
