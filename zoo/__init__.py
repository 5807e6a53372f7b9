"""bnn-zoo: Bayesian neural networks on Pyro from declarative YAML specs.

``zoo.load_spec(path)`` validates a spec file into a frozen :class:`zoo.spec.Spec`
without importing torch. The Python API for notebooks (:mod:`zoo.api`): ``zoo.run(spec,
overrides=..., out=..., workers=...)`` runs a spec (a path, a shipped spec's name or a
run directory to resume) and returns a :class:`zoo.api.Run` with the results and summary
as pandas frames, the cells, each cell's ArviZ DataTree and the report's path;
``zoo.open_run(DIR)`` opens a finished run. The ``zoo`` command line wraps the same path.

``import zoo`` stays cheap (no torch): the API and ``__version__`` are loaded on first
use (PEP 562 module ``__getattr__``), and :func:`run` loads :func:`zoo.api.run` on its first
call (the running itself is the package :mod:`zoo.execution`).
"""

from pathlib import Path
from typing import Any

from zoo.spec import Cell, Spec, SpecError, load_spec

__all__ = ["Cell", "Run", "Spec", "SpecError", "load_spec", "open_run", "run"]

_DISTRIBUTION = "bnn-zoo"


def _version() -> str:
    """The installed distribution's version; in a checkout that is not installed, the
    ``version`` of its ``pyproject.toml``."""
    import importlib.metadata
    import pathlib
    import tomllib

    try:
        return importlib.metadata.version(_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        pyproject = pathlib.Path(__file__).resolve().parents[1] / "pyproject.toml"
        try:
            return tomllib.loads(pyproject.read_text())["project"]["version"]
        except (OSError, KeyError, ValueError):
            return "unknown"


def run(spec: str | Path | Spec, **options: Any) -> Any:
    """Run a spec as ``zoo run`` does and return the run read back (a :class:`zoo.api.Run`):
    :func:`zoo.api.run`, where its parameters and what it raises are documented. Loaded on
    the first call, so that ``import zoo`` and ``zoo.run`` cost no torch."""
    from zoo import api

    return api.run(spec, **options)


def __getattr__(name: str):
    """``__version__``, ``open_run`` and ``Run``, loaded when first asked for."""
    if name == "__version__":
        return _version()
    if name in ("open_run", "Run"):
        from zoo import api

        return getattr(api, name)
    raise AttributeError(f"module 'zoo' has no attribute {name!r}")
