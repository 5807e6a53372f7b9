"""Nested R-hat as recorded against arviz-stats, and the grade of a sampled cell's draws.

Synthetic chains with fixed seeds: iid N(0, 1) draws mix by construction, so their split
and nested R-hat sit within a few 0.001 of 1 (the Monte Carlo error of R-hat at 16 chains
x 200 draws is about 1/sqrt(chains x draws) ~ 0.02 on R-hat^2 - 1, far below the 0.05 gap
that a shift of half a standard deviation between superchains opens).
"""

from __future__ import annotations

import math

import arviz_stats as azs
import numpy as np
import pandas as pd
import pytest
import xarray as xr
from arviz_stats.base import array_stats

from reports.diagnostics import diagnostic_gates
from reports.grade import (
    GATES,
    GRADES,
    SHOWN,
    gate_metrics,
    gate_table,
    reference_grade,
    usable_for,
    worst_grade,
)
from reports.headline import headline
from reports.predictive import predictive_convergence
from reports.sampler_report import grade_blocks, grade_lines, sampler_record, sampler_tables
from reports.superchains import max_rhat_nested, posterior_rhat_nested
from reports.tables import summarize, summary_tables

CHAINS, DRAWS, K = 16, 200, 4
IDS = [c // (CHAINS // K) for c in range(CHAINS)]


def _tree(w: np.ndarray, b: np.ndarray) -> xr.DataTree:
    post = xr.Dataset(
        {"w": (("chain", "draw", "w_dim"), w), "b": (("chain", "draw"), b)},
        coords={"chain": np.arange(w.shape[0]), "draw": np.arange(w.shape[1])},
    )
    stats = xr.Dataset({"diverging": (("chain", "draw"), np.zeros(w.shape[:2], bool))})
    return xr.DataTree.from_dict({"posterior": post, "sample_stats": stats})


def _cell(dt: xr.DataTree, probs: np.ndarray, ids) -> dict:
    """The metrics a sampled cell records, computed by the same functions."""
    g = diagnostic_gates(dt)
    return {
        "max_r_hat": g.max_r_hat,
        "min_ess_bulk": g.min_ess_bulk,
        "rhat_nested": posterior_rhat_nested(dt, ids),
        "divergent_frac": g.n_divergent / g.n_transitions,
        **predictive_convergence(probs, ids),
    }


def _probs(z: np.ndarray) -> np.ndarray:
    """(chain, draw, point, 2) class probabilities from (chain, draw, point) logits."""
    p = 1 / (1 + np.exp(-z))
    return np.stack([1 - p, p], -1)


def test_nested_r_hat_as_recorded_equals_arviz_stats() -> None:
    rng = np.random.default_rng(0)
    w, b = rng.normal(size=(CHAINS, DRAWS, 3)), rng.normal(size=(CHAINS, DRAWS))
    dt = _tree(w, b)
    theirs = azs.rhat_nested(dt, superchain_ids=IDS, method="rank")  # the posterior group
    expected = max(float(theirs[v].max()) for v in ("w", "b"))
    assert posterior_rhat_nested(dt, IDS) == pytest.approx(expected, rel=1e-12)
    # the predictions: class 1's probability at each point, as predictive_convergence reads
    z = rng.normal(size=(CHAINS, DRAWS, 5))
    p = _probs(z)
    nested = np.asarray(array_stats.rhat_nested(p[..., 1], IDS, chain_axis=0, draw_axis=1))
    got = predictive_convergence(p, IDS)["rhat_nested_pred"]
    assert got == pytest.approx(float(nested.max()), rel=1e-12)
    # one superchain, or none given: nested R-hat does not apply
    assert posterior_rhat_nested(dt, [0] * CHAINS) is None
    assert predictive_convergence(p)["rhat_nested_pred"] is None


def test_unequal_superchains_use_their_first_chains_equally() -> None:
    rng = np.random.default_rng(1)
    x = rng.normal(size=(7, 50, 2))
    ids = [0, 0, 0, 0, 1, 1, 1]  # arviz-stats needs equal sizes: 3 + 3 chains are used
    keep = [0, 1, 2, 4, 5, 6]
    ref = array_stats.rhat_nested(x[keep], [0, 0, 0, 1, 1, 1], chain_axis=0, draw_axis=1)
    assert max_rhat_nested(x, ids) == pytest.approx(float(np.max(ref)), rel=1e-12)


def test_superchains_in_different_places_fail_the_nested_gate() -> None:
    rng = np.random.default_rng(2)
    w, b = rng.normal(size=(CHAINS, DRAWS, 3)), rng.normal(size=(CHAINS, DRAWS))
    z = rng.normal(size=(CHAINS, DRAWS, 5))
    good = _cell(_tree(w, b), _probs(z), IDS)
    assert good["rhat_nested"] < 1.01 and good["rhat_nested_pred"] < 1.01
    assert reference_grade(good).grade == "gold"
    # superchain k sits 0.5 k standard deviations away in one weight and one prediction
    shift = 0.5 * np.asarray(IDS, float)[:, None]
    w2, z2 = w.copy(), z.copy()
    w2[..., 0] += shift
    z2[..., 0] += shift
    bad = _cell(_tree(w2, b), _probs(z2), IDS)
    assert bad["rhat_nested"] > 1.05 and bad["rhat_nested_pred"] > 1.05
    g = reference_grade(bad)
    assert g.grade == "failed"
    assert {"r_hat_nested_pred"} <= set(g.failed)


def test_a_stuck_chain_is_graded_failed() -> None:
    rng = np.random.default_rng(3)
    w, b = rng.normal(size=(CHAINS, DRAWS, 3)), rng.normal(size=(CHAINS, DRAWS))
    z = rng.normal(size=(CHAINS, DRAWS, 5))
    w[3], b[3], z[3] = w[3, 0], b[3, 0], z[3, 0]  # chain 3 never moved
    m = _cell(_tree(w, b), _probs(z), IDS)
    assert m["max_r_hat"] > 1.05 or math.isnan(m["max_r_hat"])
    g = reference_grade(m)
    assert g.grade == "failed"
    assert "r_hat_pred" in g.failed


def test_grades_step_down_gate_by_gate() -> None:
    gold = {
        "max_r_hat": 1.005,
        "rhat_nested": None,  # one superchain: does not apply
        "min_ess_bulk": 500.0,
        "max_r_hat_pred": 1.002,
        "rhat_nested_pred": None,
        "min_ess_bulk_pred": 800.0,
        "divergent_frac": 0.0,
        "saturated_frac": 0.005,
    }
    assert reference_grade(gold) == ("gold", ())
    assert reference_grade({**gold, "kl_ess_n": 399.0}) == ("silver", ("kl_ess",))
    assert reference_grade({**gold, "saturated_frac": 0.02}) == ("silver", ("saturation",))
    # ChEES's adapted trajectory clipped at max_leapfrog: gold only, like saturation
    capped = reference_grade({**gold, "trajectory_at_cap": 1.0})
    assert capped == ("silver", ("trajectory_cap",))
    assert reference_grade({**gold, "trajectory_at_cap": 0.0}) == ("gold", ())
    assert reference_grade({**gold, "trajectory_at_cap": None}) == ("gold", ())  # not ChEES
    # the KL's own R-hat: a weight gate, optional (only cells with the price-of-MF study)
    assert reference_grade({**gold, "kl_rhat": 1.02}) == ("silver", ("kl_r_hat",))
    kl_split = reference_grade({**gold, "kl_rhat": 1.2, "kl_rhat_nested": 1.1})
    assert kl_split == ("bronze", ("kl_r_hat", "kl_r_hat_nested"))
    assert reference_grade({**gold, "kl_rhat": None, "kl_rhat_nested": None}).grade == "gold"
    silver = {**gold, "max_r_hat": 1.03, "divergent_frac": 0.0005}
    assert reference_grade(silver) == ("silver", ("r_hat", "divergences"))
    bronze = {**gold, "max_r_hat": 1.3, "min_ess_bulk": 20.0}
    assert reference_grade(bronze) == ("bronze", ("r_hat", "ess_bulk"))
    assert reference_grade({**bronze, "max_r_hat_pred": 1.2}) == ("failed", ("r_hat_pred",))
    # one chain: R-hat recorded as None cannot be measured, and a required gate fails
    one = {**gold, "max_r_hat": None, "max_r_hat_pred": None}
    assert reference_grade(one).grade == "failed"
    # NaN is a numerical failure even in an optional gate
    nan = reference_grade({**gold, "rhat_nested": float("nan")})
    assert nan == ("bronze", ("r_hat_nested",))
    # a regression cell (no prediction diagnostics at all): the weights alone grade it
    weights = {k: v for k, v in gold.items() if "pred" not in k}
    assert reference_grade(weights).grade == "gold"
    no_pred = reference_grade({**weights, "max_r_hat": 1.2})
    assert no_pred == ("failed", ("r_hat", "no bronze gate applies"))


def _aligned_cell(**changes) -> dict:
    """A gold cell with hidden-unit alignment whose raw weights' R-hat fails every grade."""
    gold = {
        "max_r_hat": 1.4,  # label switching: the raw R-hat no grade reads here
        "rhat_nested": 1.3,
        "weights_rhat_aligned": 1.005,
        "weights_rhat_nested_aligned": 1.004,
        "weights_ess_bulk_aligned": 450.0,
        "orbit_rhat": 1.006,
        "orbit_rhat_nested": None,
        "min_ess_bulk": 20.0,  # as label switching leaves it
        "max_r_hat_pred": 1.002,
        "min_ess_bulk_pred": 800.0,
        "divergent_frac": 0.0,
    }
    return {**gold, **changes}


def test_the_weight_gates_read_the_aligned_and_orbit_rhat_where_recorded() -> None:
    assert reference_grade(_aligned_cell()) == ("gold", ())
    silver = _aligned_cell(weights_rhat_aligned=1.03)
    assert reference_grade(silver) == ("silver", ("r_hat",))
    nested = _aligned_cell(weights_rhat_nested_aligned=1.08)
    assert reference_grade(nested) == ("bronze", ("r_hat_nested",))
    orbit = _aligned_cell(orbit_rhat=1.2, orbit_rhat_nested=1.1)
    assert reference_grade(orbit) == ("bronze", ("orbit_r_hat", "orbit_r_hat_nested"))
    assert reference_grade(_aligned_cell(orbit_rhat=float("nan"))).grade == "bronze"
    ess = _aligned_cell(weights_ess_bulk_aligned=150.0)
    assert reference_grade(ess) == ("silver", ("ess_bulk",))
    # one chain: the aligned R-hat recorded as None fails the required gate as the raw one
    one = _aligned_cell(weights_rhat_aligned=None, max_r_hat_pred=None)
    assert reference_grade(one).grade == "failed"
    # without the aligned metrics the raw ones are read (other models, Gaussian targets)
    raw = {k: v for k, v in _aligned_cell().items() if "aligned" not in k and "orbit" not in k}
    assert reference_grade(raw) == ("bronze", ("r_hat", "r_hat_nested", "ess_bulk"))
    mixed = {**raw, "max_r_hat": 1.03, "rhat_nested": None, "min_ess_bulk": 500.0}
    assert reference_grade(mixed).grade == "silver"
    assert {"max_r_hat", "weights_rhat_aligned", "rhat_nested"} <= set(gate_metrics())


def test_the_gate_table_nests_the_grades_and_says_what_each_is_for() -> None:
    for g in GATES:
        ts = [g.thresholds[k] for k in GRADES[:-1] if k in g.thresholds]
        order = sorted(ts) if g.op == "<=" else sorted(ts, reverse=True)
        assert ts == order, g  # gold's threshold at least as strict as silver's, ...
        needed = [k for k in GRADES[:-1] if k in g.thresholds]
        assert needed == list(GRADES[: len(needed)]), g  # a gate of bronze is one of gold's
    header, rows = gate_table()
    assert header[:3] == ["gate", "metric", "what"] and len(rows) == len(GATES) + len(SHOWN)
    assert rows[0][1:2] == ["weights_rhat_aligned (else max_r_hat)"]
    assert rows[0][3:6] == ["<= 1.01", "<= 1.05", "-"]
    # the raw weights' R-hat is shown with what it measures
    assert rows[-1][:2] == ["(shown)", "max_r_hat"] and "labels" in rows[-1][2]
    assert usable_for("silver", "weights") and not usable_for("bronze", "weights")
    assert usable_for("bronze", "predictions") and not usable_for("failed", "predictions")
    assert worst_grade(["gold", None, "bronze", float("nan"), "silver"]) == "bronze"
    assert worst_grade([None]) is None


# ---------------------------------------------------------------- grades in the report


def _graded_results() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "method": ["nuts"] * 5 + ["mfvi"],
            "depth": [1, 1, 2, 2, 3, 1],
            "seed": [0, 1, 0, 1, 0, 0],
            "kl": [1.0, 2.0, 3.0, 50.0, 4.0, 6.0],
            "reference_grade": ["gold", "bronze", "silver", "failed", "failed", None],
            "status": "ok",
        }
    )


