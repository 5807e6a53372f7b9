"""Running a spec: its plan and checks, cells, executors, the run directory and its report.

Both front doors go through here: ``zoo run`` (:mod:`zoo.cli`) and ``zoo.run(...)``
(:func:`zoo.api.run`) make a :class:`~zoo.execution.plan.RunRequest`, check it with
:func:`~zoo.execution.plan.plan_run` (no torch) and run it with
:func:`~zoo.execution.launch.launch`.
"""

__all__: list[str] = []
