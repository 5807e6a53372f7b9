"""The README's promises: its two commands and its Python example."""

from __future__ import annotations

import re
from pathlib import Path

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


def test_readme_has_exactly_the_two_commands() -> None:
    bash = re.findall(r"```bash\n(.*?)```", README, flags=re.S)
    assert len(bash) == 2
    setup, tests = (b.strip() for b in bash)
    assert "pip install torch==2.13.0" in setup and setup.endswith(
        "zoo run specs/two_moons_depth.yaml"
    )
    assert "pip install torch==2.13.0" in tests and tests.endswith("pytest")
    ci = (Path(__file__).resolve().parents[1] / ".ci" / "run").read_text()
    assert 'pip install torch==2.13.0 -e ".[dev]"' in ci and "\npytest\n" in ci


def test_readme_python_example_runs() -> None:
    (code,) = re.findall(r"```python\n(.*?)```", README, flags=re.S)
    code = code.replace("range(500)", "range(50)").replace("print(", "(")
    ns: dict = {}
    exec(compile(code, "README.md", "exec"), ns)
    assert set(ns["guide"].median()) == {"w", "sigma"}
    assert ns["samples"]["y"].shape == (100, 100)
