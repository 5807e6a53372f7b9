"""How a summary lies along a sweep axis: the x positions, the lines, what the bars are.

Shared by the metric-vs-axis figures (:mod:`reports.figures.metric_vs`) and the headline
(:mod:`reports.headline`), so that a sentence and the figure beside it group, order and
count the same cells.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import pandas as pd

from reports.labels import fmt_value, is_missing, plural, repeat_word
from reports.tables import key_columns

__all__ = ["XAxis", "error_phrase", "line_groups", "matching", "x_axis"]


class XAxis(NamedTuple):
    """Where the values of an x column go: positions, ticks, labels, categorical or not."""

    ticks: list[float]
    labels: list[str]
    categorical: bool
    integral: bool
    index: dict[str, int]

    def positions(self, values: pd.Series) -> np.ndarray:
        """The x position of each value (NaN for a category not on the axis)."""
        if self.categorical:
            return np.array([self.index.get(fmt_value(v), np.nan) for v in values], dtype=float)
        return pd.to_numeric(values, errors="coerce").to_numpy(dtype=float)


def x_axis(values: pd.Series) -> XAxis:
    """A numeric axis when every value is a number (not a bool), else evenly spaced categories."""
    present = values[values.notna()]
    numeric = pd.to_numeric(present, errors="coerce")
    if len(present) and numeric.notna().all() and not pd.api.types.is_bool_dtype(values):
        uniq = np.unique(numeric.to_numpy(dtype=float))
        integral = bool(uniq.size) and bool(np.all(uniq == np.round(uniq)))
        return XAxis([float(u) for u in uniq], [fmt_value(u) for u in uniq], False, integral, {})
    cats = list(dict.fromkeys(fmt_value(v) for v in values))
    return XAxis(
        [float(i) for i in range(len(cats))], cats, True, True, {c: i for i, c in enumerate(cats)}
    )


def _count_phrase(counts: Sequence[int], over: str | None) -> str:
    """``over 3 seeds`` / ``over 2-3 seeds`` for the numbers of values behind the means."""
    counts = sorted({int(c) for c in counts if c == c})
    word = repeat_word(over)
    if not counts:
        return ""
    lo, hi = counts[0], counts[-1]
    return f"over {lo} {plural(word, hi)}" if lo == hi else f"over {lo}-{hi} {plural(word, hi)}"


def error_phrase(data: pd.DataFrame, metric: str, over: str | None) -> str:
    """What the error bars are, e.g. ``mean ± 95% t-interval over 3 seeds`` (``one seed``: no
    bars)."""
    col = f"{metric}_n" if f"{metric}_n" in data.columns else "n"
    if col not in data.columns or over is None:
        return "one value per cell"
    counts = data[col].dropna().astype(int).tolist()
    if counts and max(counts) <= 1:
        return f"one {repeat_word(over)}: no error bars"
    return f"mean ± 95% t-interval {_count_phrase(counts, over)}"


def line_groups(
    data: pd.DataFrame, summary: pd.DataFrame, x: str, hue: str | None
) -> tuple[list[str], list[tuple[str | None, tuple, pd.DataFrame]]]:
    """Line keys (hue, then other keys that still vary) and the groups of ``data`` by them."""
    keys = [k for k in key_columns(summary) if k not in (x, hue)]
    varying = [k for k in keys if data[k].nunique(dropna=False) > 1]
    line_keys = ([hue] if hue is not None else []) + varying
    if not line_keys:
        return [], [(None, (), data)]
    groups = []
    for key, sub in data.groupby(line_keys, sort=True, dropna=False):
        key = key if isinstance(key, tuple) else (key,)
        parts = []
        for name, value in zip(line_keys, key, strict=True):
            shown = fmt_value(value)
            parts.append(shown if name == hue and isinstance(value, str) else f"{name}={shown}")
        groups.append((", ".join(parts), key, sub))
    return line_keys, groups


def matching(frame: pd.DataFrame, keys: Sequence[str], values: tuple) -> pd.DataFrame:
    """Rows of ``frame`` whose ``keys`` equal ``values`` (missing matches missing)."""
    mask = np.ones(len(frame), dtype=bool)
    for k, v in zip(keys, values, strict=True):
        if k not in frame.columns:
            return frame.iloc[0:0]
        col = frame[k]
        mask &= (col.isna() if is_missing(v) else (col == v)).to_numpy(dtype=bool)
    return frame[mask]
