"""What every ``zoo`` command shares: bad input (:class:`UsageError`) and the check that the
import names the distribution installs are its own (:func:`check_import_names`)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

__all__ = ["OUR_PACKAGES", "UsageError", "check_import_names"]

#: The import packages the ``bnn-zoo`` distribution installs, side by side.
OUR_PACKAGES = ("zoo", "guides", "reports")


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