def test_a_failed_cell_never_enters_a_mean_and_the_grade_is_shown() -> None:
    s = summarize(_graded_results(), ["kl"], by=["method", "depth"])
    rows = {(r.method, r.depth): r for r in s.itertuples()}
    assert rows["nuts", 1].kl_mean == 1.5 and rows["nuts", 1].grade == "bronze"
    assert rows["nuts", 2].kl_mean == 3.0 and rows["nuts", 2].kl_n == 1  # 50 left out
    assert rows["nuts", 2].n_grade_failed == 1 and rows["nuts", 2].grade == "silver"
    assert np.isnan(rows["nuts", 3].kl_mean) and rows["nuts", 3].n_grade_failed == 1
    assert pd.isna(rows["mfvi", 1].grade) and rows["mfvi", 1].n_grade_failed == 0
    ((header, table),) = summary_tables(s, ["kl"])
    assert header[-1] == "grade"
    shown = {(r[0], r[1]): r[-1] for r in table}
    assert shown["nuts", "2"] == "silver; 1 failed left out"
    assert shown["nuts", "3"] == "1 failed left out"  # kept, though it has no value
    assert shown["mfvi", "1"] == ""
    # the default group keys are not split by the grade columns
    default = summarize(_graded_results().drop(columns="depth"), ["kl"])
    assert list(default["method"]) == ["mfvi", "nuts"]
    sentence = headline(s, "kl", "depth", "method")
    # 1 and 2 at depth 1: 1.5 ± 6.4 (the 95% t-interval with 1 degree of freedom)
    assert "of nuts changes by less than its 95% intervals: 1.5 ± 6.4 at depth 1" in sentence
    assert "[grade bronze; 1 failed cell left out]" in sentence
    assert "1 failed cell left out where no value remains" in sentence


