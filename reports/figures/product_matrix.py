"""The covariance of the product matrix of mean-field layers, one panel per depth
(Farquhar et al. 2020, Figure 1). The numbers are :mod:`reports.product_matrix`'s."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from matplotlib.figure import Figure

__all__ = [
    "product_covariance_figure",
]


def product_covariance_figure(
    covs: Mapping[str, np.ndarray],
    *,
    share_scale: bool = False,
    cmap: str = "RdBu_r",
    panel_size: float = 3.2,
    title: str | None = None,
    ncols: int | None = None,
) -> Figure:
    """Heat maps of covariance matrices side by side, like the paper's Figure 1.

    Each panel's colour scale is symmetric around 0 (red positive, blue negative). With
    ``share_scale`` all panels use the largest absolute entry and one colour bar; otherwise
    every panel has its own scale and colour bar. Panels fill rows of ``ncols`` (default: one
    row), e.g. ``ncols=2`` for Monte Carlo and exact side by side. The Figure is returned,
    not saved.
    """
    if not covs:
        raise ValueError("covs must hold at least one {label: covariance matrix}")
    mats = {}
    for label, cov in covs.items():
        cov = np.asarray(cov, dtype=float)
        if cov.ndim != 2 or cov.shape[0] != cov.shape[1]:
            raise ValueError(f"covs[{label!r}] must be a square matrix, got shape {cov.shape}")
        mats[str(label)] = cov

    def vmax_of(c: np.ndarray) -> float:
        return float(np.max(np.abs(c), initial=0.0)) or 1.0

    shared = max(vmax_of(c) for c in mats.values())
    ncols = min(ncols or len(mats), len(mats))
    nrows = -(-len(mats) // ncols)
    fig = Figure(
        figsize=(panel_size * ncols + 0.8, (panel_size + 0.4) * nrows), layout="constrained"
    )
    grid = fig.subplots(nrows, ncols, squeeze=False).ravel()
    for ax in grid[len(mats) :]:
        ax.set_axis_off()
    axes = grid[: len(mats)]
    for ax, (label, cov) in zip(axes, mats.items(), strict=True):
        vmax = shared if share_scale else vmax_of(cov)
        im = ax.imshow(cov, cmap=cmap, vmin=-vmax, vmax=vmax, interpolation="nearest")
        ax.set_title(label, fontsize="small")
        ax.set_xticks([])
        ax.set_yticks([])
        if not share_scale:
            fig.colorbar(im, ax=ax, shrink=0.8)
    if share_scale:
        fig.colorbar(im, ax=list(axes), shrink=0.8)
    if title is not None:
        fig.suptitle(title)
    return fig
