"""docs/reports.md's example runs as written on a shipped reference and prints what the page
says it prints: the page's numbers come from the code they describe."""

from __future__ import annotations

import re
from pathlib import Path

import reports

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "reports.md"


def test_the_example_runs_verbatim_and_prints_the_pages_numbers(capsys) -> None:
    text = PAGE.read_text()
    (code,) = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    printed = re.search(r"It prints[^\n]*\n\n```\n(.*?)```", text, flags=re.S)
    assert printed, "docs/reports.md lost the block of what its example prints"
    exec(compile(code, str(PAGE), "exec"), {})
    out = capsys.readouterr().out
    assert out == printed[1], "docs/reports.md's printed block is out of date; it prints:\n" + out


def test_the_map_names_every_module_of_reports() -> None:
    """A new module of ``reports`` takes its place in the map (public or internal), on the
    page and in the package's docstring."""
    text = PAGE.read_text()
    modules = sorted(p.stem for p in (ROOT / "reports").glob("*.py") if p.stem != "__init__")
    assert modules
    missing = [m for m in modules if f"`{m}`" not in text and f"`reports.{m}`" not in text]
    assert not missing, f"docs/reports.md's map lacks {missing}"
    missing = [m for m in modules if f"reports.{m}`" not in (reports.__doc__ or "")]
    assert not missing, f"reports/__init__.py's docstring lacks {missing}"
