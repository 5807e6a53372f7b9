"""Figures of the k-tied study: spectra of posterior mean and std matrices (Swiatkowski et al.
2020, Figure 3), heat maps of a std matrix and its low-rank approximations (Figure 4), -ELBO
against steps (Figures 6 and 7). The numbers are :mod:`reports.spectrum`'s."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from matplotlib.figure import Figure

from reports.spectrum import as_matrix, truncate

__all__ = [
    "elbo_curve_figure",
    "heatmap_figure",
    "spectrum_figure",
]


def spectrum_figure(
    fractions: Mapping[str, Mapping[str, np.ndarray]], top: int = 10, title: str = ""
) -> Figure:
    """Bar charts of variance fractions, one panel per layer (Figure 3).

    ``fractions[layer] = {"mean": array, "std": array}`` (any labels); the first ``top``
    singular values are drawn.
    """
    layers = list(fractions)
    fig = Figure(figsize=(3.2 * max(1, len(layers)), 2.8), layout="constrained")
    axes = fig.subplots(1, max(1, len(layers)), squeeze=False)[0]
    for ax, layer in zip(axes, layers, strict=False):
        labels = list(fractions[layer])
        width = 0.8 / max(1, len(labels))
        for j, label in enumerate(labels):
            f = np.asarray(fractions[layer][label])[:top]
            ax.bar(
                np.arange(1, len(f) + 1) + (j - (len(labels) - 1) / 2) * width,
                f,
                width,
                label=label,
            )
        ax.set_title(layer, fontsize=9)
        ax.set_xlabel("singular value k")
        ax.set_ylim(0, 1)
    axes[0].set_ylabel("fraction of variance")
    axes[0].legend(fontsize=8)
    if title:
        fig.suptitle(title, fontsize=10)
    return fig


def heatmap_figure(a: np.ndarray, ranks: Sequence[int] = (1, 2), title: str = "") -> Figure:
    """Heat maps of the matrix view of ``a`` and its clamped rank-k approximations (Figure 4)."""
    a = as_matrix(a)
    mats = [("no approximation", a)] + [(f"rank {k}", truncate(a, k)) for k in ranks]
    vmin, vmax = float(a.min()), float(a.max())
    fig = Figure(figsize=(3.4 * len(mats), 3.2), layout="constrained")
    axes = fig.subplots(1, len(mats), squeeze=False)[0]
    im = None
    for ax, (label, m) in zip(axes, mats, strict=True):
        im = ax.imshow(
            m, aspect="auto", cmap="viridis", vmin=vmin, vmax=vmax, interpolation="nearest"
        )
        ax.set_title(label, fontsize=9)
        ax.set_xlabel("input (column)")
    axes[0].set_ylabel("output unit (row)")
    fig.colorbar(im, ax=list(axes), shrink=0.8, label="posterior std")
    if title:
        fig.suptitle(title, fontsize=10)
    return fig


def elbo_curve_figure(
    curves: Mapping[str, tuple[Sequence[int], Sequence[float]]],
    ylabel: str = "-ELBO per example",
    title: str = "",
    log_y: bool = False,
) -> Figure:
    """One line per method of a quantity at chosen training steps (Figures 6 and 7)."""
    fig = Figure(figsize=(5, 3.2), layout="constrained")
    ax = fig.subplots()
    for label, (steps, values) in curves.items():
        ax.plot(steps, values, marker="o", label=label)
    ax.set_xlabel("training step")
    ax.set_ylabel(ylabel)
    if log_y:
        ax.set_yscale("log")
    ax.legend(fontsize=8)
    if title:
        ax.set_title(title, fontsize=10)
    return fig
