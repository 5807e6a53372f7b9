"""Tests for reports.tables."""

import math

import numpy as np
import pandas as pd
import pytest

from reports.tables import nonfinite_values, summarize


def _results() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "cell_id": ["c0", "c1", "c2", "c3", "c4", "c5", "c6"],
            "model.depth": [2, 2, 2, 1, 1, 1, 1],
            "method": ["mf", "mf", "mf", "mf", "mf", "nuts", "mf"],
            "seed": [0, 1, 2, 0, 1, 0, 2],
            "status": ["ok", "ok", "ok", "ok", "ok", "ok", "failed"],
            "error": ["", "", "", "", "", "", "boom"],
            "time_s": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0],
            "accuracy": [0.8, 0.9, 0.7, 0.5, 0.6, 0.95, np.nan],
            "nll": [1.0, 2.0, 4.0, 1.0, 1.0, 0.1, np.nan],
        }
    )


def test_summarize_default_groups_mean_error_n_and_order():
    out = summarize(_results(), ["accuracy", "nll"])
    assert list(out.columns) == [
        "model.depth",
        "method",
        "accuracy_mean",
        "accuracy_sem",
        "accuracy_ci95",
        "accuracy_n",
        "nll_mean",
        "nll_sem",
        "nll_ci95",
        "nll_n",
        "n",
    ]
    # sorted by (model.depth, method); the failed row is excluded
    assert out[["model.depth", "method"]].values.tolist() == [[1, "mf"], [1, "nuts"], [2, "mf"]]
    assert out["n"].tolist() == [2, 1, 3]

    # depth 2 / mf: accuracy 0.8, 0.9, 0.7 -> mean 0.8, sd 0.1, sem 0.1/sqrt(3)
    row = out.iloc[2]
    assert row["accuracy_mean"] == pytest.approx(0.8)
    assert row["accuracy_sem"] == pytest.approx(0.1 / math.sqrt(3))
    # nll 1, 2, 4 -> mean 7/3, var = ((4/3)^2 + (1/3)^2 + (5/3)^2) / 2 = 7/3
    assert row["nll_mean"] == pytest.approx(7 / 3)
    assert row["nll_sem"] == pytest.approx(math.sqrt(7 / 3) / math.sqrt(3))

    # depth 1 / mf: accuracy 0.5, 0.6 -> sd = 0.1/sqrt(2), sem = 0.05
    assert out.iloc[0]["accuracy_sem"] == pytest.approx(0.05)
    assert out.iloc[0]["nll_sem"] == pytest.approx(0.0)


def test_summarize_single_repeat_has_nan_sem():
    out = summarize(_results(), ["accuracy"])
    nuts = out[out["method"] == "nuts"].iloc[0]
    assert nuts["n"] == 1
    assert nuts["accuracy_mean"] == pytest.approx(0.95)
    assert math.isnan(nuts["accuracy_sem"])


def test_summarize_unlisted_known_metric_does_not_split_groups():
    df = _results().assign(neg_elbo=np.arange(7.0))
    out = summarize(df, ["accuracy"])
    cols = [
        "model.depth",
        "method",
        "accuracy_mean",
        "accuracy_sem",
        "accuracy_ci95",
        "accuracy_n",
        "n",
    ]
    assert list(out.columns) == cols
    assert out["n"].tolist() == [2, 1, 3]


def test_summarize_explicit_by_and_no_status_column():
    df = _results().drop(columns=["status"])
    df = df[df["cell_id"] != "c6"]
    out = summarize(df, ["accuracy"], by=["method"])
    assert out["method"].tolist() == ["mf", "nuts"]
    assert out["n"].tolist() == [5, 1]
    assert out.iloc[0]["accuracy_mean"] == pytest.approx(np.mean([0.8, 0.9, 0.7, 0.5, 0.6]))


def test_summarize_no_group_keys_gives_one_row():
    out = summarize(_results(), ["accuracy"], by=[])
    assert len(out) == 1
    assert out.loc[0, "n"] == 6
    assert out.loc[0, "accuracy_mean"] == pytest.approx(np.mean([0.8, 0.9, 0.7, 0.5, 0.6, 0.95]))


def test_summarize_all_failed_is_empty_with_columns():
    df = _results().assign(status="failed")
    out = summarize(df, ["accuracy"])
    assert out.empty
    cols = [
        "model.depth",
        "method",
        "accuracy_mean",
        "accuracy_sem",
        "accuracy_ci95",
        "accuracy_n",
        "n",
    ]
    assert list(out.columns) == cols


def test_summarize_errors_name_the_column():
    with pytest.raises(KeyError, match="ece"):
        summarize(_results(), ["ece"])
    with pytest.raises(KeyError, match="model.width"):
        summarize(_results(), ["accuracy"], by=["model.width"])
    bad = _results().assign(accuracy="n/a")
    with pytest.raises(ValueError, match="accuracy"):
        summarize(bad, ["accuracy"])


def test_summarize_counts_the_finite_values_behind_each_mean():
    # An ok cell with a NaN or infinite metric must not vanish into the mean unnoticed: the
    # mean and s.e. are over the finite values and <metric>_n says how many there were.
    df = _results()
    df.loc[df["cell_id"] == "c1", "nll"] = np.nan
    df.loc[df["cell_id"] == "c2", "nll"] = np.inf
    out = summarize(df, ["accuracy", "nll"])
    row = out.iloc[2]  # depth 2 / mf: nll 1.0, NaN, inf
    assert (row["n"], row["nll_n"], row["accuracy_n"]) == (3, 1, 3)
    assert row["nll_mean"] == 1.0 and math.isnan(row["nll_sem"])
    assert out["nll_n"].tolist() == [2, 1, 1] and out["accuracy_n"].tolist() == [2, 1, 3]
    # no repeat axis: one row per cell
    per_cell = summarize(df, ["nll"], over=None, by=["model.depth", "method", "seed"])
    assert len(per_cell) == 6 and (per_cell["n"] == 1).all()
    assert per_cell["nll_n"].tolist() == [1, 1, 1, 1, 0, 0]


def test_nonfinite_values_names_computed_nan_and_inf_not_missing_metrics():
    df = _results().assign(kl=[np.nan] * 5 + [2.0, np.nan])  # only nuts computes kl
    df.loc[df["cell_id"] == "c1", "nll"] = np.nan
    df.loc[df["cell_id"] == "c4", "accuracy"] = -np.inf
    bad = nonfinite_values(df, ["accuracy", "nll", "kl"])
    assert bad.values.tolist() == [
        ["c1", "nll", pytest.approx(np.nan, nan_ok=True)],
        ["c4", "accuracy", -np.inf],
    ]
    # the cell record's own list wins: a NaN it does not name is a metric not computed
    df["nonfinite"] = ["", "", "", "", "accuracy", "", ""]
    assert nonfinite_values(df, ["accuracy", "nll", "kl"])["cell_id"].tolist() == ["c4"]
