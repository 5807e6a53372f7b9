"""The KL of a sampled posterior against its shift null and reference curves, by sweep axis."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

__all__ = ["draw_curves", "kl_null_figure"]


def draw_curves(
    ax: Any,
    curves: Mapping[str, tuple[Sequence[float], Sequence[float], Sequence[float]]],
    *,
    dashed: str,
) -> None:
    """Draw each ``{label: (x, mean, se)}`` as points with standard-error bars on ``ax``,
    dashed where the label contains ``dashed`` (a null or a floor), and a grey line at 0."""
    for label, (x, mean, se) in curves.items():
        ax.errorbar(
            np.asarray(x, float),
            np.asarray(mean, float),
            yerr=np.asarray(se, float),
            fmt="--" if dashed in label else "-",
            marker="o",
            capsize=3,
            label=label,
        )
    ax.axhline(0.0, color="0.6", lw=0.8)


def kl_null_figure(
    curves: Mapping[str, tuple[Sequence[float], Sequence[float], Sequence[float]]],
    *,
    xlabel: str = "depth",
    title: str | None = None,
) -> Figure:
    """The KL, its shift null and the excess against ``x``, mean with standard-error bars.

    Parameters
    ----------
    curves : mapping of str to (x, mean, se)
        One line per label, e.g. ``{"KL": ..., "shift null": ..., "excess": ...}``, or the
        same per activation. Labels containing ``"null"`` are dashed.
    xlabel, title : str

    Returns
    -------
    matplotlib.figure.Figure
        Not saved: :mod:`reports.document` renders figures to PNG bytes.
    """
    if not curves:
        raise ValueError("curves must hold at least one {label: (x, mean, se)}")
    fig = Figure(figsize=(5.2, 3.6), layout="constrained")
    ax = fig.subplots()
    draw_curves(ax, curves, dashed="null")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel(xlabel)
    ax.set_ylabel("KL(q_diag || q_full), nats")
    ax.legend(fontsize="small")
    if title is not None:
        ax.set_title(title)
    return fig
