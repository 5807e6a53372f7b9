"""Running a spec: cells, executors, the run directory and its report.

The package is callable: ``zoo.run(spec, overrides=..., out=...)`` is :func:`zoo.api.run`,
the Python API. ``zoo.run`` names this package as soon as any of its modules is imported
(Python sets the attribute), so the API's entry point lives on the package itself; calling
it loads :mod:`zoo.api` (and torch) only then.
"""

import sys
import types

__all__: list[str] = []


class _CallablePackage(types.ModuleType):
    """The package :mod:`zoo.run`, callable as :func:`zoo.api.run`."""

    def __call__(self, *args, **kwargs):
        """:func:`zoo.api.run` (see there)."""
        from zoo.api import run

        return run(*args, **kwargs)


sys.modules[__name__].__class__ = _CallablePackage
