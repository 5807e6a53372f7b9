"""The default spec end to end (slow): MF-VI reaches >= 0.95 test accuracy at every depth.

This is the acceptance criterion of the spine: `zoo run specs/two_moons_depth.yaml` as a
new user runs it (all 8 depths x 3 seeds), checked on its results.csv.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from zoo.cli import main

SPEC = Path(__file__).resolve().parents[2] / "specs" / "two_moons_depth.yaml"


@pytest.mark.slow
def test_default_spec_accuracy_at_every_depth(tmp_path: Path) -> None:
    out = tmp_path / "run"
    assert main(["run", str(SPEC), "--out", str(out), "--no-progress"]) == 0
    res = pd.read_csv(out / "results.csv")
    assert len(res) == 24 and (res["status"] == "ok").all()
    assert sorted(res["model.depth"].unique()) == list(range(1, 9))
    # widths follow the 1000-parameter budget rule, deepest is narrowest
    widths = res.groupby("model.depth")["width"].first()
    assert widths[1] == 199 and widths[8] == 11 and widths.is_monotonic_decreasing
    assert (res["n_params"] <= 1000).all()
    worst = res.groupby("model.depth")["accuracy"].min()
    assert (worst >= 0.95).all(), worst.to_dict()
    summary = pd.read_csv(out / "summary.csv")
    assert (summary["n"] == 3).all()
