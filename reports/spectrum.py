r"""Low-rank structure of posterior standard deviations (Swiatkowski et al. 2020), NumPy only.

A weight site of shape ``(d_1, ..., d_r)`` is viewed as the matrix ``(d_1, d_2 \cdots d_r)``
(all dims but the first flattened: one output unit or conv filter per row, the transpose
of the paper's TensorFlow view, with the same singular values). For a matrix :math:`A`
with singular values :math:`\gamma_1 \ge \gamma_2 \ge \dots`:

- fraction of variance explained by singular value :math:`k` (Figure 3):
  :math:`\gamma_k^2 / \sum_i \gamma_i^2` (uncentred, as in the paper);
- its null (:func:`top_fraction_null`): the same fraction of the matrix centred on its
  grand mean, beside that of shuffled copies (the same entries in a random order, so the
  same mean and total variance, the row and column structure destroyed);
- the sign-flip null (:func:`sign_flip_null`): :math:`\log A_{ij} \approx \mu + a_i
  + b_j`, the additive fit that a dead input (a large column) or a dead output (a large
  row) gives, is exactly the rank-1 k-tied family (:math:`A = u v^\top`); structure of
  rank 2 or more is what the residual keeps beyond it, tested against copies of the
  residual with random signs (every entry's magnitude kept, so noise whose size varies by
  row or column is not taken for structure);
- rank-:math:`k` truncation (Table 2, Appendix D.3): :math:`\max(0, \sum_{i \le k}
  \gamma_i u_i v_i^\top)`, clamped at zero because a standard deviation cannot be
  negative;
- gradient signal-to-noise ratio (Figure 6): :math:`\mathbb{E}[g]^2 / \operatorname{Var}[g]`
  per parameter over a window of batches (the last 10 in the paper), with the population
  variance (``ddof=0``). The paper's footnote 3 defines it as
  :math:`\mathbb{E}[g^2] / \operatorname{Var}[g]`, which is this one plus 1
  (:math:`\mathbb{E}[g^2] = \mathbb{E}[g]^2 + \operatorname{Var}[g]`): add 1 to ours
  before comparing with the paper's numbers;
- standard-deviation parameter counts (Table 1): :math:`mn` for mean field,
  :math:`k(m + n)` for the k-tied Normal.

Nothing here imports torch or pyro; the figures are :mod:`reports.figures.spectrum`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

__all__ = [
    "SignFlipNull",
    "TopFractionNull",
    "as_matrix",
    "centred",
    "gradient_snr",
    "snr_noise_floor",
    "singular_values",
    "snr_summary",
    "std_param_count",
    "top_fraction",
    "shuffle_entries",
    "top_fraction_null",
    "double_centred",
    "sign_flip_null",
    "weighted_additive_fit",
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


def centred(a: np.ndarray) -> np.ndarray:
    """The matrix view of ``a`` minus its grand mean (float64).

    A matrix of standard deviations has positive entries around a common level, and that
    level alone is a rank-1 component: the uncentred top-1 fraction of any such matrix is
    close to 1 (entries uniform on [0.5, 1.5] in a 400 x 784 matrix give 0.92), structure or
    not. Subtracting the grand mean removes the level and nothing else; it commutes with
    shuffling the entries (:func:`shuffle_entries`), so a shuffled copy of the centred
    matrix is the centred shuffled copy.
    """
    m = as_matrix(a).astype(np.float64)
    return m - m.mean()


def shuffle_entries(a: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """The entries of ``a`` in a uniformly random order, in ``a``'s shape and dtype.

    The multiset of entries (hence the mean, the total variance and every marginal
    statistic) is kept; which row and column an entry sits in is not: the row and column
    structure that a low rank needs is destroyed.
    """
    a = np.asarray(a)
    return rng.permutation(a.ravel()).reshape(a.shape)


class TopFractionNull(NamedTuple):
    """Top-k variance fractions of a matrix beside those of shuffled copies of it.

    Attributes
    ----------
    ks : tuple of int
        The k of each entry of the arrays below.
    observed : np.ndarray
        Fraction of variance in the top k singular values of the (centred) matrix.
    null_mean, null_sd, null_max : np.ndarray
        Mean, standard deviation (``ddof=1``) and largest value of the same fraction over
        ``shuffles`` shuffled copies (:func:`shuffle_entries`).
    shuffles : int
        Number of shuffled copies.
    seed : int
        Seed of the :func:`numpy.random.default_rng` generator of the shuffles.
    centre : bool
        Whether the fractions are of the matrix centred on its grand mean (:func:`centred`).
    """

    ks: tuple[int, ...]
    observed: np.ndarray
    null_mean: np.ndarray
    null_sd: np.ndarray
    null_max: np.ndarray
    shuffles: int
    seed: int
    centre: bool

    @property
    def z(self) -> np.ndarray:
        """Standard deviations of the null by which the observed fraction exceeds its mean.

        Shuffled copies of a structureless (exchangeable) matrix are draws from the same
        distribution as the matrix, so its ``z`` is of order 1 and exceeds 3 rarely; exceeding
        ``null_max`` alone happens with probability ``1 / (shuffles + 1)``.
        """
        with np.errstate(divide="ignore", invalid="ignore"):
            return (self.observed - self.null_mean) / self.null_sd


def top_fraction_null(
    a: np.ndarray,
    ks: Sequence[int] = (1, 2),
    *,
    shuffles: int = 10,
    seed: int = 0,
    centre: bool = True,
) -> TopFractionNull:
    r"""The top-k variance fraction of a matrix and its shuffled null.

    The fraction :math:`\sum_{i \le k} \gamma_i^2 / \sum_i \gamma_i^2` of the matrix view of
    ``a`` (centred on its grand mean by default, :func:`centred`) is set beside the same
    fraction of ``shuffles`` copies whose entries are randomly permuted: a matrix of the
    same numbers without row or column structure. A spectrum is evidence of low-rank
    structure only where the observed fraction is well above the shuffled ones; the null's
    level is that of a random matrix of the same size (about
    :math:`(\sqrt m + \sqrt n)^2 / mn` for the top 1 of i.i.d. entries).

    Parameters
    ----------
    a : np.ndarray
        E.g. a layer's matrix of posterior standard deviations (at least 2 dims).
    ks : sequence of int, default (1, 2)
        The k of the top-k fractions.
    shuffles : int, default 10
        Shuffled copies (at least 2, for a spread).
    seed : int, default 0
        Seed of the shuffles: the same seed gives the same null.
    centre : bool, default True
        Centre on the grand mean first (False: the paper's uncentred fractions).

    Returns
    -------
    TopFractionNull
    """
    ks = tuple(int(k) for k in ks)
    if not ks or min(ks) < 1:
        raise ValueError(f"ks must be positive ranks, got {ks}")
    if shuffles < 2:
        raise ValueError(f"shuffles must be at least 2 to give a spread, got {shuffles}")
    m = centred(a) if centre else as_matrix(a).astype(np.float64)

    def tops(mat: np.ndarray) -> np.ndarray:
        f = variance_fractions(mat)
        return np.array([f[:k].sum() for k in ks])

    rng = np.random.default_rng(seed)
    null = np.stack([tops(shuffle_entries(m, rng)) for _ in range(shuffles)])
    return TopFractionNull(
        ks, tops(m), null.mean(0), null.std(0, ddof=1), null.max(0), shuffles, seed, centre
    )


def double_centred(m: np.ndarray) -> np.ndarray:
    """``m`` less its row means and column means, plus its grand mean: the residual of the
    least-squares additive fit ``mu + a_i + b_j`` (two-way analysis of variance)."""
    m = np.asarray(m, dtype=np.float64)
    return m - m.mean(1, keepdims=True) - m.mean(0, keepdims=True) + m.mean()


def weighted_additive_fit(
    y: np.ndarray, rounds: int = 3, sweeps: int = 30
) -> tuple[np.ndarray, np.ndarray]:
    r"""The fit :math:`y_{ij} \approx \mu + a_i + b_j` under noise of size :math:`s_i t_j`.

    Least squares (:func:`double_centred`) lets a few noisy rows set every column's effect,
    and the residual of every other row then shares their noise: a rank-1 pattern that is
    not in the data. Here each of ``rounds`` rounds estimates the noise's size as
    :math:`s_i t_j` (alternating root-mean-square fits to the squared residual) and refits the
    row and column effects by weighted least squares with weights :math:`1 / (s_i t_j)^2`
    (``sweeps`` alternating updates, a block coordinate descent that converges for these
    rank-1 weights).

    Returns
    -------
    residual, scale : np.ndarray
        :math:`y - \hat\mu - \hat a_i - \hat b_j` and :math:`s_i t_j`, both of ``y``'s shape.
    """
    y = np.asarray(y, dtype=np.float64)
    r = double_centred(y)
    s, t = np.ones((y.shape[0], 1)), np.ones((1, y.shape[1]))
    for _ in range(rounds):
        v2 = r**2 + 1e-12 * float((r**2).mean()) + 1e-40  # no zero size, so finite weights
        for _ in range(10):
            s = np.sqrt((v2 / t**2).mean(1, keepdims=True))
            t = np.sqrt((v2 / s**2).mean(0, keepdims=True))
        w = 1.0 / (s**2 * t**2)
        a, b = np.zeros_like(s), np.zeros_like(t)
        for _ in range(sweeps):
            a = ((y - b) * w).sum(1, keepdims=True) / w.sum(1, keepdims=True)
            b = ((y - a) * w).sum(0, keepdims=True) / w.sum(0, keepdims=True)
        r = y - a - b
    return r, s * t


class SignFlipNull(NamedTuple):
    """How far a positive matrix's log is additive, and what its residual keeps beyond that.

    Attributes
    ----------
    additive_share : float
        Share of the variance of ``log A`` that ``mu + a_i + b_j`` explains (least squares;
        rows and columns: the rank-1 k-tied family, ``A = u v^T``).
    ks : tuple of int
        The k of each entry of the arrays below.
    observed : np.ndarray
        Top-k variance fractions of the standardized residual (:func:`sign_flip_null`).
    null_mean, null_sd, null_max : np.ndarray
        Mean, standard deviation (``ddof=1``) and largest value of the same fractions over
        ``flips`` copies of the residual with random signs.
    flips : int
        Number of sign-flipped copies.
    seed : int
        Seed of the :func:`numpy.random.default_rng` generator of the signs.
    """

    additive_share: float
    ks: tuple[int, ...]
    observed: np.ndarray
    null_mean: np.ndarray
    null_sd: np.ndarray
    null_max: np.ndarray
    flips: int
    seed: int

    @property
    def z(self) -> np.ndarray:
        """Standard deviations of the null by which the observed fraction exceeds its mean."""
        with np.errstate(divide="ignore", invalid="ignore"):
            return (self.observed - self.null_mean) / self.null_sd


def sign_flip_null(
    a: np.ndarray, ks: Sequence[int] = (1, 2), *, flips: int = 20, seed: int = 0
) -> SignFlipNull:
    r"""Structure beyond rank 1 in a matrix of standard deviations, against a sign-flip null.

    Shuffling a whole std matrix (:func:`top_fraction_null`) destroys every structure, so a
    matrix whose large entries sit in a few rows or columns (dead units) beats it, though
    such a matrix is rank 1 in the k-tied sense: :math:`\log \sigma_{ij} = \mu + a_i + b_j`
    is :math:`\sigma = u v^\top` with :math:`u_i = e^{\mu/2 + a_i}`,
    :math:`v_j = e^{\mu/2 + b_j}`. That fit is removed from :math:`\log \sigma` by
    :func:`weighted_additive_fit`, and the statistic is the top-k fraction of variance of the
    residual divided by its fitted noise size :math:`s_i t_j`.

    The null is symmetric noise whose size may vary by row and by column: under it the
    residual's entries are as likely to have either sign, so ``flips`` copies of the residual
    with independent random signs (each entry's magnitude kept), refitted and standardized
    the same way, are draws of the statistic without structure. Shuffles of the residual
    are not: they move a noisy row's large entries into quiet rows and columns, so noise
    whose size varies by row or column beats them (with 2 rows of 10 times the noise, a
    10 x 400 matrix's residual top-1 is about 0.54 against 0.15 for shuffles, z about 50).
    Structure of rank 2 or more keeps its signs aligned across rows and columns, which
    random signs destroy.

    Parameters
    ----------
    a : np.ndarray
        Positive entries, at least 2 dims (the matrix view, :func:`as_matrix`).
    ks : sequence of int, default (1, 2)
        The k of the top-k fractions.
    flips : int, default 20
        Sign-flipped copies (at least 2, for a spread).
    seed : int, default 0
        Seed of the signs: the same seed gives the same null.

    Returns
    -------
    SignFlipNull
    """
    mat = as_matrix(a).astype(np.float64)
    if not (np.isfinite(mat).all() and (mat > 0).all()):
        raise ValueError("sign_flip_null needs positive, finite entries (standard deviations)")
    ks = tuple(int(k) for k in ks)
    if not ks or min(ks) < 1:
        raise ValueError(f"ks must be positive ranks, got {ks}")
    if flips < 2:
        raise ValueError(f"flips must be at least 2 to give a spread, got {flips}")
    log = np.log(mat)
    total = float(((log - log.mean()) ** 2).sum())
    share = 1.0 - float((double_centred(log) ** 2).sum()) / total if total > 0 else float("nan")

    def tops(y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        r, scale = weighted_additive_fit(y)
        f = variance_fractions(r / scale)
        return np.array([f[:k].sum() for k in ks]), r

    observed, resid = tops(log)
    rng = np.random.default_rng(seed)
    null = np.stack(
        [tops(rng.choice((-1.0, 1.0), size=resid.shape) * resid)[0] for _ in range(flips)]
    )
    return SignFlipNull(
        share, ks, observed, null.mean(0), null.std(0, ddof=1), null.max(0), flips, seed
    )


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
