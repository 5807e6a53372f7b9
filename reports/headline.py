"""What a run found, in one sentence per metric: :func:`headline`.

The sentence is computed from the summary (:func:`reports.tables.summarize`), never
written by hand: per line of the figure beside it, the mean at the first and the last
value of the sweep axis and whether it rises or falls by more than the combined half-widths
of the ends' 95% t-intervals, and where sampled cells are behind a line, the worst of their
reference grades (:mod:`reports.grade`) and how many failed cells were left out of its means.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from reports.grade import NEEDS, usable_for, worst_grade
from reports.labels import (
    METRIC_LABELS,
    Labels,
    axis_word,
    fmt_num,
    fmt_value,
    metric_label,
    plural,
)
from reports.sweep import error_phrase, line_groups, x_axis

__all__ = ["headline"]


def headline(
    summary: pd.DataFrame,
    metric: str,
    x: str,
    hue: str | None,
    *,
    over: str | None = "seed",
    max_groups: int = 4,
    labels: Labels = METRIC_LABELS,
    use: str = "predictions",
) -> str | None:
    """One sentence saying what ``metric`` does along ``x``, computed from the summary.

    For a numeric ``x``, per line (``hue`` value): the mean at the first and at the last
    ``x`` and whether it rises or falls (by more than the root sum of squares of the ends'
    95% t-interval half-widths) or changes by less, e.g. ``KL(q_diag ‖ q_full) [nats] of
    nuts falls from 34.8 ± 5.2 at depth 1 to 20.1 ± 3.9 at depth 4 (mean ± 95% t-interval
    over 3 seeds).`` For a categorical
    ``x``, the mean at each value.

    Parameters
    ----------
    summary : pd.DataFrame
        Output of :func:`reports.tables.summarize`.
    metric, x, hue : str
        As in :func:`reports.figures.metric_vs.plot_metric_vs`.
    over : str or None
        The repeat axis of the summary.
    max_groups : int, default 4
        Lines described; the others are counted.
    labels : mapping, default METRIC_LABELS
        The label table (:func:`reports.labels.metric_label`).
    use : {"predictions", "weights"}, default "predictions"
        What the metric needs of a sampled line's reference grade
        (:func:`reports.grade.usable_for`): a weight-space metric (a KL or W2 of the weights'
        draws) needs silver or better, and a line graded lower says so after its grade.

    Returns
    -------
    str or None
        None when the metric has no finite mean and no failed cell was left out of one.
    """
    mean_col = f"{metric}_mean"
    if summary.empty or mean_col not in summary.columns or x not in summary.columns:
        return None
    finite = np.isfinite(summary[mean_col].astype(float))
    data = summary[finite]
    gone = _left_out(summary[~finite])  # failed cells behind means with no value left
    if data.empty:
        if not gone:
            return None
        return (
            f"{metric_label(metric, labels)}: no value: the {gone} sampled "
            f"{plural('cell', gone)} behind it {'was' if gone == 1 else 'were'} graded failed "
            "and left out of the means (see the sampler diagnostics)."
        )
    axis = x_axis(data[x])
    _, groups = line_groups(data, summary, x, None if hue == x else hue)
    parts = [
        _line_claim(label, whole, axis, metric, x, use) for label, _, whole in groups[:max_groups]
    ]
    stated = any(ok for _, ok in parts)
    parts = [p for p, _ in parts]
    more = len(groups) - max_groups
    text = "; ".join(parts) + (f"; and {more} more {plural('line', more)}" if more > 0 else "")
    if gone:
        text += f"; {gone} failed {plural('cell', gone)} left out where no value remains"
    errors = f" ({error_phrase(data, metric, over)})" if stated else ""
    sep = ": " if axis.categorical else " "
    return f"{metric_label(metric, labels)}{sep}{text}{errors}."


def _left_out(rows: pd.DataFrame) -> int:
    """Cells graded failed that were left out of ``rows``' means (0 without grades)."""
    if "n_grade_failed" not in rows.columns:
        return 0
    return int(pd.to_numeric(rows["n_grade_failed"], errors="coerce").fillna(0).sum())


