"""Which test modules touch ArviZ: the rule behind the ``arviz`` marker.

The zoo supports two ArviZ lines (arviz-base/arviz-stats 0.8.x on Python 3.11, 1.x on 3.12+).
CI runs the whole suite on the lowest line and, on the newest, only what can differ between
the lines: the test modules marked ``arviz``. The mark is derived, not listed by hand, so that
a new test file that touches ArviZ runs on both lines without anyone remembering to add it.
A test module is marked ``arviz`` when

1. it imports ``arviz*`` itself (``import arviz_stats``, ``from arviz_base import ...``, or
   ``importlib.import_module("arviz_plots")``), or
2. it is the test file of an *ArviZ-facing* module, one of ``zoo/``, ``guides/`` or
   ``reports/`` that imports ``arviz*`` itself: ``tests/`` mirrors the packages, so
   ``reports/kl_rhat.py`` is tested by ``tests/reports/test_kl_rhat.py``, or
3. it marks itself (``pytestmark = pytest.mark.arviz``): a test that reaches ArviZ only
   through the zoo's run and checks something that could differ between the lines.

Not every importer of an ArviZ-facing module: most of those call ESS and R-hat, whose values
``tests/test_arviz_lines.py`` checks are the same on both lines, and they would mark the
slowest third of the suite (the studies' end-to-end tests) for a second run that cannot
differ.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("zoo", "guides", "reports")

__all__ = ["arviz_facing_modules", "imported_names", "touches_arviz"]


def _is_arviz(name: str) -> bool:
    return name.split(".")[0].startswith("arviz")


def imported_names(tree: ast.AST) -> set[str]:
    """Every module a parsed file imports, anywhere in it: ``import a.b`` gives ``a.b``,
    ``from a import b`` gives ``a`` and ``a.b`` (b may be a module), and
    ``importlib.import_module("x")`` with a literal name gives ``x``."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", getattr(node.func, "id", None)) == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            names.add(node.args[0].value)
    return names


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@functools.cache
def arviz_facing_modules() -> frozenset[str]:
    """The project modules (dotted names) that import ``arviz*`` themselves."""
    facing = set()
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            names = imported_names(ast.parse(path.read_text(encoding="utf-8")))
            if any(_is_arviz(n) for n in names):
                facing.add(_module_name(path))
    return frozenset(facing)


def _test_file(module: str) -> Path:
    """``tests/<package path>/test_<name>.py``, the test file of a project module."""
    *package, name = module.split(".")
    return ROOT.joinpath("tests", *package, f"test_{name}.py")


@functools.cache
def touches_arviz(path: Path) -> bool:
    """Whether the test module at ``path`` imports ``arviz*`` or is the test file of an
    ArviZ-facing module (rules 1 and 2 of this module's docstring)."""
    path = Path(path).resolve()
    if path in {_test_file(m) for m in arviz_facing_modules()}:
        return True
    return any(_is_arviz(n) for n in imported_names(ast.parse(path.read_text(encoding="utf-8"))))