def test_the_sampler_section_lists_grades_and_the_cli_lines() -> None:
    rows = [
        {"max_r_hat": 1.0, "min_ess_bulk": 500.0, "reference_grade": "gold", "grade_failed": ""},
        {
            "max_r_hat": 1.2,
            "min_ess_bulk": 50.0,
            "reference_grade": "bronze",
            "grade_failed": "r_hat,ess_bulk",
        },
        {
            "max_r_hat": float("nan"),
            "min_ess_bulk": float("nan"),
            "reference_grade": "failed",
            "grade_failed": "r_hat_pred",
        },
    ]
    records = {f"c{i}": sampler_record(r) for i, r in enumerate(rows)}
    assert records["c1"].grade_failed == ("r_hat", "ess_bulk")
    paras, tables = grade_blocks(records)
    assert "1 gold; 1 bronze (kept from the next grade by r_hat in 1, ess_bulk in 1); " in paras[0]
    assert tables[0] == gate_table() and [r[0] for r in tables[1][1]] == list(GRADES)
    lines = grade_lines(records)
    assert lines[0] == "grades of 3 sampled cells: gold 1, bronze 1, failed 1"
    assert lines[1:] == [
        "  bronze  c1: not silver: r_hat, ess_bulk",
        "  failed  c2: not bronze: r_hat_pred",
    ]
    frame = pd.DataFrame([{"cell_id": f"c{i}", "seed": i, **r} for i, r in enumerate(rows)])
    _, (s_header, s_rows) = sampler_tables(frame, ["seed"], records)
    assert s_header[-2:] == ["grade", "kept from the next grade by"]
    assert s_rows[1][-2:] == ["bronze", "r_hat, ess_bulk"]
    assert grade_blocks({"x": sampler_record({"max_r_hat": 1.0})}) == ([], [])


