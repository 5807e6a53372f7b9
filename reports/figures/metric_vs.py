"""A summarized metric against a sweep axis: :func:`plot_metric_vs` and its caption.

One line with markers per ``hue`` value (and per value of any other group key that still
varies), a shaded band of one standard error, the single repeats as crosses when there are
few, and optionally a companion metric in a second panel (a study declares which metric is
never plotted alone).
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from reports.figures import figure_png
from reports.grade import usable_for
from reports.labels import (
    METRIC_LABELS,
    Labels,
    axis_label,
    axis_word,
    metric_label,
    metric_support,
    plural,
    repeat_word,
)
from reports.sweep import XAxis, error_phrase, line_groups, matching, x_axis

__all__ = ["MAX_REPEAT_POINTS", "figure_name", "metric_figure", "plot_metric_vs"]

#: Repeats (seeds) up to which every single repeat is drawn as a point.
MAX_REPEAT_POINTS = 5


def _sanitize(name: str) -> str:
    """File-name-safe version of a column name (``model.depth`` -> ``model_depth``)."""
    return re.sub(r"[^A-Za-z0-9_-]+", "_", str(name)).strip("_") or "x"


def figure_name(metric: str, x: str) -> str:
    """File name of the figure of ``metric`` against ``x``: ``<metric>_vs_<x>.png``.

    Parameters
    ----------
    metric : str
        Metric name.
    x : str
        x-axis column, e.g. ``model.depth``; characters other than letters, digits, ``_``
        and ``-`` become ``_``.

    Returns
    -------
    str
        For example ``accuracy_vs_model_depth.png``.
    """
    return f"{_sanitize(metric)}_vs_{_sanitize(x)}.png"


def _draw_panel(
    ax: Axes,
    summary: pd.DataFrame,
    x: str,
    metric: str,
    hue: str | None,
    *,
    results: pd.DataFrame | None,
    over: str | None,
    weights: bool = False,
) -> str:
    """Draw one metric against ``x`` on ``ax``; return what the error bars are.

    With ``weights`` (a weight-space metric), a mean whose sampled cells' worst reference
    grade is below what such a number needs (:func:`reports.grade.usable_for`) is drawn as a
    hollow marker, and the returned text says so."""
    mean_col, sem_col = f"{metric}_mean", f"{metric}_ci95"
    ax.grid(True, alpha=0.35)
    ax.set_xlabel(axis_label(x))
    data = summary if summary.empty else summary[np.isfinite(summary[mean_col].astype(float))]
    if data.empty:
        ax.text(0.5, 0.5, "no successful cells", ha="center", va="center", transform=ax.transAxes)
        ax.set_xticks([])
        return "no successful cells"
    axis = x_axis(data[x])
    line_keys, groups = line_groups(data, summary, x, hue)
    errors = error_phrase(data, metric, over)
    repeats = int(data["n"].max()) if "n" in data.columns else 1
    points = (
        results is not None
        and over is not None
        and over in results.columns
        and metric in results.columns
        and 1 < repeats <= MAX_REPEAT_POINTS
    )
    ok = None
    if points:
        ok = results[results["status"] == "ok"] if "status" in results.columns else results
    hollow = clipped = False
    support = metric_support(metric)
    dodge = axis.categorical and hue is not None and hue != x and len(groups) > 1
    width = 0.5 / max(1, len(groups))
    for gi, (label, key, sub) in enumerate(groups):
        sub = sub.assign(_x=axis.positions(sub[x])).sort_values("_x")
        shift = (gi - (len(groups) - 1) / 2) * width if dodge else 0.0
        px = sub["_x"].to_numpy(dtype=float) + shift
        mean = sub[mean_col].to_numpy(dtype=float)
        sem = sub[sem_col].to_numpy(dtype=float) if sem_col in sub.columns else np.zeros_like(mean)
        sem = np.where(np.isfinite(sem), sem, 0.0)
        lo, hi = np.clip(mean - sem, *support), np.clip(mean + sem, *support)
        clipped = clipped or bool(np.any((lo > mean - sem) | (hi < mean + sem)))
        if axis.categorical:
            yerr = np.stack([mean - lo, hi - mean])
            bars = ax.errorbar(px, mean, yerr=yerr, fmt="o", capsize=4, label=label)
            color = bars.lines[0].get_color()
        else:
            (line,) = ax.plot(px, mean, marker="o", label=label)
            color = line.get_color()
            if np.any(sem > 0):
                ax.fill_between(px, lo, hi, color=color, alpha=0.2, linewidth=0)
        if weights and "grade" in sub.columns:
            low = np.array(
                [isinstance(g, str) and not usable_for(g, "weights") for g in sub["grade"]]
            )
            if low.any():
                hollow = True
                ax.scatter(px[low], mean[low], s=70, facecolors="white", edgecolors=color, zorder=4)
        if ok is not None:
            _draw_repeats(ax, matching(ok, line_keys, key), x, metric, axis, shift, color)
    errors += _marks_note(support if clipped else None, over if points else None, hollow)
    if axis.integral:
        ax.set_xticks(axis.ticks, labels=axis.labels)
    if axis.categorical:
        ax.set_xlim(-0.6, len(axis.ticks) - 0.4)
    if any(label is not None for label, _, _ in groups):
        ax.legend(title=hue if hue is not None and line_keys == [hue] else None, fontsize="small")
    return errors


def _draw_repeats(
    ax: Axes, rows: pd.DataFrame, x: str, metric: str, axis: XAxis, shift: float, color: str
) -> None:
    """The single repeats behind a line's means, as crosses."""
    y = pd.to_numeric(rows[metric], errors="coerce").to_numpy(dtype=float)
    rx = axis.positions(rows[x]) + shift
    keep = np.isfinite(y) & np.isfinite(rx)
    if keep.any():
        ax.scatter(
            rx[keep], y[keep], s=14, color=color, alpha=0.55, marker="x", linewidths=1.0, zorder=3
        )


