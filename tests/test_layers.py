"""The dependency floors of DESIGN.md, read from the source with ``ast``.

- ``import zoo.spec`` (and ``import zoo``) leaves torch unloaded (validation is instant);
- no import cycles among the modules of ``zoo``, ``guides`` and ``reports``;
- no function-level imports of project modules outside ``zoo/cli/__init__.py`` (``zoo.cli``);
- ``guides`` and ``reports`` never import ``zoo``;
- the layer order ``spec < data, models < inference < studies < run < api < cli``: a
  module never imports one of a higher layer, at module level or inside a function, with
  one exception (``zoo.run`` and ``zoo``'s PEP 562 ``__getattr__`` load :mod:`zoo.api` when
  used, so that ``import zoo`` stays cheap); the run layer (:mod:`zoo.execution`) holds
  what both front doors share, the Python API sits on it, and the command line on both;
  ``zoo/runtime.py`` is a leaf usable from inference up; ``guides`` and ``reports`` are
  leaves (``guides`` is imported from inference up).

Each failure names every offending import as ``file:line``.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("zoo", "guides", "reports")

#: Layer rank of each part of ``zoo`` (longest matching prefix wins). A module may import
#: modules of its own rank or lower. ``zoo`` itself (its ``__init__``) is the spec's face.
LAYERS: dict[str, int] = {
    "zoo": 0,
    "zoo.spec": 0,
    "zoo.data": 1,
    "zoo.models": 1,
    "zoo.runtime": 2,
    "zoo.inference": 2,
    "zoo.studies": 3,
    "zoo.execution": 4,
    "zoo.references": 4,
    "zoo.api": 5,
    "zoo.cli": 6,
}
LAYER_NAMES = {
    0: "spec",
    1: "data/models",
    2: "inference",
    3: "studies",
    4: "run",
    5: "api",
    6: "cli",
}
#: Leaf packages outside ``zoo`` that a zoo module may import only from this rank up
#: (``guides`` needs torch and Pyro: inference links to it, the spec never does).
EXTERNAL_RANKS: dict[str, int] = {"guides": 2}
#: Modules that import no other project module.
LEAF_MODULES = ("zoo.runtime",)
#: Packages that import nothing of the project but themselves.
LEAF_PACKAGES = ("guides", "reports")
#: The only module allowed function-level project imports (fast ``zoo validate``).
LAZY_ALLOWED = ("zoo.cli",)
#: The Python API's entry point, loaded when first used so that ``import zoo`` stays cheap:
#: ``zoo.run`` (a function of ``zoo`` that calls :func:`zoo.api.run`), ``zoo.open_run`` and
#: ``zoo.Run`` (PEP 562 ``__getattr__`` of ``zoo``). The one function-level import against
#: the layer order.
API_ENTRY_POINTS = {("zoo", "zoo.api")}


class Import(NamedTuple):
    """One project import: who imports what, where, and how."""

    source: str  # importing module
    target: str  # the project module named by the statement
    loads: tuple[str, ...]  # what Python runs for it: target and the package __init__s above
    file: str  # path relative to the repository root
    line: int
    in_function: bool  # inside a def or lambda: runs only when called
    type_checking: bool  # under ``if TYPE_CHECKING:``: never runs

    def where(self) -> str:
        return f"{self.file}:{self.line}"


def _module_files() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


MODULES = _module_files()


def _is_package(name: str) -> bool:
    return MODULES[name].name == "__init__.py"


def _ancestors(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _raw_imports(tree: ast.AST) -> Iterator[tuple[ast.stmt, bool, bool]]:
    """Every import statement with (inside a function?, under TYPE_CHECKING?)."""

    def walk(node: ast.AST, in_fn: bool, tc: bool) -> Iterator[tuple[ast.stmt, bool, bool]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import | ast.ImportFrom):
                yield child, in_fn, tc
            elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                yield from walk(child, True, tc)
            elif isinstance(child, ast.If) and _is_type_checking(child.test):
                for stmt in child.body:
                    yield from walk(ast.Module(body=[stmt], type_ignores=[]), in_fn, True)
                for stmt in child.orelse:
                    yield from walk(ast.Module(body=[stmt], type_ignores=[]), in_fn, tc)
            else:
                yield from walk(child, in_fn, tc)

    yield from walk(tree, False, False)


def _targets(source: str, node: ast.Import | ast.ImportFrom) -> list[tuple[str, tuple[str, ...]]]:
    """The project modules an import statement names, each with what Python loads for it.

    ``import a.b.c`` names ``a.b.c``; ``from P import name`` names the submodule ``P.name``
    if there is one, else ``P`` itself (its ``__init__``). Loading a module first runs the
    ``__init__`` of each package above it that is not already running above the importer,
    so those are loaded too: that is how a cycle goes through a package ``__init__``.
    """
    if isinstance(node, ast.Import):
        named = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:
            pkg = source if _is_package(source) else source.rpartition(".")[0]
            for _ in range(node.level - 1):
                pkg = pkg.rpartition(".")[0]
            base = f"{pkg}.{base}" if base else pkg
        named = []
        for alias in node.names:
            sub = f"{base}.{alias.name}"
            named.append(sub if sub in MODULES else base)
    out: list[tuple[str, tuple[str, ...]]] = []
    mine = {*_ancestors(source), source}
    for name in dict.fromkeys(named):
        if name.split(".")[0] not in PACKAGES:
            continue
        while name not in MODULES and "." in name:  # `import pkg.mod.attr`-style names
            name = name.rpartition(".")[0]
        if name not in MODULES:
            continue
        loads = tuple(m for m in (*_ancestors(name), name) if m in MODULES and m not in mine)
        out.append((name, loads))
    return out


def _all_imports() -> list[Import]:
    out = []
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        rel = str(path.relative_to(ROOT))
        for node, in_fn, tc in _raw_imports(tree):
            for target, loads in _targets(name, node):
                out.append(Import(name, target, loads, rel, node.lineno, in_fn, tc))
    return out


IMPORTS = _all_imports()


def _rank(module: str) -> int | None:
    best = None
    for prefix, rank in LAYERS.items():
        if module == prefix or module.startswith(prefix + "."):
            if best is None or len(prefix) > len(best[0]):
                best = (prefix, rank)
    return None if best is None else best[1]


def _natural(line: str) -> list:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", line)]


def _fail(what: str, lines: list[str]) -> None:
    if lines:
        lines = sorted(set(lines), key=_natural)
        pytest.fail(f"{what} ({len(lines)}):\n  " + "\n  ".join(lines))


# --------------------------------------------------------------------------- (a) no torch


def _torch_free(statement: str) -> None:
    code = textwrap.dedent(f"""\
        import sys, traceback
        from importlib.abc import MetaPathFinder

        class Spy(MetaPathFinder):
            stack = None
            def find_spec(self, name, path=None, target=None):
                if name == "torch" and Spy.stack is None:
                    Spy.stack = "".join(traceback.format_stack()[:-1])
                return None

        sys.meta_path.insert(0, Spy())
        {statement}
        if "torch" in sys.modules:
            print(Spy.stack)
            sys.exit(3)
        """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode != 3, f"`{statement}` imported torch, here:\n{r.stdout}"
    assert r.returncode == 0, f"`{statement}` failed:\n{r.stdout}{r.stderr}"


@pytest.mark.parametrize("statement", ["import zoo.spec", "import zoo"])
def test_spec_does_not_import_torch(statement: str) -> None:
    _torch_free(statement)


# --------------------------------------------------------------------------- (b) no cycles


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (or a self-import)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:  # Tarjan; the graph is small enough for recursion
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in edges.get(v, ()):
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def _one_cycle(comp: list[str], edges: dict[str, set[str]]) -> list[str]:
    """A shortest cycle through the first module of a component (breadth-first)."""
    members = set(comp)
    start = comp[0]
    prev: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(edges.get(v, ())):
                if w not in members:
                    continue
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(prev[path[-1]])
                    return [start, *reversed(path[:-1]), start] if len(path) > 1 else [start, start]
                if w not in prev:
                    prev[w] = v
                    nxt.append(w)
        frontier = nxt
    return comp


def test_no_import_cycles() -> None:
    runtime = [i for i in IMPORTS if not i.in_function and not i.type_checking]
    edges: dict[str, set[str]] = {}
    where: dict[tuple[str, str], str] = {}
    for imp in runtime:
        for target in imp.loads:
            edges.setdefault(imp.source, set()).add(target)
            where.setdefault((imp.source, target), imp.where())
    lines = []
    for comp in _cycles(edges):
        cycle = _one_cycle(comp, edges)
        hops = ", ".join(
            f"{a} -> {b} ({where[(a, b)]})" for a, b in zip(cycle[:-1], cycle[1:], strict=True)
        )
        lines.append(f"cycle of {len(comp)} module(s) [{', '.join(comp)}]: {hops}")
    _fail("import cycles (module-level imports)", lines)


# --------------------------------------------------------------------------- (c) lazy imports


def test_no_function_level_project_imports() -> None:
    lines = [
        f"{i.where()}: {i.source} imports {i.target} inside a function"
        for i in IMPORTS
        if i.in_function
        and i.source not in LAZY_ALLOWED
        and (i.source, i.target) not in API_ENTRY_POINTS
    ]
    _fail("function-level project imports outside zoo/cli/__init__.py", lines)


# --------------------------------------------------------------------------- (d) guides, reports


def test_guides_and_reports_never_import_zoo() -> None:
    lines = [
        f"{i.where()}: {i.source} imports {i.target}"
        for i in IMPORTS
        if i.source.split(".")[0] in LEAF_PACKAGES and i.target.split(".")[0] == "zoo"
    ]
    _fail("guides/reports importing zoo", lines)


# --------------------------------------------------------------------------- (e) layer order


def test_every_zoo_module_has_a_layer() -> None:
    missing = [
        str(MODULES[m].relative_to(ROOT))
        for m in MODULES
        if m.split(".")[0] == "zoo" and _rank(m) is None
    ]
    _fail("zoo modules in no layer (add them to LAYERS in tests/test_layers.py)", missing)


def _against_the_layers(imports: list[Import]) -> list[str]:
    """The imports, at module level or inside a function, of a module of a higher layer
    (or, from a leaf, of any other project module), each as ``file:line: ...``."""
    lines = []
    for i in imports:
        top = i.source.split(".")[0]
        if top in LEAF_PACKAGES:
            if i.target.split(".")[0] != top:
                lines.append(f"{i.where()}: {i.source} (leaf package {top}) imports {i.target}")
            continue
        if any(i.source == m or i.source.startswith(m + ".") for m in LEAF_MODULES):
            lines.append(f"{i.where()}: {i.source} (a leaf) imports {i.target}")
            continue
        dst_top = i.target.split(".")[0]
        if dst_top != "zoo" and dst_top not in EXTERNAL_RANKS:
            continue
        src = _rank(i.source)
        dst = _rank(i.target) if dst_top == "zoo" else EXTERNAL_RANKS[dst_top]
        if src is None or dst is None:
            continue  # reported by test_every_zoo_module_has_a_layer
        if i.in_function and (i.source, i.target) in API_ENTRY_POINTS:
            continue
        if dst > src:
            lines.append(
                f"{i.where()}: {i.source} ({LAYER_NAMES[src]}) imports {i.target} "
                f"({LAYER_NAMES[dst]})"
            )
    return lines


def test_layer_order() -> None:
    _fail(
        "imports against the layer order spec < data, models < inference < studies < run < api "
        "< cli",
        _against_the_layers(IMPORTS),
    )


def test_an_upward_import_is_caught_at_module_level_and_in_a_function() -> None:
    """The two upward arrows the layers once had: the API importing the command line's
    checks, and the run layer loading the API inside a function (a callable package)."""

    def imp(source: str, target: str, in_function: bool) -> Import:
        return Import(source, target, (target,), "x.py", 1, in_function, False)

    upward = [
        imp("zoo.api", "zoo.cli.checks", False),
        imp("zoo.execution", "zoo.api", True),
        imp("zoo.execution.runner", "zoo.cli", True),
    ]
    assert len(_against_the_layers(upward)) == 3
    allowed = [imp("zoo", "zoo.api", True), imp("zoo.cli", "zoo.api", False)]
    assert _against_the_layers(allowed) == []


# --------------------------------------------------------------------------- the checker itself


def test_the_import_reader_sees_what_python_runs(tmp_path: Path) -> None:
    """Relative imports, submodule-vs-name, TYPE_CHECKING and function bodies are told apart."""
    src = textwrap.dedent("""\
        from typing import TYPE_CHECKING
        from . import dataset
        from zoo.models import BayesianNet
        import zoo.spec.sections.data
        if TYPE_CHECKING:
            from zoo.execution import cell
        def f():
            from zoo.inference import svi
        """)
    tree = ast.parse(src)
    found = {}
    for node, in_fn, tc in _raw_imports(tree):
        for t, loads in _targets("zoo.data.csv", node):
            found[t] = (loads, in_fn, tc)
    assert found["zoo.data.dataset"] == (("zoo.data.dataset",), False, False)
    assert found["zoo.models"] == (("zoo.models",), False, False)  # a name of its __init__
    # the __init__s above run first, except those already running above the importer
    assert found["zoo.spec.sections.data"] == (
        ("zoo.spec", "zoo.spec.sections", "zoo.spec.sections.data"),
        False,
        False,
    )
    assert found["zoo.execution.cell"][1:] == (False, True)
    assert found["zoo.inference.svi"][1:] == (True, False)
    assert _cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]
    assert _one_cycle(["a", "b", "c"], {"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [
        "a",
        "b",
        "c",
        "a",
    ]