def test_a_weight_space_headline_says_when_its_grade_does_not_support_it() -> None:
    s = summarize(_graded_results(), ["kl"], by=["method", "depth"])
    weights = headline(s, "kl", "depth", "method", use="weights")
    # nuts: depth 1 bronze (held back: no value, no trend through it), depth 2 silver
    assert "of nuts is 3 at depth 2 [grade silver; 1 failed cell left out]" in weights
    assert "(depth 1 graded bronze: a weight-space number needs silver or better)" in weights
    assert "1.5" not in weights and "changes" not in weights
    predictions = headline(s, "kl", "depth", "method")
    assert "[grade bronze; 1 failed cell left out]" in predictions
    assert "not enough" not in predictions
    silver = _graded_results().query("reference_grade != 'bronze'")
    ok = headline(
        summarize(silver, ["kl"], by=["method", "depth"]), "kl", "depth", "method", use="weights"
    )
    assert "not enough" not in ok and "grade silver" in ok


def test_a_weight_space_headline_of_bronze_cells_states_no_trend() -> None:
    # the default run's case: every sampled depth bronze, the KL falling with depth
    bronze = (
        _graded_results()
        .query("reference_grade != 'failed'")
        .assign(
            reference_grade=lambda d: d["reference_grade"].where(d["method"] == "mfvi", "bronze")
        )
    )
    s = summarize(bronze, ["kl"], by=["method", "depth"])
    weights = headline(s, "kl", "depth", "method", use="weights")
    assert "of nuts not stated: depth 1, 2 graded bronze: a weight-space number" in weights
    assert "falls" not in weights and "rises" not in weights and "1.5" not in weights
    assert "of nuts changes by less" in headline(s, "kl", "depth", "method")  # predictions


def test_a_weight_space_figure_draws_a_mean_of_too_low_a_grade_hollow() -> None:
    from reports.figures.metric_vs import metric_figure

    s = summarize(_graded_results(), ["kl"], by=["method", "depth"])
    png, caption = metric_figure(s, "depth", "kl", "method", weight_space=frozenset({"kl"}))
    assert png.startswith(b"\x89PNG") and "hollow: reference grade below silver" in caption
    _, plain = metric_figure(s, "depth", "kl", "method")  # not a weight-space metric
    assert "hollow" not in plain
