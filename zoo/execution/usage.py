"""Bad input that is not a spec's (:class:`UsageError`) and the checks of the Python
installation that both front doors (``zoo run`` and ``zoo.run(...)``) make first: that the
import names the distribution installs are its own (:func:`check_import_names`) and that the
libraries it needs are there (:func:`check_dependencies`). Nothing here imports a library.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

__all__ = [
    "DEPENDENCIES",
    "OUR_PACKAGES",
    "UsageError",
    "check_dependencies",
    "check_import_names",
]

#: The import packages the ``bnn-zoo`` distribution installs, side by side.
OUR_PACKAGES = ("zoo", "guides", "reports")


#: The distributions of pyproject.toml's ``dependencies`` by their import names (the
#: packaging test keeps the two equal, markers evaluated for this Python). Some are imported
#: only when a cell writes its files (h5netcdf: the ArviZ file), so without this check a
#: Python that lacks one fails every cell after its work is done.
DEPENDENCIES = {
    "torch": "torch",
    "pyro": "pyro-ppl",
    "pydantic": "pydantic",
    "yaml": "pyyaml",
    "numpy": "numpy",
    "scipy": "scipy",
    "pandas": "pandas",
    "sklearn": "scikit-learn",
    "threadpoolctl": "threadpoolctl",
    "matplotlib": "matplotlib",
    "xarray": "xarray",
    "arviz_base": "arviz-base",
    "arviz_stats": "arviz-stats",
    "xarray_einstats": "xarray-einstats",
    "h5netcdf": "h5netcdf",
    "h5py": "h5py",
    "tqdm": "tqdm",
}


class UsageError(Exception):
    """Bad input that is not a spec validation error."""


def check_import_names() -> None:
    """Refuse to start when ``guides`` or ``reports`` is another project's package.

    The names are generic and unrelated projects on the package index use them too; pip
    lets a later install overwrite or shadow them without a word. bnn-zoo installs its three
    packages side by side (one site-packages, or the checkout of an editable install), so a
    ``guides`` or ``reports`` found anywhere else than beside this ``zoo`` is not ours.
    Looked up with :func:`importlib.util.find_spec`: nothing is imported.

    Raises
    ------
    UsageError
        Naming the package, where it was found and the fix.
    """
    home = Path(__file__).resolve().parents[2]  # the directory that holds zoo/
    for name in OUR_PACKAGES[1:]:
        spec = importlib.util.find_spec(name)
        origin = None if spec is None or spec.origin is None else Path(spec.origin).resolve()
        if origin is None:
            raise UsageError(
                f"the package '{name}' of bnn-zoo is not installed beside {home / 'zoo'}: "
                "reinstall bnn-zoo (pip install --force-reinstall bnn-zoo, or pip install -e . "
                "in its checkout)"
            )
        if origin.parent.parent != home:
            raise UsageError(
                f"the import name '{name}' is another project's ({origin.parent}), not "
                f"bnn-zoo's (which installs zoo, guides and reports side by side in {home}): "
                "uninstall that project or install bnn-zoo in its own virtual environment"
            )


def check_dependencies() -> None:
    """Refuse to start when a library bnn-zoo needs cannot be found (nothing is imported:
    :func:`importlib.util.find_spec`), naming it and the ``pip install`` that adds it.

    Raises
    ------
    UsageError
        Naming every missing distribution.
    """
    missing = [pip for name, pip in DEPENDENCIES.items() if importlib.util.find_spec(name) is None]
    if missing:
        raise UsageError(
            f"bnn-zoo needs {', '.join(missing)}, which this Python ({sys.executable}) does "
            f"not have: pip install {' '.join(missing)} (a pip install of bnn-zoo brings them)"
        )
