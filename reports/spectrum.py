r"""Low-rank structure of posterior standard deviations (Swiatkowski et al. 2020), NumPy only.

A weight site of shape ``(d_1, ..., d_r)`` is viewed as the matrix ``(d_1, d_2 \cdots d_r)``
(all dims but the first flattened: one output unit or conv filter per row, the transpose
of the paper's TensorFlow view, with the same singular values). For a matrix :math:`A`
with singular values :math:`\gamma_1 \ge \gamma_2 \ge \dots`:

- fraction of variance explained by singular value :math:`k` (Figure 3):
  :math:`\gamma_k^2 / \sum_i \gamma_i^2` (uncentred, as in the paper);
- rank-:math:`k` truncation (Table 2, Appendix D.3): :math:`\max(0, \sum_{i \le k}
  \gamma_i u_i v_i^\top)`, clamped at zero because a standard deviation cannot be
  negative;
- gradient signal-to-noise ratio (Figure 6): :math:`\mathbb{E}[g]^2 / \operatorname{Var}[g]`
  per parameter over a window of batches (the last 10 in the paper), with the population
  variance (``ddof=0``);
- standard-deviation parameter counts (Table 1): :math:`mn` for mean field,
  :math:`k(m + n)` for the k-tied Normal.

Nothing here imports torch or pyro; the figure functions return matplotlib Figures and
:mod:`reports.render` renders them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from matplotlib.figure import Figure

__all__ = [
    "as_matrix",
    "elbo_curve_figure",
    "gradient_snr",
    "snr_noise_floor",
    "heatmap_figure",
    "singular_values",
    "snr_summary",
    "spectrum_figure",
    "std_param_count",
    "top_fraction",
    "truncate",
    "variance_fractions",
]


def as_matrix(a: np.ndarray) -> np.ndarray:
    """The ``(d_1, d_2 * ... * d_r)`` matrix view of an array with at least two dims."""
    a = np.asarray(a)
    if a.ndim < 2:
        raise ValueError(f"a matrix view needs at least 2 dims, got shape {a.shape}")
    return a.reshape(a.shape[0], -1)


def singular_values(a: np.ndarray) -> np.ndarray:
    """Singular values of the matrix view of ``a``, largest first (float64)."""
    return np.linalg.svd(as_matrix(a).astype(np.float64), compute_uv=False)


def variance_fractions(a: np.ndarray) -> np.ndarray:
    r"""Fraction of variance explained per singular value, :math:`\gamma_k^2/\sum\gamma^2`.

    Returns an array of length ``min(m, n)`` that sums to 1 (all zeros for a zero matrix).
    """
    g2 = singular_values(a) ** 2
    total = g2.sum()
    return g2 / total if total > 0 else g2


def top_fraction(a: np.ndarray, k: int) -> float:
    """Fraction of variance in the top ``k`` singular values."""
    return float(variance_fractions(a)[:k].sum())


def truncate(a: np.ndarray, k: int, clamp: bool = True) -> np.ndarray:
    """Rank-``k`` SVD approximation of the matrix view of ``a``, in ``a``'s shape.

    Parameters
    ----------
    a : ndarray
        E.g. a matrix of posterior standard deviations.
    k : int
        Rank (>= 1); ranks >= min(m, n) reproduce ``a`` (up to rounding and the clamp).
    clamp : bool, default True
        Clamp negative entries at 0 (Appendix D.3: standard deviations are non-negative).
    """
    if k < 1:
        raise ValueError(f"rank k must be >= 1, got {k}")
    a = np.asarray(a)
    u, s, vt = np.linalg.svd(as_matrix(a).astype(np.float64), full_matrices=False)
    approx = (u[:, :k] * s[:k]) @ vt[:k]
    if clamp:
        approx = np.maximum(approx, 0.0)
    return approx.reshape(a.shape).astype(a.dtype, copy=False)


def gradient_snr(grads: np.ndarray) -> np.ndarray:
    r"""Per-parameter :math:`\mathbb{E}[g]^2 / \operatorname{Var}[g]` over axis 0 (the window).

    ``grads`` has shape ``(window, ...)``. A parameter with zero variance gets ``inf``
    (``nan`` if its gradient is identically zero).
    """
    g = np.asarray(grads, dtype=np.float64)
    if g.shape[0] < 2:
        raise ValueError(f"the SNR needs a window of at least 2 gradients, got {g.shape[0]}")
    mean, var = g.mean(0), g.var(0)
    with np.errstate(divide="ignore", invalid="ignore"):
        return mean**2 / var


def snr_noise_floor(window: int) -> float:
    r"""Expected :func:`gradient_snr` of pure noise: :math:`1 / (w - 3)` for a window of ``w``.

    With i.i.d. Gaussian gradients of mean 0 over the window, :math:`t^2 = (w - 1)\,
    \bar g^2 / \hat\sigma^2_{\text{ddof}=0}` follows :math:`F(1, w - 1)`, whose mean is
    :math:`(w - 1) / (w - 3)`; so the SNR of a parameter at a stationary point averages
    :math:`1 / (w - 3)` (1/7 for the 10-batch window), not :math:`1 / (w - 1)`. Finite for
    :math:`w > 3`.
    """
    if window <= 3:
        raise ValueError(f"the noise floor is finite for a window of more than 3, got {window}")
    return 1.0 / (window - 3)


def snr_summary(snr: np.ndarray) -> dict[str, float]:
    """Mean (the paper's summary) and median of the finite per-parameter SNRs."""
    s = np.asarray(snr, dtype=np.float64).ravel()
    s = s[np.isfinite(s)]
    if s.size == 0:
        return {"mean": float("nan"), "median": float("nan")}
    return {"mean": float(s.mean()), "median": float(np.median(s))}


def std_param_count(shape: Sequence[int], rank: int | None = None) -> int:
    """Standard-deviation parameters of a weight site: ``m n`` (mean field) or ``k (m + n)``."""
    m, n = int(shape[0]), int(np.prod(shape[1:]))
    return m * n if rank is None else rank * (m + n)


# --------------------------------------------------------------------------- figures


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
            ax.bar(np.arange(1, len(f) + 1) + (j - (len(labels) - 1) / 2) * width, f, width,
                   label=label)  # fmt: skip
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
        im = ax.imshow(m, aspect="auto", cmap="viridis", vmin=vmin, vmax=vmax,
                       interpolation="nearest")  # fmt: skip
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
