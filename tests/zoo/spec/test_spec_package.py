"""Rules of the zoo.spec package: no torch, imports at module top, kinds compared in sections."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

SPEC_DIR = Path(__file__).resolve().parents[3] / "zoo" / "spec"
MODULES = sorted(SPEC_DIR.rglob("*.py"))


def test_import_zoo_spec_leaves_torch_unloaded() -> None:
    code = (
        "import sys, zoo.spec, zoo, zoo.spec.load; "
        "assert 'torch' not in sys.modules, 'torch imported'; "
        "assert 'numpy' not in sys.modules, 'numpy imported'"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def _function_imports(tree: ast.AST) -> list[int]:
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            lines += [
                n.lineno for n in ast.walk(node) if isinstance(n, ast.Import | ast.ImportFrom)
            ]
    return lines


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(SPEC_DIR)))
def test_module_rules(path: Path) -> None:
    text = path.read_text()
    assert len(text.splitlines()) <= 400, f"{path.name} is over 400 lines"
    tree = ast.parse(text)
    assert not _function_imports(tree), f"function-level imports in {path.name}"
    assert ast.get_docstring(tree), f"{path.name} has no module docstring"


def _kind_comparisons(tree: ast.AST) -> list[int]:
    """Lines comparing a ``.kind`` with a string literal (``m.kind == "svi"``, ``in (...)``)."""
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        kind = any(isinstance(s, ast.Attribute) and s.attr == "kind" for s in sides)
        literal = any(
            isinstance(s, ast.Constant)
            and isinstance(s.value, str)
            or isinstance(s, ast.Tuple | ast.List | ast.Set)
            for s in sides
        )
        if kind and literal:
            out.append(node.lineno)
    return out


@pytest.mark.parametrize(
    "path", [p for p in MODULES if "sections" not in p.parts], ids=lambda p: p.name
)
def test_no_kind_comparisons_outside_sections(path: Path) -> None:
    assert not _kind_comparisons(ast.parse(path.read_text())), path.name
