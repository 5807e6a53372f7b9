"""Two runs of a shipped spec on one machine write the same results.csv and summary.csv.

docs/cli.md promises that the results tables are reproducible: a wall-clock time (any
``*_seconds`` value, ``time_s``) stays in the cell's record (``cells/<id>.json``) and out of
the tables. The Laplace spec is the case: its study times its own refinement.
"""

from __future__ import annotations

import json
from pathlib import Path

from zoo.cli import main

SPEC = Path(__file__).parents[3] / "specs" / "two_moons_laplace_depth.yaml"
SHRUNK = [
    "sweep.seed=[0]",
    "sweep.model.depth=[1]",
    "data.n_train=100",
    "data.n_test=30",
    "model.param_budget=40",
    "inference.map.epochs=1",
    "studies.0.refine_steps=3",
]


def _run(out: Path) -> None:
    args = ["run", str(SPEC), "--out", str(out), "--no-progress", "--workers", "1"]
    assert main(args + [a for s in SHRUNK for a in ("--set", s)]) == 0


def test_two_runs_write_byte_identical_tables(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    _run(a)
    _run(b)
    for name in ("results.csv", "summary.csv"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    header = (a / "results.csv").read_text().splitlines()[0].split(",")
    assert not [c for c in header if c.endswith("_seconds") or c == "time_s"], header
    # the timings are still recorded, in the cell's record
    (record,) = [json.loads(p.read_text()) for p in (a / "cells").glob("*.json")]
    assert record["metrics"]["laplace_seconds"] > 0
    assert "laplace_seconds" not in (a / "report.md").read_text()


def test_the_summary_leads_with_the_studys_headline_numbers(tmp_path: Path) -> None:
    """The Summary is the study's headline metric under its label; every metric of every
    row follows behind it (a later section in Markdown, folded in HTML)."""
    _run(tmp_path / "a")
    md = (tmp_path / "a" / "report.md").read_text()
    lead = md.split("## Summary\n", 1)[1].split("\n## ", 1)[0]
    assert "| KL(q_diag ‖ q_full) of the Laplace Gaussian at the mode [nats] |" in lead
    assert "laplace_grad_norm" not in lead and len(lead.splitlines()) < 20
    full = md.split("\n## All metrics", 1)[1]
    assert "| laplace_kl |" in full and "laplace_grad_norm" in full
    assert md.index("## Summary") < md.index("## Figures") < md.index("## All metrics")
    html = (tmp_path / "a" / "report.html").read_text()
    assert "<details>\n<summary><strong>All metrics" in html
