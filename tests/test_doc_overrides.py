"""Every ``--set`` example the docs show validates against the spec it is shown with.

The examples are taken from the docs themselves: each code span or code block that holds
``--set`` items, applied together to the spec the same span names (``specs/NAME.yaml``) or,
where it names none, to the default spec, which the command-line pages speak of.
docs/results/ records runs at given commits; their commands that name their spec are
checked too, but not a span there that names no spec (a fragment of a command above it)
nor the commands of the items it marks as history (relative to an older spec, whose commit
it names).
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import yaml

from zoo.spec import SpecError, load_spec

ROOT = Path(__file__).resolve().parents[1]
PAGES = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    *sorted((ROOT / "docs" / "results").glob("*.md")),
]
DEFAULT = ROOT / "specs" / "two_moons_depth.yaml"
#: Pages whose spans without a spec name are fragments of commands given in full elsewhere.
RECORDS = {"results.md"}


def _history(text: str) -> str:
    """``text`` without the list items it marks as history: the items after a line
    ``- The next N items are history`` at that line's indentation (N in words)."""
    lines, out, skip, indent = text.splitlines(), [], 0, ""
    for line in lines:
        mark = re.match(r"(\s*)- The next (\w+) items are history", line)
        if mark:
            indent, skip = mark.group(1), 1 + _WORDS.index(mark.group(2))
            continue
        ends = line.strip() and not line.startswith(indent + " ")  # a blank line does not
        if skip and (line.startswith(indent + "- ") or ends):
            skip -= 1 if line.startswith(indent + "- ") else skip
        if not skip:
            out.append(line)
    return "\n".join(out)


_WORDS = ["zero", "one", "two", "three", "four", "five"]


def _spans(text: str) -> list[str]:
    """Code blocks, then inline code spans (which may break across lines)."""
    blocks = re.findall(r"```[^\n]*\n(.*?)```", text, flags=re.S)
    rest = re.sub(r"```[^\n]*\n.*?```", "", text, flags=re.S)
    return blocks + re.findall(r"`([^`]+)`", rest)


def examples() -> list[tuple[str, Path, list[str]]]:
    """``(where, spec, --set items)`` of every example in :data:`PAGES`."""
    out = []
    for page in PAGES:
        for span in _spans(_history(page.read_text())):
            if "--set" not in span:
                continue
            for line in span.splitlines() if span.count("zoo ") > 1 else [span]:
                try:
                    words = shlex.split(" ".join(line.split()))
                except ValueError:  # an unbalanced quote: a fragment of a longer command
                    continue
                items = [words[i + 1] for i, w in enumerate(words[:-1]) if w == "--set"]
                if not items or any(i.isupper() or "=" not in i for i in items):
                    continue  # the syntax itself (--set FIELD.PATH=VALUE), not an example
                named = re.search(r"specs/([\w.-]+\.yaml)", line)
                record = page.name in RECORDS or page.parent.name == "results"
                if named is None and (record or "zoo run DIR" in line):
                    continue
                spec = ROOT / "specs" / named.group(1) if named else DEFAULT
                out.append((f"{page.name}: {' '.join(items)}", spec, items))
    return out


EXAMPLES = examples()


def test_the_docs_show_set_examples() -> None:
    where = {w.split(":")[0] for w, _, _ in EXAMPLES}
    assert {"spec.md", "cli.md"} <= where, where


@pytest.mark.parametrize(("spec", "items"), [e[1:] for e in EXAMPLES], ids=[e[0] for e in EXAMPLES])
def test_a_documented_set_example_validates(spec: Path, items: list[str]) -> None:
    try:
        load_spec(spec, items)
    except SpecError as e:
        pytest.fail(f"{spec.name} {items}: " + "; ".join(e.messages))


def test_the_spec_pages_example_validates_under_a_name_of_its_own(tmp_path: Path) -> None:
    """docs/spec.md's first example is a spec of its own: it validates, and its name is no
    shipped spec's (a run directory is named after the spec: runs/<name>/...)."""
    page = (ROOT / "docs" / "spec.md").read_text()
    example = re.search(r"```yaml\n(.*?)```", page, flags=re.S).group(1)
    (tmp_path / "example.yaml").write_text(example)
    spec = load_spec(tmp_path / "example.yaml")
    shipped = {yaml.safe_load(p.read_text())["name"] for p in (ROOT / "specs").glob("*.yaml")}
    assert spec.name not in shipped, (
        f"docs/spec.md's example is named like a shipped spec: {spec.name}"
    )
