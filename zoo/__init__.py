"""bnn-zoo: Bayesian neural networks on Pyro from declarative YAML specs.

``zoo.load_spec(path)`` validates a spec file into a frozen :class:`zoo.spec.Spec`
without importing torch. The Python API for notebooks (:mod:`zoo.api`): ``zoo.run(spec,
overrides=..., out=..., workers=...)`` runs a spec (a path, a shipped spec's name or a
run directory to resume) and returns a :class:`zoo.api.Run` with the results and summary
as pandas frames, the cells, each cell's ArviZ DataTree and the report's path;
``zoo.open_run(DIR)`` opens a finished run. The ``zoo`` command line wraps the same path.

``import zoo`` stays cheap (no torch): the API and ``__version__`` are loaded on first
use (PEP 562 module ``__getattr__``). ``zoo.run`` is the package :mod:`zoo.run`, made
callable (its ``__call__`` is :func:`zoo.api.run`), so it is the same object whether or
not the package was imported before.
"""

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


def __getattr__(name: str):
    """``__version__``, ``run``, ``open_run`` and ``Run``, loaded when first asked for."""
    if name == "__version__":
        return _version()
    if name == "run":
        import zoo.execution

        return zoo.execution
    if name in ("open_run", "Run"):
        from zoo import api

        return getattr(api, name)
    raise AttributeError(f"module 'zoo' has no attribute {name!r}")
