"""The specs shipped with bnn-zoo, found by name from any directory.

The repository keeps them in ``specs/`` (the README and the docs name ``specs/*.yaml``);
the wheel installs the same files as package data under ``zoo/_specs/`` (``setup.py``
copies them at build time). :func:`shipped_dir` finds the installed copy through
:mod:`importlib.resources` and falls back to the checkout's ``specs/`` for a source tree
or an editable install. :func:`resolve_spec` lets ``zoo run two_moons_depth`` (and
``specs/two_moons_depth.yaml`` outside the checkout) name a shipped spec; a file that
exists at the given path always wins. No torch import here.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from zoo.spec.errors import SpecError, did_you_mean

__all__ = ["DEFAULT_SPEC", "PACKAGED_DIR", "resolve_spec", "shipped_dir", "shipped_specs"]

#: The spec the README runs first; ``zoo list`` marks it.
DEFAULT_SPEC = "two_moons_depth"
#: Where the wheel puts the shipped specs, inside the ``zoo`` package.
PACKAGED_DIR = "_specs"


def shipped_dir() -> Path | None:
    """The directory of the shipped specs: the installed package data, else the checkout's.

    Returns None when neither exists (a broken install).
    """
    packaged = resources.files("zoo").joinpath(PACKAGED_DIR)
    if isinstance(packaged, Path) and packaged.is_dir():
        return packaged
    root = Path(__file__).resolve().parents[1]
    checkout = root / "specs"
    if (root / "pyproject.toml").is_file() and checkout.is_dir():
        return checkout
    return None


def shipped_specs() -> list[Path]:
    """The shipped spec files, sorted by name."""
    d = shipped_dir()
    return sorted(d.glob("*.yaml")) if d is not None else []


def resolve_spec(arg: str | Path) -> Path:
    """The spec file that a command-line argument names.

    Parameters
    ----------
    arg : str or Path
        A path to a spec file, a shipped spec's name (``two_moons_depth``, with or
        without ``.yaml``), or ``specs/NAME.yaml`` as the README writes it.

    Returns
    -------
    Path
        ``arg`` itself when something exists there (a local path wins), else the shipped
        spec it names, else ``arg`` unchanged (the loader then says that there is no such
        file).

    Raises
    ------
    SpecError
        For a bare name (no directory, no suffix) that is neither a file nor a shipped
        spec, with the closest shipped name.
    """
    p = Path(arg)
    try:
        if p.exists():
            return p
    except (OSError, ValueError):  # a NUL or an over-long name: the loader says so
        return p
    bare = p.parent == Path(".") and p.suffix == ""
    if p.parent in (Path("."), Path("specs")) and p.suffix in ("", ".yaml", ".yml"):
        names = {s.stem: s for s in shipped_specs()}
        if p.stem in names:
            return names[p.stem]
        if bare:
            raise SpecError(
                [
                    f"{arg}: no such file, and no shipped spec of that name"
                    f"{did_you_mean(p.stem, sorted(names))} (`zoo list` shows them)"
                ]
            )
    return p