def _marks_note(clipped_to: tuple | None, crosses_over: str | None, hollow: bool) -> str:
    """What the panel's marks beyond the bars are: bars cut at the metric's range, crosses
    of single repeats, hollow markers of low grades."""
    note = ""
    if clipped_to is not None:
        low, high = clipped_to
        cut = f"at {low:g}" if np.isinf(high) else f"to its range [{low:g}, {high:g}]"
        note += f"; bars cut {cut}, where the metric ends"
    if crosses_over is not None:
        note += f"; crosses: single {plural(repeat_word(crosses_over), 2)}"
    if hollow:
        note += "; hollow: reference grade below silver, not enough for this weight-space number"
    return note


def _wrap(text: str, width: int = 58) -> str:
    words, lines, cur = text.split(), [], ""
    for w in words:
        if cur and len(cur) + 1 + len(w) > width:
            lines.append(cur)
            cur = w
        else:
            cur = f"{cur} {w}".strip()
    return "\n".join([*lines, cur])


def metric_figure(
    summary: pd.DataFrame,
    x: str,
    metric: str,
    hue: str | None,
    *,
    title: str | None = None,
    ylabel: str | None = None,
    results: pd.DataFrame | None = None,
    over: str | None = "seed",
    companion: str | None = None,
    labels: Labels = METRIC_LABELS,
    weight_space: frozenset[str] = frozenset(),
) -> tuple[bytes, str]:
    """PNG bytes of ``metric`` (and its companion panel) against ``x``, and its caption
    (parameters as :func:`plot_metric_vs`; ``weight_space``: the metrics that need the
    weights' gates, drawn hollow where the grade behind a mean is too low for them)."""
    metrics = [metric] + ([companion] if companion else [])
    if len(summary.columns):
        missing = [c for c in (x, *(f"{m}_mean" for m in metrics)) if c not in summary.columns]
        if hue is not None and hue not in summary.columns:
            missing.append(hue)
        if missing:
            raise KeyError(
                f"cannot plot {metric!r} vs {x!r}: column(s) {missing} not in the summary; "
                f"available: {list(summary.columns)}"
            )
    fig = Figure(figsize=(6.4 * len(metrics), 4.4), layout="constrained")
    axes = fig.subplots(1, len(metrics), squeeze=False)[0]
    captions = []
    for i, (ax, m) in enumerate(zip(axes, metrics, strict=True)):
        errors = _draw_panel(
            ax, summary, x, m, hue, results=results, over=over, weights=m in weight_space
        )
        name = metric_label(m, labels, unit=False)
        head = title if (i == 0 and title is not None) else f"{name} vs {axis_word(x)}"
        ax.set_title(_wrap(f"{head} ({errors})"), fontsize=10)
        ax.set_ylabel(
            ylabel if (i == 0 and ylabel is not None) else _wrap(metric_label(m, labels), 40)
        )
        if m == "w_error" or (i == 0 and companion):
            ax.axhline(0.0, color="0.5", lw=0.8)
        captions.append(f"{metric_label(m, labels)} against {axis_label(x)}: {errors}")
    caption = "; right: ".join(captions) if companion else captions[0]
    if companion:
        caption = "Left: " + caption
    return figure_png(fig), caption


