"""A run's second step, shared by both front doors: run a checked plan.

:func:`launch` takes the :class:`~zoo.execution.plan.RunPlan` that
:func:`~zoo.execution.plan.plan_run` made before torch was imported, picks the device
(``--device`` or the spec's ``runtime:``), refuses a method that cannot run there, and runs
the cells not yet stored and the report (:func:`~zoo.execution.runner.run_spec`). ``zoo
run`` prints what it returns; ``zoo.run(...)`` reads the run directory back.
"""

from __future__ import annotations

from collections.abc import Callable

from zoo.execution.plan import RunPlan
from zoo.execution.preflight import check_device
from zoo.execution.runner import RunOutcome, run_spec, spec_runtime
from zoo.execution.usage import UsageError
from zoo.runtime import RuntimeUnavailable
from zoo.spec.tuning import cells_text

__all__ = ["launch"]


def launch(plan: RunPlan, log: Callable[[str], None] | None = None) -> RunOutcome:
    """Run a checked plan: its device, then the cells not yet stored, then the report.

    Parameters
    ----------
    plan : RunPlan
        From :func:`~zoo.execution.plan.plan_run`.
    log : callable, optional
        Told one line before the first cell: the spec, its cells, the run directory and a
        GPU device (``zoo run`` prints it to stderr).

    Raises
    ------
    UsageError
        No such device, or a method that cannot run on it (nothing has run).
    RunDirError, ExecutorStartError, WorkerStartError
        From :func:`~zoo.execution.runner.run_spec`.
    """
    r, spec, out = plan.request, plan.spec, plan.out
    try:
        runtime = spec_runtime(spec, r.device) if spec.simulation is None else None
    except RuntimeUnavailable as e:
        raise UsageError(str(e)) from None
    check_device(spec, runtime)
    if log is not None:
        on = f" on {runtime.device}" if runtime is not None and runtime.is_cuda else ""
        log(f"zoo: {spec.name}: {cells_text(spec)} -> {out}{on}")
    return run_spec(  # --fresh deletes only in a run directory, under its lock (checked first)
        spec,
        out,
        executor=r.executor,
        workers=r.workers,
        address=r.address,
        retry_failed=r.retry_failed,
        progress=r.progress,
        runtime=runtime,
        fresh=r.fresh,
        checkpoint_every=r.checkpoint_every or None,
    )
