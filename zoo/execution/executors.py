"""Where the cells of a sweep run: in this process, in local worker processes, or on Ray.

Every executor runs the same function, :func:`~zoo.execution.execute.execute_cell`, on each cell
and yields a :class:`~zoo.execution.execute.CellResult` as soon as a cell finishes (in
completion order); the runner hands each result to the run store at once, so a killed
sweep loses only the cells in flight. :data:`EXECUTORS` names them: ``inprocess``
(:func:`run_in_process`), ``local`` (:func:`~zoo.execution.local_pool.run_local_pool`, worker
processes) and ``ray`` (:func:`run_ray`).

GPUs: with a CUDA runtime there is one worker per visible GPU by default. A local worker
process takes one GPU for its lifetime; a Ray task asks for ``num_gpus=1`` and Ray makes
its GPU the only visible one.

Checkpoints inside a cell (:mod:`zoo.inference.checkpoint`): the in-process and local
executors give each cell the state an earlier run saved and bring new states back to the
driver; Ray tasks do not (a Ray cell stopped halfway starts over).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from zoo.execution.execute import (
    CellCheckpoints,
    CellResult,
    ProgressCallback,
    execute_cell,
    failed_result,
    nonfinite_metrics,
    plan_workers,
    short_error,
    with_threads,
)
from zoo.execution.local_pool import WorkerStartError, run_local_pool
from zoo.execution.ray_address import RayAddressError, check_ray_address
from zoo.inference.checkpoint import set_checkpoint_channel
from zoo.inference.progress import set_progress_sink
from zoo.runtime import Runtime

#: What the runner and the command line use of :mod:`zoo.execution.execute` and
#: :mod:`zoo.execution.local_pool` is re-exported beside the executors.
__all__ = [
    "EXECUTORS",
    "CellCheckpoints",
    "CellResult",
    "ExecutorStartError",
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


class ExecutorStartError(RuntimeError):
    """The executor itself could not start (Ray did not come up): no cell ran, every cell
    of the run is still pending, and a resume on another executor runs them."""


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
    checkpoints: CellCheckpoints | None = None,
    **_: Any,
) -> Iterator[CellResult]:
    """Run the cells one after the other in this process.

    With ``on_progress``, the fits report to it; else, with ``progress``, they draw
    their own bars. With ``checkpoints``, a sampler saves its state as it goes and resumes
    from a saved one (:mod:`zoo.inference.checkpoint`).
    """
    runtime = runtime.worker_runtimes()[0]
    for cell in cells:
        before = set_progress_sink(_sink_to(on_progress, cell.cell_id))
        ck = set_checkpoint_channel(
            None if checkpoints is None else checkpoints.channel(cell.cell_id)
        )
        try:
            yield execute_cell(cell, runtime, progress or on_progress is not None)
        finally:
            set_progress_sink(before)
            set_checkpoint_channel(ck)


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

    Raises
    ------
    ExecutorStartError
        Ray did not start or the cluster could not be reached (before any cell ran); an
        address where nothing listens is found in seconds
        (:func:`~zoo.execution.ray_address.check_ray_address`).
    """
    ray = _ray()
    threads = runtime.threads
    gpus = 1 if runtime.is_cuda else 0
    task_runtime = runtime.on_device("cuda") if gpus else runtime
    started_here = not ray.is_initialized()
    if started_here:
        try:
            if address:
                check_ray_address(address)  # in seconds, where Ray would retry for minutes
                ray.init(address=address, log_to_driver=False)
            else:
                ray.init(
                    num_cpus=workers * threads,
                    num_gpus=len(runtime.worker_runtimes()) * gpus,
                    include_dashboard=False,
                    log_to_driver=False,
                )
        except RayAddressError as e:
            raise ExecutorStartError(f"could not reach the Ray cluster at {address}: {e}") from None
        except Exception as e:  # Ray's own errors vary: timeouts, connection, resources
            _shutdown_quietly(ray)
            where = f"the Ray cluster at {address}" if address else "a local Ray instance"
            raise ExecutorStartError(f"could not start {where}: {short_error(e)}") from None
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
                    res = failed_result(cell, f"RayTaskError: {short_error(e)}", task_runtime)
                yield res
    finally:
        for ref in list(pending):
            ray.cancel(ref, force=True)
        if started_here:
            ray.shutdown()


def _shutdown_quietly(ray: Any) -> None:
    """Stop what a failed ``ray.init`` may have started; its own failure adds nothing."""
    try:
        ray.shutdown()
    except Exception:
        pass


#: ``--executor`` name -> runner of a list of cells.
EXECUTORS = {"local": run_local_pool, "ray": run_ray, "inprocess": run_in_process}
