"""The README's promises: its two commands, its Python example, the names it uses, its length."""

from __future__ import annotations

import re
from pathlib import Path

import pyro
import torch

from tests.test_docs import shipped_specs_named, zoo_commands, zoo_commands_named

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
#: The front door stays short (under 200 lines): results live in docs/results/, the language in
#: docs/spec.md.
MAX_LINES = 199


def test_readme_has_exactly_the_two_commands() -> None:
    bash = re.findall(r"```bash\n(.*?)```", README, flags=re.S)
    assert len(bash) == 2
    setup, tests = (b.strip() for b in bash)
    assert "pip install torch==2.13.0" in setup and setup.endswith(
        "zoo run specs/two_moons_depth.yaml"
    )
    assert "pip install torch==2.13.0" in tests and tests.endswith("pytest")
    ci = (ROOT / ".ci" / "run").read_text()
    assert 'pip install torch==2.13.0 -e ".[dev]"' in ci and "\npytest\n" in ci


def test_readme_python_example_runs() -> None:
    (code,) = re.findall(r"```python\n(.*?)```", README, flags=re.S)
    code = code.replace("range(500)", "range(50)").replace("print(", "(")
    ns: dict = {}
    exec(compile(code, "README.md", "exec"), ns)
    assert set(ns["guide"].median()) == {"w", "sigma"}
    assert ns["samples"]["y"].shape == (100, 100)


def test_readme_python_example_is_seeded() -> None:
    """Run twice from different global generators, it prints the same medians."""
    (code,) = re.findall(r"```python\n(.*?)```", README, flags=re.S)
    code = code.replace("range(500)", "range(20)").replace("num_samples=100", "num_samples=2")
    medians = []
    for before in (1, 2):
        torch.manual_seed(before)
        pyro.clear_param_store()
        ns: dict = {"print": lambda *a: None}
        exec(compile(code, "README.md", "exec"), ns)
        medians.append({k: v.detach().clone() for k, v in ns["guide"].median().items()})
    assert medians[0].keys() == medians[1].keys()
    for k in medians[0]:
        assert torch.equal(medians[0][k], medians[1][k]), k


def test_readme_names_real_specs_commands_and_pages() -> None:
    specs = shipped_specs_named(README)
    assert "two_moons_depth.yaml" in specs
    missing = sorted(n for n in specs if not (ROOT / "specs" / n).exists())
    assert not missing, f"the README names specs that are not shipped: {missing}"
    unknown = sorted(zoo_commands_named(README) - zoo_commands())
    assert not unknown, f"the README shows zoo commands the CLI lacks: {unknown}"
    links = re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", README)
    dead = sorted(link for link in links if not (ROOT / link).exists())
    assert not dead, f"the README links to files that do not exist: {dead}"


def test_readme_is_short() -> None:
    n = len(README.splitlines())
    assert n <= MAX_LINES, (
        f"README.md has {n} lines (at most {MAX_LINES}): move results to docs/results.md"
    )


#: A stated duration: 28m05s, 2h02m, 15 minutes, about twelve minutes, half an hour.
DURATION = re.compile(
    r"\b\d+h\d{2}m\b|\b\d+m\d{2}s\b|\b[\d.]+\s*(?:minutes?|min|hours?)\b"
    r"|\b(?:a|one|two|ten|twelve|fifteen|twenty|thirty) (?:minutes?|hours?)\b|\bhalf an hour\b",
    re.I,
)
#: What names the default run in a paragraph or a table row.
DEFAULT = re.compile(r"two_moons_depth\.yaml|\bthe default run\b", re.I)


def _blocks(text: str) -> list[str]:
    """Paragraphs (blank-line separated) and, inside them, table rows and comment lines."""
    out = []
    for para in re.split(r"\n\s*\n", text):
        lines = para.splitlines()
        if all(line.lstrip().startswith(("|", "#", "<!--")) for line in lines if line.strip()):
            out += lines  # a (marked) table or a spec's comment header: each line is a claim
        else:
            out.append(para)
    return out


def test_only_the_readme_states_the_default_runs_time() -> None:
    # the README's time follows the default's command (its own paragraph)
    after = README.split("zoo run specs/two_moons_depth.yaml\n```", 1)[1]
    stated = [b for b in _blocks(README) if DEFAULT.search(b) and DURATION.search(b)]
    stated += [b for b in _blocks(after)[:1] if DURATION.search(b)]
    assert len(stated) == 1, f"the README states the default's time in {len(stated)} places"
    times = set(DURATION.findall(stated[0]))
    pages = [*sorted((ROOT / "docs").rglob("*.md")), ROOT / "specs" / "two_moons_depth.yaml"]
    wrong = []
    for page in pages:
        text = page.read_text()
        own = page.name == "two_moons_depth.yaml"  # its whole header is about the default
        for block in _blocks(text):
            if own or DEFAULT.search(block):
                wrong += [f"{page.name}: {t}" for t in DURATION.findall(block) if t not in times]
    assert not wrong, f"pages state a time for the default other than the README's: {wrong}"
