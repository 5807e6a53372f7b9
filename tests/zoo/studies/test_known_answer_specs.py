"""The known-answer simulations (``specs/ridge_target.yaml``, ``specs/permutation_target.yaml``)
run through ``zoo run``, shrunk: their files, and their numbers against the exact answers
within the draws' own Monte Carlo errors (fixed seeds)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from reports.ground_truth import random_spd
from reports.ridge_target import RidgeTarget, moment_band
from reports.targets import UNIT_KINDS, gaussian_chains, permutation_target
from zoo.cli import main
from zoo.spec.sections.known_answers import UNIT_KINDS as SPEC_UNIT_KINDS
from zoo.spec.sections.known_answers import VARIANTS
from zoo.studies.known_answers.ridge import EXPECTED, ridge_metrics

ROOT = Path(__file__).resolve().parents[3]


def _run(tmp_path: Path, spec: str, *sets: str) -> Path:
    """``zoo run specs/<spec> --out tmp --set ...``: the run directory."""
    out = tmp_path / "run"
    args = ["run", str(ROOT / "specs" / spec), "--out", str(out), "--no-progress"]
    assert main([*args, *(a for s in sets for a in ("--set", s))]) == 0
    return out


def test_spec_and_report_name_the_same_kinds_and_variants() -> None:
    assert tuple(UNIT_KINDS) == SPEC_UNIT_KINDS
    assert tuple(EXPECTED) == VARIANTS


def test_permutation_target_recovers_distinct_units_and_misses_the_known_failures(
    tmp_path: Path,
) -> None:
    """Two seeds a kind. Distinct units: aligned less null holds the exact KL in its 95%
    interval on both, and the rule's answer too; the near-identical pair and the dead unit
    at a centred prior miss the exact KL by more than 3 half-widths (the documented
    limitation of the alignment); the near-identical pair's estimates hold the rule's own
    answer (the pivot iterated to its fixed point), which differs from the exact KL."""
    out = _run(
        tmp_path, "permutation_target.yaml", "simulation.seeds=2", "simulation.rule_draws=50000"
    )
    seeds = pd.read_csv(out / "seeds.csv")
    summary = pd.read_csv(out / "results.csv")
    assert (out / "report.md").exists() and (out / "report.html").exists()
    assert list(summary["kind"]) == list(UNIT_KINDS) and list(summary["seeds"]) == [2, 2, 2]
    for kind, rows in seeds.groupby("kind"):
        exact = permutation_target(2, 4, 1, separation=6.0, seed=0, **UNIT_KINDS[kind]).kl
        np.testing.assert_allclose(rows["kl_exact"], exact, rtol=1e-12)
        np.testing.assert_allclose(rows["estimate"], rows["kl_aligned"] - rows["null"])
        miss = (rows["estimate"] - exact).abs() / rows["half_width"]
        assert list(rows["inside"]) == list(miss <= 1)
        rule_miss = (rows["estimate"] - rows["kl_rule"]).abs()
        assert list(rows["inside_rule"]) == list(
            rule_miss <= rows["half_width"] + 2 * rows["kl_rule_se"]
        )
        if kind == "distinct":
            assert (miss <= 1).all(), rows.to_dict("records")
            assert rows["inside_rule"].all(), rows.to_dict("records")
            # the raw KL of the symmetrised draws is far off: alignment is what recovers it
            assert ((rows["kl_raw"] - exact) / rows["half_width"] > 20).all()
        else:
            assert (miss > 3).all(), rows.to_dict("records")
        if kind == "near_identical":
            assert rows["inside_rule"].all(), rows.to_dict("records")
            assert (exact - rows["kl_rule"] > 0.15).all()  # the rule's systematic error
    inside = seeds.groupby("kind", sort=False)["inside"].sum()
    assert list(summary["inside"]) == [int(inside[k]) for k in summary["kind"]]
    assert "0 failed" in (out / "report.md").read_text()


def test_ridge_target_long_recovers_and_short_fails_its_gates(tmp_path: Path) -> None:
    """A shrunk long run (8 chains in 2 superchains, 150 warm-up, 200 draws) recovers the
    exact moments (every |z| inside the Bonferroni band) and the KL within its interval; cut
    to 10 warm-up iterations, 30 draws and 3 leapfrog steps it fails its gates."""
    out = _run(
        tmp_path,
        "ridge_target.yaml",
        "simulation.variants=[long, short]",
        "simulation.chains=8",
        "simulation.superchains=2",
        "simulation.kl_groups=4",
        "simulation.warmup=150",
        "simulation.draws=200",
    )
    r = pd.read_csv(out / "results.csv").set_index("variant")
    assert list(r.index) == ["long", "short"] and (out / "report.md").exists()
    long, short = r.loc["long"], r.loc["short"]
    assert long["kl_exact"] == pytest.approx(0.8305, abs=1e-4)  # the quadrature's, as documented
    assert long["moments"] == 35 and long["max_abs_z"] <= long["z_band"], long.to_dict()
    assert abs(long["kl_debiased"] - long["kl_exact"]) <= long["kl_half_width"], long.to_dict()
    assert long["recovered"] and long["gates"] == "pass" and long["as_expected"], long.to_dict()
    assert short["gates"] == "fail" and short["split_rhat"] > 1.05, short.to_dict()
    assert short["as_expected"], short.to_dict()


def test_ridge_metrics_verdicts_on_draws_with_the_exact_moments() -> None:
    """No sampler: independent Gaussian draws with the ridge target's exact mean and
    covariance recover its moments and KL and pass the gates; the same draws with two of
    four superchains shifted by 1 sd in ``a_1`` fail nested R-hat and are not recovered."""
    target = RidgeTarget(
        np.array([0.5, 0.8]), 0.5, (0.0, 0.0), (1.0, 1.0), np.zeros(3), random_spd(3, 10.0, seed=1)
    )
    mean, cov = target.moments()
    x = gaussian_chains(mean, cov, 16, 500, seed=3)
    ids = [c // 4 for c in range(16)]
    m = ridge_metrics(x, target, ids)
    assert m["moments"] == 35 and m["z_band"] == pytest.approx(moment_band(35))
    assert moment_band(35) == pytest.approx(3.1888, abs=1e-4)
    assert m["max_abs_z"] <= m["z_band"] and m["kl_inside"], m
    assert m["recovered"] and m["gates"] == "pass", m
    x[:8, :, 0] += np.sqrt(cov[0, 0])
    bad = ridge_metrics(x, target, ids)
    assert bad["nested_rhat"] > 1.05 and bad["gates"] == "fail", bad
    assert not bad["recovered"] and bad["max_abs_z"] > bad["z_band"], bad


@pytest.mark.parametrize(
    ("spec", "sets", "field"),
    [
        ("ridge_target.yaml", ["simulation.chains=10"], "chains (10) must split into superchains"),
        ("ridge_target.yaml", ["simulation.noise_sd=-1"], "simulation.noise_sd"),
        ("ridge_target.yaml", ["simulation.prior_sd=[1, 0]"], "simulation.prior_sd"),
        ("ridge_target.yaml", ["simulation.variants=[long, long]"], "simulation.variants"),
        ("ridge_target.yaml", ["simulation.kl_groups=32"], "kl_groups (32) exceeds chains"),
        ("permutation_target.yaml", ["simulation.groups=32"], "groups (32) exceeds chains"),
        ("permutation_target.yaml", ["simulation.kinds=[dead]"], "simulation.kinds"),
        ("permutation_target.yaml", ["simulation.rho=1"], "simulation.rho"),
        ("permutation_target.yaml", ["simulation.strength=-0.5"], "simulation.strength"),
    ],
)
def test_bad_fields_are_named(spec: str, sets: list[str], field: str, capsys) -> None:
    args = ["validate", str(ROOT / "specs" / spec)]
    assert main([*args, *(a for s in sets for a in ("--set", s))]) == 2
    err = capsys.readouterr().err
    assert field in err and "Traceback" not in err, err


def test_validate_and_list_show_the_known_answer_specs(capsys) -> None:
    for name in ("ridge_target", "permutation_target"):
        assert main(["validate", f"specs/{name}.yaml"]) == 0
        assert f"specs/{name}.yaml: ok (a simulation)" in capsys.readouterr().out
    assert main(["list"]) == 0
    listing = capsys.readouterr().out
    assert "ridge_target.yaml" in listing and "permutation_target.yaml" in listing