def plot_metric_vs(
    summary: pd.DataFrame,
    x: str,
    metric: str,
    hue: str | None,
    *,
    title: str | None = None,
    ylabel: str | None = None,
    results: pd.DataFrame | None = None,
    over: str | None = "seed",
    companion: str | None = None,
    labels: Labels = METRIC_LABELS,
) -> bytes:
    r"""Plot a summarized metric against a sweep axis; return the PNG bytes.

    One line with markers per ``hue`` value (and per value of any other group key that
    still varies), with a shaded band :math:`\bar x \pm t_{0.975,n-1}\,\mathrm{sem}` (the
    95% t-interval). A numeric ``x`` with integer values gets one tick per value; a
    non-numeric ``x`` (``method``, an activation, a data path) is drawn as evenly spaced
    categories with error bars and no connecting lines. The title says what the bars are
    (``mean ± 95% t-interval over 3 seeds``).

    Parameters
    ----------
    summary : pd.DataFrame
        Output of :func:`reports.tables.summarize`: group keys, ``<metric>_mean``,
        ``<metric>_ci95`` and ``<metric>_n`` (optional) and ``n``.
    x : str
        Column on the x axis, e.g. ``model.depth`` or ``method``.
    metric : str
        Metric name; the columns ``<metric>_mean`` and ``<metric>_ci95`` are plotted.
    hue : str or None
        Column that separates the lines, e.g. ``method``; None for a single line.
    title, ylabel : str, optional
        Axes title (default: the metric's label against the axis, :func:`metric_label`)
        and y label (default: the label with its unit).
    results : pd.DataFrame, optional
        The per-cell rows: with at most :data:`MAX_REPEAT_POINTS` repeats per point, each
        repeat is drawn as a cross.
    over : str or None, default "seed"
        The repeat axis of the summary (named in the title).
    companion : str, optional
        A second metric drawn in a panel to the right (a study's ``companions``).
    labels : mapping, default METRIC_LABELS
        The label table of titles and axes (:func:`reports.labels.metric_label`).

    Returns
    -------
    bytes
        The PNG file.

    Raises
    ------
    KeyError
        If ``x``, ``hue`` or ``<metric>_mean`` is not a column of a non-empty summary.

    Notes
    -----
    An empty summary gives a figure that says there were no successful cells.
    """
    png, _ = metric_figure(
        summary,
        x,
        metric,
        hue,
        title=title,
        ylabel=ylabel,
        results=results,
        over=over,
        companion=companion,
        labels=labels,
    )
    return png
