r"""The sampling bias of a plug-in KL(q_diag || q_full) at its own effective n, and its removal.

:func:`reports.gaussian.kl_diag_full` of the sample covariance of :math:`n` independent
Gaussian draws in :math:`D` dimensions is biased upward by exactly (Wishart)

.. math::

    b(n, D) = \tfrac12 \Bigl(\sum_{k=1}^{D} \psi\bigl(\tfrac{n-k}{2}\bigr)
              - D\,\psi\bigl(\tfrac{n-D}{2}\bigr)\Bigr)
            \approx \frac{D(D-1)}{4n} + \frac{D^3}{6 n^2},

whatever the covariance (:func:`reports.gaussian.kl_sampling_bias`). Draws of a Markov chain
are worth fewer (or, antithetic, more) independent draws, and *which* effective n matters is
set by what the KL is a function of: the sample covariance. Write
:math:`\hat\Sigma = \Sigma^{1/2}(I + E)\Sigma^{1/2}` (:math:`E` the whitened noise,
:math:`\mathbb E E = 0`) and :math:`v_i = \Sigma^{-1/2} e_i / \|\Sigma^{-1/2} e_i\|`. The KL
is :math:`\tfrac12(\sum_i \log (\hat\Sigma^{-1})_{ii} + \log\det\hat\Sigma)`; to second
order in :math:`E` its bias is

.. math::

    \beta = \tfrac12\, \mathbb E\, Q(E), \qquad
    Q(E) = \sum_i \Bigl(\|E v_i\|^2 - \tfrac12 (v_i^\top E v_i)^2\Bigr)
           - \tfrac12 \operatorname{tr} E^2,

which is :math:`D(D-1)/4n` for i.i.d. draws. For a chain, :math:`\mathbb E\,Q(E)` is
measured on the draws (:func:`kl_bias_n`): the chains split into ``G`` contiguous groups of
:math:`n_g` draws, each group's covariance :math:`\hat\Sigma_g` deviates from the pooled one
by :math:`E_g = \hat\Sigma^{-1/2}(\hat\Sigma_g - \hat\Sigma)\hat\Sigma^{-1/2}`, whose
covariance is :math:`N / n_g` times that of :math:`E`, so

.. math::

    \hat\beta = \frac{1}{2 (G-1) N} \sum_g n_g\, Q(E_g), \qquad
    n_\mathrm{KL} = \frac{D(D-1)}{4 \hat\beta},

the KL's own effective n: the one :math:`n` at which the exact :math:`b` is evaluated
(its higher-order terms then those of i.i.d. draws at that :math:`n`). It needs no model of
the autocorrelations, no independence between the covariance's entries and no Gaussian
fourth moments, and weighs each entry as the KL does; chains that have not mixed between
groups raise it (a conservative bias, and a sign to read). On NUTS draws of a known
Gaussian (D = 100, 6 seeds each) it gives the simulated bias within its Monte Carlo error on
a rotated target (0.88 against 0.90 +- 0.08 nats) and 4-7% short of it on a diagonal one
(0.66 against 0.69 +- 0.01 at 8 x 1000 draws, 1.52 against 1.63 +- 0.01 at 8 x 400): the
exact b carries the higher-order terms of i.i.d. draws at that n, and a chain's are larger
(docs/notes/kl_references.md).

Why not a per-coordinate ESS. The sample covariance's noise is that of the products
:math:`x_i x_j`, whose autocorrelation time for independent coordinates is
:math:`\tau_{ij} = \sum_{k \in \mathbb Z} \rho_i(k) \rho_j(k)`; the ESS of the mean uses
:math:`\sum_k \rho_i(k)`. For AR(1) coordinates :math:`\tau_{ij} = (1 + \rho_i\rho_j)/(1 -
\rho_i\rho_j)` against the mean's :math:`(1 + \rho)/(1 - \rho)`: at :math:`\rho = 0.8` the
mean's ESS is half the products' (the bias over-stated 2x), at :math:`\rho = -0.5`
(antithetic) five times (under-stated 5x). The centred squares
(:func:`squares_ess`, :math:`\tau_{ii} = \sum_k \rho_i(k)^2`) are the diagonal of the
products; pooled as the bias sums pairs (:func:`pooled_n`, AR(1)-matched) they are right for
AR(1) and ChEES chains, but over-state the bias of short NUTS chains by 20% on a diagonal
target (oscillating autocorrelations cancel in :math:`\sum_k \rho_i(k)\rho_j(k)`, not in
:math:`\sum_k \rho_i(k)^2`); and even the products' own ESS over-states it by 40% on a
rotated target, where the KL weighs the fast, small-variance directions most. They are
recorded beside :math:`n_\mathrm{KL}` as ``squares_n``.

Its Monte Carlo error (:func:`debiased_kl_draws`, :func:`debiased_kl_moments`): each
leave-one-group-out estimate :math:`\theta_{-g}` is the KL of the other groups' pooled
covariance less :math:`b` at :math:`n_\mathrm{KL}` scaled by the fraction of the draws it
keeps (not an n measured on its own G - 1 groups: that n's own noise, about 5% at G = 8,
would enter every leave-out and inflate the error), and

.. math::

    \mathrm{se} = \sqrt{\frac{G-1}{G} \sum_g (\theta_{-g} - \bar\theta_{-\cdot})^2}

(Efron & Stein 1981), added in quadrature to the error of the bias itself, the noise of
:math:`\hat\beta` over the groups (``bias_se``: 5-7% of the bias on iid draws at G = 8 and
4, D = 17; less for larger D). Where the true KL is near 0 the KL is a degenerate quadratic of the
sample correlations and the jackknife variance is about twice its variance (the se about
1.5 times the spread: conservative); with a true KL well above its noise the linear term
leads and the se is right (tested). NumPy only.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
from arviz_stats.base import array_stats
from scipy.stats import t as student_t

from reports.gaussian import iid_equivalent_draws, kl_diag_full, kl_sampling_bias
from reports.kl_calibration import MAX_CALIBRATION_SIZE, AR1Bias, ar1_calibrated_bias
from reports.kl_groups import group_moments, kl_bias_n, merge_groups

__all__ = [
    "AR1Bias",
    "DebiasedKL",
    "ar1_calibrated_bias",
    "debiased_kl_draws",
    "debiased_kl_moments",
    "ess",
    "jackknife_se",
    "kl_bias_n",
    "group_moments",
    "kl_debiased",
    "mean_ess",
    "merge_groups",
    "pooled_n",
    "squares_ess",
    "squares_ess_from_moments",
]


def ess(x: np.ndarray) -> np.ndarray:
    r"""Multi-chain effective sample size of every column of ``x`` ``(C, S, D)``.

    arviz-stats' ``ess(method="identity")``: the draws as they are (no rank normalization,
    no split), autocorrelations per chain combined with the between-chain variance
    (Vehtari et al. 2021; BDA3, section 11.5) and summed over Geyer's initial monotone
    sequence of pairs, capped at :math:`C S \log_{10}(C S)`. Returns shape ``(D,)``; NaN
    for a column with no variance (arviz-stats would give ``C S``).
    """
    x = np.asarray(x, dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.asarray(
            array_stats.ess(x, method="identity", chain_axis=0, draw_axis=1), dtype=float
        )
        return np.where(x.var(axis=(0, 1)) > 0, out, np.nan)


def mean_ess(chain_mean: np.ndarray, chain_var: np.ndarray, n: int) -> np.ndarray:
    r"""Between-chain ESS of each coordinate's mean from per-chain means and variances.

    :math:`C \hat\sigma^2 / s_m^2`, with :math:`s_m^2` the variance of the chain means and
    :math:`\hat\sigma^2` the pooled variance (as ``zoo.inference.mcmc.streaming.Moments.ess``,
    uncapped). ``(D,)``; NaN with one chain.
    """
    m = np.atleast_2d(np.asarray(chain_mean, dtype=float))
    v = np.atleast_2d(np.asarray(chain_var, dtype=float))
    c = m.shape[0]
    if c < 2:
        return np.full(m.shape[1], np.nan)
    var_means = m.var(0, ddof=1)
    pooled = ((n - 1) * c * v.mean(0) + n * (c - 1) * var_means) / (c * n - 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return c * pooled / var_means


def squares_ess(x: np.ndarray) -> np.ndarray:
    """ESS of the centred squares ``(x - grand mean)^2`` of every column of ``x`` ``(C, S, D)``.

    The effective n of the second moments (module docstring), by :func:`ess` (arviz-stats).
    Shape ``(D,)``.
    """
    x = np.asarray(x, dtype=float)
    if x.ndim != 3:
        raise ValueError(f"draws must have shape (chains, draws, D), got {x.shape}")
    with np.errstate(invalid="ignore", divide="ignore"):
        return ess((x - x.mean((0, 1))) ** 2)


def squares_ess_from_moments(chain_mean: np.ndarray, chain_var: np.ndarray, n: int) -> np.ndarray:
    r"""Between-chain ESS of the centred squares from per-chain means and variances only.

    For streamed chains (``zoo.inference.mcmc.streaming.Moments``: ``C`` chains of ``n``
    draws, ``chain_var`` with ``ddof=1``). The chain mean of the centred square of
    coordinate :math:`i` about the grand mean :math:`\bar x_i` is exactly

    .. math::

        q_{ci} = \frac1n \sum_t (x_{cti} - \bar x_i)^2
               = \frac{n-1}{n} v_{ci} + (m_{ci} - \bar x_i)^2,

    and, as for the mean (``Moments.ess``), the ``C`` chains are worth
    :math:`C \operatorname{Var}(y) / \operatorname{Var}_c(q_c)` draws of
    :math:`y = (x - \mu)^2`, :math:`\operatorname{Var}_c` the variance between chains
    (``ddof=1``). :math:`\operatorname{Var}(y)` is a fourth moment the stream does not keep;
    **assuming Gaussian marginals** it is :math:`2\sigma_i^4` (the Wishart bias assumes
    Gaussian draws anyway), with :math:`\sigma_i^2` the pooled variance of all :math:`C n`
    draws:

    .. math::

        n_i = \frac{2 C \sigma_i^4}{\operatorname{Var}_c(q_{ci})}.

    For i.i.d. draws :math:`\operatorname{Var}(q_c) = 2\sigma^4 / n` and :math:`n_i = C n`
    on average; :math:`\operatorname{Var}_c` from ``C`` chains has relative standard deviation
    :math:`\sqrt{2/(C-1)}`, so this needs many chains (agreement with :func:`squares_ess`:
    tests). Heavier tails than Gaussian (a positive excess kurtosis) make it too large.
    Capped, as :func:`ess`, at :math:`C n \log_{10}(C n)`.

    Returns
    -------
    np.ndarray
        ``(D,)``; NaN with one chain or for a coordinate that never moved.
    """
    m = np.atleast_2d(np.asarray(chain_mean, dtype=float))
    v = np.atleast_2d(np.asarray(chain_var, dtype=float))
    c = m.shape[0]
    if c < 2:
        return np.full(m.shape[1], np.nan)
    grand = m.mean(0)
    dev = m - grand
    q = (n - 1) / n * v + dev * dev
    var_means = (dev * dev).sum(0) / (c - 1)
    pooled = ((n - 1) * c * v.mean(0) + n * (c - 1) * var_means) / (c * n - 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = 2.0 * c * pooled**2 / q.var(0, ddof=1)
    cap = c * n * math.log10(max(c * n, 10))
    return np.where(np.isfinite(out) & (pooled > 0), np.minimum(out, cap), np.nan)


def pooled_n(
    n_i: np.ndarray, total: float, mean_n: np.ndarray | None = None, *, chunk: int = 512
) -> float | None:
    r"""The one n of the Wishart bias of ``D`` coordinates with squares' ESS ``n_i``.

    .. math::

        \frac1n = \frac{1}{N} \binom{D}{2}^{-1} \sum_{i<j}
        \frac{1 + a_i a_j}{1 - a_i a_j}, \qquad
        |a_i| = \sqrt{\frac{\tau_i - 1}{\tau_i + 1}}, \quad \tau_i = \max(N / n_i, 1),

    the AR(1)-matched mean over pairs of :math:`1 / n_{ij}` (module docstring), ``N`` =
    ``total`` draws. ``mean_n``, the ESS of each coordinate's mean, gives the signs: a
    coordinate with ``mean_n > N`` (antithetic) gets :math:`a_i < 0`; without it all
    :math:`a_i \ge 0`. With equal ``n_i`` the result is that ``n``. Non-finite or
    non-positive entries (coordinates that never moved) are left out. None when no entry is
    left; with one entry, that entry.
    """
    v = np.asarray(n_i, dtype=float).ravel()
    ok = np.isfinite(v) & (v > 0)
    if not ok.any():
        return None
    if ok.sum() == 1:
        return float(v[ok][0])
    tau = np.maximum(total / v[ok], 1.0)
    a = np.sqrt((tau - 1.0) / (tau + 1.0))
    if mean_n is not None:
        m = np.asarray(mean_n, dtype=float).ravel()[ok]
        a = np.where(np.isfinite(m) & (m > total), -a, a)
    d = a.size
    both = 0.0  # sum over all ordered pairs, i == j included
    for k in range(0, d, chunk):
        prod = a[k : k + chunk, None] * a[None, :]
        both += float(((1.0 + prod) / (1.0 - prod)).sum())
    pairs = 0.5 * (both - float(((1.0 + a * a) / (1.0 - a * a)).sum()))
    return float(total * d * (d - 1) / 2.0 / pairs)


def kl_debiased(kl: float, n: float | None, d: int) -> float | None:
    """``kl - kl_sampling_bias(n, d)``: the plug-in KL less its exact Wishart bias at ``n``.

    None where the closed form does not apply: no or a non-finite ``n``, or ``n <= d``.
    """
    if n is None or not np.isfinite(n) or not n > d:
        return None
    return float(kl - kl_sampling_bias(n, d))


def jackknife_se(leave_out: Sequence[float | None]) -> float | None:
    """Jackknife standard error ``sqrt((G-1)/G sum (t_g - mean)^2)`` of G leave-outs.

    None with fewer than two, or when any is None or not finite.
    """
    if len(leave_out) < 2 or any(v is None or not np.isfinite(v) for v in leave_out):
        return None
    t = np.asarray(leave_out, dtype=float)
    g = t.size
    return float(math.sqrt((g - 1) / g * ((t - t.mean()) ** 2).sum()))


class DebiasedKL(NamedTuple):
    r"""A plug-in KL, its bias at its own effective n and the debiased value with its error.

    Attributes
    ----------
    kl : float
        KL(q_diag || q_full) of the pooled sample covariance (plus jitter).
    n : float or None
        :math:`n_\mathrm{KL}` (:func:`kl_bias_n`).
    bias : float or None
        ``kl_sampling_bias(n, D)``; None where ``n <= D``.
    debiased : float or None
        ``kl - bias`` (:func:`kl_debiased`).
    se : float or None
        The jackknife standard error over the chain groups (:func:`jackknife_se`; conservative
        near a KL of 0, module docstring) and ``bias_se`` in quadrature; None where
        ``debiased`` is.
    bias_se : float or None
        The standard error of ``bias`` from the noise of :math:`n_\mathrm{KL}` (the bias is
        proportional to :math:`\hat\beta`: ``bias`` times its relative error).
    groups : int
        Number of chain groups ``G``.
    squares_n : float or None
        :func:`pooled_n` of the centred squares' ESS: the per-coordinate reference, for
        comparison.
    blocks : dict of str to float or None
        Per block (e.g. layer): its own KL (as ``kl_diag_full`` with blocks) less the bias at
        its own :math:`n_\mathrm{KL}`; no error.
    rho : float or None
        The lag-one correlation of the AR(1) chains whose groups give the same
        :math:`\hat\beta` as these draws (:func:`ar1_calibrated_bias`); ``bias`` is then
        those chains' simulated bias and ``n`` the i.i.d. n with that bias. None where the
        calibration did not run (uncorrelated draws, one group, or too large a simulation).
    """

    kl: float
    n: float | None
    bias: float | None
    debiased: float | None
    se: float | None
    bias_se: float | None
    groups: int
    squares_n: float | None
    blocks: dict[str, float | None]
    rho: float | None = None

    def half_width(self, level: float = 0.95) -> float | None:
        """Half-width of the ``level`` interval of ``debiased``: Student's t with ``G - 1``
        degrees of freedom times ``se`` (the jackknife over ``G`` groups has ``G - 1``;
        the normal quantile's 2 s.e. covers about 91% at ``G = 8``, not 95%)."""
        if self.se is None or self.groups < 2:
            return None
        return float(student_t.ppf(0.5 + level / 2.0, self.groups - 1) * self.se)


def _kl_of(cov: np.ndarray, jitter: float, blocks: Mapping[str, Any] | None = None) -> Any:
    c = 0.5 * (cov + cov.T)
    c[np.diag_indices_from(c)] += jitter
    return kl_diag_full(c, blocks)


def _debias(
    counts: np.ndarray,
    means: np.ndarray,
    m2s: np.ndarray,
    squares_n: float | None,
    jitter: float,
    blocks: Mapping[str, Any] | None,
    chains_draws: tuple[int, int] | None = None,
    seed: int = 0,
) -> DebiasedKL:
    """The KL of all groups debiased, per block, and the jackknife over the groups (each
    leave-out debiased at n scaled by the fraction of the draws it keeps).

    With ``chains_draws`` (chains, draws per chain) the total's bias is calibrated on AR(1)
    chains of that shape (:func:`ar1_calibrated_bias`) when the simulation is at most
    :data:`MAX_CALIBRATION_SIZE` numbers; ``n`` is then the i.i.d. n of that bias, and its
    Monte Carlo error joins ``bias_se``."""
    g, d = means.shape
    kls = _kl_of(merge_groups(counts, means, m2s), jitter, dict(blocks or {}) or None)
    kl = float(kls if isinstance(kls, float) else kls["total"])
    n, rel = kl_bias_n(counts, means, m2s, jitter=jitter)
    cal = None
    if n is not None and chains_draws is not None and g >= 2 and d >= 2:
        shape = (*chains_draws, d)
        if math.prod(shape) <= MAX_CALIBRATION_SIZE:
            pooled = merge_groups(counts, means, m2s)
            pooled[np.diag_indices(d)] += jitter
            cal = ar1_calibrated_bias(n, shape, g, cov=pooled, seed=seed)
    if cal is not None:
        n = iid_equivalent_draws(cal.bias, d)
    deb = kl_debiased(kl, n, d)
    per_block: dict[str, float | None] = {}
    for name, idx in (blocks or {}).items():
        ix = np.arange(d)[idx]
        n_b, _ = kl_bias_n(counts, means[:, ix], m2s[:, ix][:, :, ix], jitter=jitter)
        per_block[name] = kl_debiased(kls[name], n_b, ix.size)
    leave_out: list[float | None] = []
    for k in range(g if deb is not None else 0):
        keep = np.arange(g) != k
        kl_k = float(_kl_of(merge_groups(counts[keep], means[keep], m2s[keep]), jitter))
        leave_out.append(kl_debiased(kl_k, n * counts[keep].sum() / counts.sum(), d))
    bias = None if deb is None else kl - deb
    jk = jackknife_se(leave_out)
    bias_se = None if bias is None or rel is None else bias * rel
    if bias_se is not None and cal is not None:
        bias_se = math.hypot(bias_se, cal.se)
    se = None if jk is None or bias_se is None else math.hypot(jk, bias_se)
    rho = None if cal is None else cal.rho
    return DebiasedKL(kl, n, bias, deb, se, bias_se, g, squares_n, per_block, rho)


def debiased_kl_draws(
    draws: np.ndarray,
    *,
    groups: int | None = None,
    jitter: float = 1e-6,
    blocks: Mapping[str, Any] | None = None,
    calibrate: bool = False,
    seed: int = 0,
) -> DebiasedKL:
    """:class:`DebiasedKL` of draws ``(C, S, D)``.

    ``calibrate``: calibrate the total's bias on AR(1) chains of the same shape
    (:func:`ar1_calibrated_bias`, seeded by ``seed``; seconds of simulation, so off by
    default); False gives :func:`kl_bias_n`'s second-order n as it is.

    The chains split into ``groups`` contiguous groups (default ``min(8, C)``, as
    :func:`numpy.array_split` splits them); one chain gives no groups, no n and no error.
    The KL is of the ``ddof=1`` sample covariance plus ``jitter`` (as
    :func:`reports.gaussian.fit_gaussian` makes it). ``blocks``: index arrays or slices of
    the columns, each debiased on its own.
    """
    x = np.asarray(draws, dtype=float)
    if x.ndim != 3:
        raise ValueError(f"draws must have shape (chains, draws, D), got {x.shape}")
    c, s, _ = x.shape
    counts, means, m2s = group_moments(x, groups)
    with np.errstate(invalid="ignore", divide="ignore"):
        sq = pooled_n(squares_ess(x), c * s, ess(x))
    return _debias(counts, means, m2s, sq, jitter, blocks, (c, s) if calibrate else None, seed)


def debiased_kl_moments(
    chain_mean: np.ndarray,
    chain_var: np.ndarray,
    n: int,
    group_mean: np.ndarray,
    group_cov: np.ndarray,
    group_sizes: Sequence[int],
    *,
    jitter: float = 1e-6,
    blocks: Mapping[str, Any] | None = None,
    calibrate: bool = False,
    seed: int = 0,
) -> DebiasedKL:
    """:class:`DebiasedKL` from streamed moments (``zoo.inference.mcmc.streaming.Moments``).

    ``calibrate`` and ``seed`` as in :func:`debiased_kl_draws` (chains of ``n`` draws).

    ``chain_mean``, ``chain_var`` ``(C, D)`` of ``n`` draws per chain; ``group_mean``
    ``(G, D)``, ``group_cov`` ``(G, D, D)`` (``ddof=1``) of ``G`` contiguous groups of
    ``group_sizes`` chains: the stream's groups are the chain groups. The pooled covariance
    is merged from them (Chan, Golub & LeVeque 1979); ``squares_n`` is :func:`pooled_n` of
    :func:`squares_ess_from_moments` (Gaussian marginals) with signs from :func:`mean_ess`.
    """
    sizes = np.asarray(group_sizes, dtype=int)
    gm = np.asarray(group_mean, dtype=float)
    cm = np.atleast_2d(np.asarray(chain_mean, dtype=float))
    cv = np.atleast_2d(np.asarray(chain_var, dtype=float))
    if sizes.size != gm.shape[0] or sizes.sum() != cm.shape[0]:
        raise ValueError(f"group sizes {tuple(sizes)} do not split {cm.shape[0]} chains")
    counts = sizes.astype(float) * n
    m2s = np.asarray(group_cov, dtype=float) * (counts - 1)[:, None, None]
    total = cm.shape[0] * n
    sq = pooled_n(squares_ess_from_moments(cm, cv, n), total, mean_ess(cm, cv, n))
    shape = (cm.shape[0], n) if calibrate else None
    return _debias(counts, gm, m2s, sq, jitter, blocks, shape, seed)
