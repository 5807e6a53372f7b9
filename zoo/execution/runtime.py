"""The run layer's name for :class:`zoo.runtime.Runtime` (device, dtype, threads, generators).

The class lives in the leaf module :mod:`zoo.runtime` so that ``zoo.inference`` and
``zoo.studies`` may take a Runtime without importing ``zoo.execution`` (layering).
"""

from zoo.runtime import DTYPES, Runtime, RuntimeUnavailable, parse_device

__all__ = ["DTYPES", "Runtime", "RuntimeUnavailable", "parse_device"]
