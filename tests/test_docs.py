"""The pages under docs/: the generated spec reference is current, and what they name exists.

- ``docs/spec.md``'s generated block equals :func:`zoo.spec.reference.render` (the failure
  says the one command that regenerates it), and that module imports no torch;
- every ``specs/*.yaml`` a page names is shipped, and every ``zoo <command>`` a page shows
  is a command of the CLI;
"""

from __future__ import annotations

import functools
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_layers import _torch_free
from zoo.spec.reference import BEGIN, END, REGENERATE, render, replace_block

ROOT = Path(__file__).resolve().parents[1]
#: The pages checked here (the README has its own test, tests/test_readme.py).
PAGES = sorted(
    [*ROOT.glob("docs/*.md"), *ROOT.glob("docs/results/*.md"), ROOT / "benchmarks" / "README.md"]
)


def code_spans(text: str) -> list[str]:
    """The fenced code blocks and inline code spans of a Markdown page."""
    fenced = re.findall(r"```[a-z]*\n(.*?)```", text, flags=re.S)
    rest = re.sub(r"```[a-z]*\n.*?```", "", text, flags=re.S)
    return fenced + re.findall(r"`([^`\n]+)`", rest)


def shipped_specs_named(text: str) -> set[str]:
    """Spec files a page names: ``specs/x.yaml`` anywhere, ``x.yaml`` in code.

    ``spec.yaml`` is the resolved spec inside a run directory, not a shipped one.
    """
    named = set(re.findall(r"specs/([A-Za-z0-9_.\-]+\.yaml)", text))
    bare = {m for c in code_spans(text) for m in re.findall(r"^([a-z0-9_]+\.yaml)$", c)}
    return named | (bare - {"spec.yaml"})


def zoo_commands_named(text: str) -> set[str]:
    """The ``zoo <command>`` words a page shows in code."""
    return {m for c in code_spans(text) for m in re.findall(r"(?<![\w./-])zoo ([a-z][a-z_-]*)", c)}


@functools.cache
def zoo_commands() -> set[str]:
    """The subcommands of ``zoo``, read from ``zoo --help`` (its list under COMMAND)."""
    out = subprocess.run(
        [sys.executable, "-m", "zoo.cli", "--help"],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    ).stdout
    listing = out.split("COMMAND\n", 2)[-1].split("\n\n")[0]
    commands = set(re.findall(r"^    ([a-z][a-z_-]*)\b", listing, flags=re.M))
    assert {"run", "validate", "schema"} <= commands, out
    return commands


def test_spec_reference_is_current() -> None:
    page = (ROOT / "docs" / "spec.md").read_text()
    assert BEGIN in page and END in page, f"docs/spec.md lost its markers {BEGIN!r}, {END!r}"
    assert replace_block(page, render()) == page, (
        f"docs/spec.md's generated reference is out of date with the schema; run: {REGENERATE}"
    )


def test_reference_covers_every_section() -> None:
    text = render()
    for name in ("Spec", "TwoMoonsData", "SVIMethod", "MeanFieldGuide", "ChEESMethod"):
        assert f"### {name}\n" in text
    assert "| `kind` | two_moons | required |" in text
    # a union, a default built by a factory, a bound read from the field's metadata
    assert (
        "| `prior` | [NormalPrior](#normalprior) \\| [HePrior](#heprior) | {kind: normal} |" in text
    )
    assert re.search(r"\| `seed` \| int \(>= 0, <= \d+\) \| 0 \|", text)


def test_reference_imports_no_torch() -> None:
    _torch_free("import zoo.spec.reference")


def test_replace_block_needs_markers() -> None:
    with pytest.raises(ValueError, match="no generated block"):
        replace_block("no markers here", "x")
    assert replace_block(f"a\n{BEGIN}\nold\n{END}\nb", "new\n") == f"a\n{BEGIN}\n\nnew\n\n{END}\nb"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_named_specs_exist(page: Path) -> None:
    named = shipped_specs_named(page.read_text())
    missing = sorted(n for n in named if not (ROOT / "specs" / n).exists())
    assert not missing, f"{page.name} names specs that are not shipped: {missing}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_named_commands_exist(page: Path) -> None:
    unknown = sorted(zoo_commands_named(page.read_text()) - zoo_commands())
    assert not unknown, f"{page.name} shows zoo commands the CLI lacks: {unknown}"
