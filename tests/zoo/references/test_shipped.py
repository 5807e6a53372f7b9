"""The reference posteriors shipped with bnn-zoo: package data the wheel carries, every one
loads, docs/references.md's table states their grades, and its example runs verbatim."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import numpy as np

import zoo.references

ROOT = Path(__file__).resolve().parents[3]
PAGE = ROOT / "docs" / "references.md"
PACKAGE = ROOT / "zoo" / "references"
#: Most the shipped files may weigh in all (kept in git below this).
MAX_BYTES = 3_000_000


def _shipped_files() -> set[Path]:
    return {p for p in (PACKAGE / "shipped").rglob("*") if p.is_file()}


def test_the_wheel_carries_every_shipped_file_and_they_stay_small() -> None:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = data["tool"]["setuptools"]["package-data"]["zoo.references"]
    carried = {p for pattern in patterns for p in PACKAGE.glob(pattern)}
    files = _shipped_files()
    assert files and files == carried, sorted(map(str, files ^ carried))
    assert sum(p.stat().st_size for p in files) < MAX_BYTES
    assert zoo.references.shipped_dir() == PACKAGE / "shipped"


def _table() -> str:
    """docs/references.md's table of the shipped references, made from the files."""
    rows = [
        "| depth | seed | posterior | grade | kept from the next grade by | largest R-hat, "
        "weights aligned / as sampled / predictions | smallest bulk ESS, weights aligned / "
        "predictions | chains x draws kept (thin) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name in zoo.references.names():
        info = zoo.references.reference_info(zoo.references.load(name))["reference_posterior"]
        axes, inf = info["provenance"]["axes"], info["inference"]
        checks, cell = info["checks_made"], info["diagnostics"]["cell"]
        rows.append(
            f"| {axes['model.depth']} | {axes['seed']} | `{name}` | {checks['reference_grade']} "
            f"| {', '.join(checks['kept_from_next_grade_by']) or '-'} "
            f"| {cell['weights_rhat_aligned']:.3f} / {cell['max_r_hat']:.2f} "
            f"/ {cell['max_r_hat_pred']:.3f} "
            f"| {cell['weights_ess_bulk_aligned']:.0f} / {cell['min_ess_bulk_pred']:.0f} "
            f"| {inf['chains']} x {inf['draws_per_chain_stored']} ({inf['thin']}) |"
        )
    return "\n".join(rows)


def test_every_shipped_reference_loads_and_the_docs_state_its_grade() -> None:
    names = zoo.references.names()
    depths = set()
    for name in names:
        dt = zoo.references.load(name)
        info = zoo.references.reference_info(dt)
        assert (
            info["reference_grade"] == info["reference_posterior"]["checks_made"]["reference_grade"]
        )
        depths.add(info["reference_posterior"]["provenance"]["axes"]["model.depth"])
        for var in dt["posterior"].data_vars.values():
            assert var.dtype == np.float32 and np.isfinite(var.values).all()
    assert depths == {1, 2, 3, 4}
    assert _table() in PAGE.read_text(), "regenerate docs/references.md's table:\n" + _table()


def test_the_example_runs_verbatim(capsys) -> None:
    (code,) = re.findall(r"```python\n(.*?)```", PAGE.read_text(), flags=re.S)
    ns: dict = {}
    exec(compile(code, str(PAGE), "exec"), ns)
    assert ns["w"].dims[:2] == ("chain", "draw")
    assert ns["info"]["reference_grade"] in ("gold", "silver", "bronze")
    assert ns["names"] == zoo.references.names()
