"""Curves with standard-error bars against a sweep axis, for the studies' own figures.

:func:`panels_figure` draws panels of such curves side by side (the price of mean field's
Wasserstein figure: the closed-form W2 with its floor, and the empirical error);
:func:`predictive_tv_figure` the predictive study's total variation, one colour per
approximation, dashed out of distribution.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator

from reports.figures.kl_null import draw_curves, kl_null_figure

__all__ = ["Curves", "panels_figure", "predictive_tv_figure"]

#: Label -> (x positions, means, standard errors).
Curves = Mapping[str, tuple[Sequence[float], Sequence[float], Sequence[float]]]


def panels_figure(
    panels: Sequence[tuple[Curves, str, str]],
    *,
    xlabel: str,
    categories: Sequence[str] | None = None,
    suptitle: str = "",
) -> Figure:
    """Panels of curves side by side, each ``(curves, title, ylabel)``.

    A label containing ``"floor"`` is dashed; a grey line marks 0. With ``categories`` the
    x positions are their indices (a categorical axis), else integers.
    """
    fig = Figure(figsize=(5.2 * len(panels), 3.8), layout="constrained")
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    for ax, (curves, title, ylabel) in zip(axes, panels, strict=True):
        draw_curves(ax, curves, dashed="floor")
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_title(title, fontsize=9)
        ax.legend(fontsize="small")
        if categories is None:
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        else:
            ax.set_xticks(range(len(categories)), labels=categories)
    fig.suptitle(suptitle, fontsize=9)
    return fig


def predictive_tv_figure(curves: Curves, *, xlabel: str, title: str) -> Figure:
    """:func:`~reports.figures.kl_null.kl_null_figure` of predictive TV curves, restyled."""
    fig = kl_null_figure(curves, xlabel=xlabel, title=title)
    _style(fig.axes[0])
    return fig


def _style(ax: Any) -> None:
    """One colour per approximation and method, dashed out of distribution."""
    colours: dict[str, Any] = {}
    handles = []
    for c in ax.containers:
        label = c.get_label()
        key = label.replace(" OOD", "").replace(" test", "")
        colour = colours.setdefault(key, f"C{len(colours) % 10}")
        for part in (c.lines[0], *c.lines[2]):
            part.set_color(colour)
        style = "--" if " OOD" in label else "-"
        c.lines[0].set_linestyle(style)
        handles.append(Line2D([], [], color=colour, ls=style, marker="o", label=label))
    ax.legend(handles=handles, fontsize="small")
    ax.set_ylabel("mean total variation")
