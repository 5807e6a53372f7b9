"""A figure's error bars and bands stay inside the metric's range: an RMSE band never goes
below 0, an agreement band never leaves [0, 1] (a t-interval of 2 seeds is wide)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure

from reports.figures.metric_vs import _draw_panel
from reports.labels import metric_support
from reports.tables import summarize


def _summary(metric: str, values: list[list[float]]) -> pd.DataFrame:
    rows = [
        {"method": "nuts", "model.depth": d + 1, "seed": s, "status": "ok", metric: v}
        for d, seeds in enumerate(values)
        for s, v in enumerate(seeds)
    ]
    return summarize(pd.DataFrame(rows), [metric], by=["method", "model.depth"])


def _drawn_range(ax) -> tuple[float, float]:
    """The lowest and highest y of every band (fill) and error bar drawn on ``ax``."""
    ys = [p.vertices[:, 1] for c in ax.collections for p in c.get_paths() if len(p.vertices)]
    return float(min(y.min() for y in ys)), float(max(y.max() for y in ys))


@pytest.mark.parametrize(
    ("metric", "values", "low", "high"),
    [
        ("rmse", [[0.01, 0.30], [0.02, 0.25]], 0.0, None),  # t-interval of 2: 0.16 ± 1.8
        ("pred_agree_diag", [[1.0, 0.7], [0.98, 0.6]], 0.0, 1.0),
        ("pred_agree_diag", [[1.0, 0.7], [0.98, 0.6], [0.9, 1.0]], 0.0, 1.0),  # numeric x
    ],
)
def test_bands_and_bars_stay_in_the_metrics_range(metric, values, low, high) -> None:
    s = _summary(metric, values)
    assert (s[f"{metric}_mean"] - s[f"{metric}_ci95"]).min() < low  # the interval leaves it
    for x in ("model.depth", "method"):  # a band along a numeric x, bars on a categorical one
        ax = Figure().subplots()
        errors = _draw_panel(
            ax, s, x, metric, None if x == "method" else "method", results=None, over="seed"
        )
        lo, hi = _drawn_range(ax)
        assert lo >= low and (high is None or hi <= high), (x, lo, hi)
        assert "cut" in errors


def test_a_metric_without_bounds_is_not_cut() -> None:
    assert metric_support("kl_debiased") == (-np.inf, np.inf)  # a debiased KL may be < 0
    assert metric_support("kl_diag_full") == (0.0, np.inf)
    assert metric_support("accuracy") == (0.0, 1.0) and metric_support("brier") == (0.0, 2.0)
    s = _summary("kl_debiased", [[0.01, 0.30], [0.02, 0.25]])
    ax = Figure().subplots()
    errors = _draw_panel(ax, s, "model.depth", "kl_debiased", "method", results=None, over="seed")
    assert _drawn_range(ax)[0] < 0 and "cut" not in errors