def _claim(
    sub: pd.DataFrame, mean_col: str, sem_col: str, x: str, word: str, categorical: bool
) -> str:
    """What a line's means say along ``x``: its values (categorical ``x`` or one point), or
    whether it rises or falls by more than the ends' 95% intervals."""
    m = sub[mean_col].to_numpy(dtype=float)
    s = sub[sem_col].to_numpy(dtype=float) if sem_col in sub.columns else np.full_like(m, np.nan)
    xs = [fmt_value(v) for v in sub[x]]
    if categorical:
        return ", ".join(f"{xv} {fmt_num(a, b)}" for xv, a, b in zip(xs, m, s, strict=True))
    if len(sub) == 1:
        return f"is {fmt_num(m[0], s[0])} at {word} {xs[0]}"
    a, b, sa, sb = m[0], m[-1], s[0], s[-1]
    se = math.sqrt(sum(v**2 for v in (sa, sb) if math.isfinite(v)))  # of two 95% intervals
    if (se > 0 and abs(b - a) <= se) or b == a:
        both = f"{fmt_num(a, sa)} at {word} {xs[0]}, {fmt_num(b, sb)} at {word} {xs[-1]}"
        return f"changes by less than its 95% intervals: {both}"
    ends = f"{fmt_num(a, sa)} at {word} {xs[0]} to {fmt_num(b, sb)} at {word} {xs[-1]}"
    return f"{'rises' if b > a else 'falls'} from {ends}"


def _supported(sub: pd.DataFrame, use: str, x: str, word: str) -> tuple[pd.DataFrame, str]:
    """The rows of a line whose grade supports ``use`` (:func:`reports.grade.usable_for`),
    and what is held back, e.g. ``"depth 2, 3 graded bronze: a weight-space number needs
    silver or better"`` (empty when every row supports it). A headline states only the
    rows kept: a bronze cell's weight-space KL is no finding, so no trend runs through it."""
    if "grade" not in sub.columns:
        return sub, ""
    ok = np.array([usable_for(worst_grade([g]), use) for g in sub["grade"]], dtype=bool)
    if ok.all():
        return sub, ""
    xs = ", ".join(fmt_value(v) for v in sub[x][~ok])
    grade = worst_grade(sub["grade"][~ok])
    return sub[
        ok
    ], f"{word} {xs} graded {grade}: a weight-space number needs {NEEDS[use]} or better"


def _grades(sub: pd.DataFrame, use: str, left_out: int) -> str:
    """`` [grade silver; 1 failed cell left out]`` for a line of sampled cells, else ``""``:
    the worst grade of the rows stated (each supports ``use``: :func:`_supported`) and the
    ``left_out`` failed cells of the whole line."""
    if "grade" not in sub.columns:
        return ""
    grade = worst_grade(sub["grade"])
    k = left_out
    said = ([f"grade {grade}"] if grade else []) + (
        [f"{k} failed {plural('cell', k)} left out"] if k else []
    )
    return f" [{'; '.join(said)}]" if said else ""


def _line_claim(label: str, whole: pd.DataFrame, axis, metric: str, x: str, use: str):
    """One line's part of the headline and whether it states a value: its claim along ``x``
    with its grades, or why its cells cannot carry ``metric`` (``use``'s grade not met)."""
    word = axis_word(x)
    whole = whole.assign(_x=axis.positions(whole[x])).sort_values("_x")
    sub, held = _supported(whole, use, x, word)
    who = f"of {label} " if label else ""
    if sub.empty:
        return f"{who}not stated: {held}", False
    claim = _claim(sub, f"{metric}_mean", f"{metric}_ci95", x, word, axis.categorical)
    if axis.categorical:
        claim = f"{label}: {claim}" if label else claim
    else:
        claim = who + claim
    return claim + _grades(sub, use, _left_out(whole)) + (f" ({held})" if held else ""), True
