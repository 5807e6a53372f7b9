r"""The sampling bias of a plug-in KL(q_diag || q_full) at the right effective n, and its removal.

:func:`reports.gaussian.kl_diag_full` of the sample covariance of :math:`n` independent
Gaussian draws in :math:`D` dimensions is biased upward by exactly (Wishart)

.. math::

    b(n, D) = \tfrac12 \Bigl(\sum_{k=1}^{D} \psi\bigl(\tfrac{n-k}{2}\bigr)
              - D\,\psi\bigl(\tfrac{n-D}{2}\bigr)\Bigr)
            \approx \frac{D(D-1)}{4n} + \frac{D^3}{6 n^2},

whatever the covariance (:func:`reports.gaussian.kl_sampling_bias`). Draws of a Markov chain
are worth fewer (or, antithetic, more) independent draws, and *which* effective n matters is
set by what the KL is a function of: the sample covariances. To leading order

.. math::

    \mathrm{KL}(\hat\Sigma) - \mathrm{KL}(\Sigma) \approx \tfrac12 \sum_{i<j} \hat r_{ij}^2,
    \qquad \mathbb E\,\hat r_{ij}^2 \approx \frac{1}{n_{ij}},

with :math:`\hat r_{ij}` the sample (partial) correlation noise of the pair and :math:`n_{ij}`
the effective n of the products :math:`x_i x_j`: :math:`N / \tau_{ij}`, with :math:`\tau_{ij}
= \sum_{k \in \mathbb Z} \rho_i(k) \rho_j(k)` for independent coordinates with lag
autocorrelations :math:`\rho_i(k)`. It is *not* the ESS of the mean (:math:`\tau_i = \sum_k
\rho_i(k)`): for AR(1) coordinates :math:`\tau_{ij} = (1 + \rho_i\rho_j)/(1 - \rho_i\rho_j)`
against the mean's :math:`(1 + \rho)/(1 - \rho)`, so at :math:`\rho = 0.8` the mean's ESS is
half the products' (the bias is over-stated 2x) and at :math:`\rho = -0.5` (antithetic) it is
five times the products' (under-stated 5x). The diagonal case is the centred squares:
:math:`\tau_{ii} = \sum_k \rho_i(k)^2` is the autocorrelation time of :math:`(x_i -
\mu_i)^2` for a Gaussian chain, which :func:`squares_ess` estimates per coordinate
(:func:`squares_ess_from_moments` from streamed per-chain moments).

The pooled n. The bias is a sum over pairs, so the one :math:`n` at which :math:`b` is
evaluated is the one whose leading term equals it,

.. math::

    \frac{D(D-1)}{4 n} = \frac12 \sum_{i<j} \frac{1}{n_{ij}}
    \iff \frac1n = \binom{D}{2}^{-1} \sum_{i<j} \frac{1}{n_{ij}}:

a mean over pairs of :math:`1/n_{ij}`, not a median or a mean of per-coordinate ESS (a few
slow coordinates weigh in every pair they belong to). The higher-order terms of :math:`b` are
then those of i.i.d. draws at that :math:`n`. Two measurements of :math:`n_{ij}`:

- **draws** (:func:`debiased_kl_draws`): directly, the ESS of the centred products of the
  pairs (:func:`products_ess`, all pairs or a random subset), pooled by
  :func:`pooled_n_pairs`. It needs no model of the autocorrelations and sees what the squares
  cannot: on NUTS draws of a diagonal target (D = 100) the products give the plug-in KL's
  bias within its noise where the squares over-state it by 20% (oscillating
  autocorrelations cancel in :math:`\sum_k \rho_i(k)\rho_j(k)`, not in
  :math:`\sum_k \rho_i(k)^2`; docs/notes/kl_references.md).
- **streamed moments** (:func:`debiased_kl_moments`): a stream keeps per-chain means and
  variances, not per-chain products, so :math:`n_{ij}` is modelled from the squares
  (:func:`squares_ess_from_moments`, :func:`pooled_n`). By Cauchy-Schwarz
  :math:`\tau_{ij} \le \sqrt{\tau_{ii}\tau_{jj}}`, with equality for equal autocorrelation
  functions, so a geometric mean over-states the bias when coordinates mix at different rates
  (20% for half the coordinates at :math:`\rho = 0.5` and half at 0.9: tested);
  :func:`pooled_n` instead matches each coordinate to the AR(1) chain with the same squares'
  ESS, :math:`|a_i| = \sqrt{(\tau_{ii} - 1)/(\tau_{ii} + 1)}` (:math:`\tau_{ii} = N / n_i`,
  clipped at 1: a Gaussian chain has :math:`\tau_{ii} \ge 1`), takes the sign of :math:`a_i`
  from the mean's ESS (antithetic, :math:`\mathrm{ESS} > N`, is negative) and uses
  :math:`\tau_{ij} = (1 + a_i a_j) / (1 - a_i a_j)`: exact for AR(1) coordinates, right on
  ChEES draws (tested), the geometric mean for equal rates.

:func:`kl_debiased` = KL - b(n, D) is then unbiased to the extent the draws are Gaussian and
the pooled :math:`n` is right (tests/reports/test_kl_reference.py: iid, AR(1) with
:math:`\rho = 0.8, -0.5`, mixed rates, ChEES draws; the ground truth for NUTS).

Its Monte Carlo error (:func:`debiased_kl_draws`, :func:`debiased_kl_moments`): the chains
split into ``G`` contiguous groups; each leave-one-group-out estimate
:math:`\theta_{-g}` is the KL of the other groups' pooled covariance debiased at the whole
:math:`n` scaled by the fraction of the draws it keeps (not at an n measured on its own
chains: that gave the same error to 1% on iid and AR(1) draws, tested, at G times the cost
of the products' ESS), and the jackknife standard error is

.. math::

    \mathrm{se} = \sqrt{\frac{G-1}{G} \sum_g (\theta_{-g} - \bar\theta_{-\cdot})^2}

(Efron & Stein 1981). Where the true KL is near 0 the KL is a degenerate quadratic of the
sample correlations and the jackknife variance is about twice the variance (the se about
1.4-1.6 times the spread: conservative); with a true KL well above its noise the linear term
leads and the se is right (tested). NumPy only.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from reports.gaussian import kl_diag_full, kl_sampling_bias

__all__ = [
    "DebiasedKL",
    "debiased_kl_draws",
    "debiased_kl_moments",
    "ess",
    "jackknife_se",
    "kl_debiased",
    "mean_ess",
    "pooled_n",
    "pooled_n_pairs",
    "products_ess",
    "squares_ess",
    "squares_ess_from_moments",
]


def ess(x: np.ndarray) -> np.ndarray:
    """Multi-chain effective sample size of every column of ``x`` ``(C, S, D)``.

    Autocorrelations from FFTs per chain combined with the between-chain variance (Gelman
    et al., BDA3, section 11.5), summed over Geyer's initial monotone sequence of pairs.
    Returns shape ``(D,)``; NaN for a column with no variance.
    """
    x = np.asarray(x, dtype=float)
    c, s, _ = x.shape
    xc = x - x.mean(1, keepdims=True)
    n = 1 << (2 * s - 1).bit_length()
    f = np.fft.rfft(xc, n=n, axis=1)
    acov = np.fft.irfft(f * np.conj(f), n=n, axis=1)[:, :s] / s  # (C, S, D), biased
    w = (acov[:, 0] * s / (s - 1)).mean(0)
    var_plus = w * (s - 1) / s + (x.mean(1).var(0, ddof=1) if c > 1 else 0.0)
    var_plus = np.where(var_plus > 0, var_plus, np.nan)
    rho = 1.0 - (w - acov.mean(0)) / var_plus  # (S, D)
    m = (s - 1) // 2
    pairs = rho[0 : 2 * m : 2] + rho[1 : 2 * m + 1 : 2]  # (m, D)
    alive = np.cumprod(pairs > 0, axis=0).astype(bool)
    pairs = np.minimum.accumulate(np.where(alive, pairs, np.inf), axis=0)
    tau = -1.0 + 2.0 * np.where(alive, pairs, 0.0).sum(0)
    return c * s / np.maximum(tau, 1.0 / math.log10(max(c * s, 10)))


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

    The effective n of the second moments (module docstring), by :func:`ess` (BDA3). Shape
    ``(D,)``.
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


def products_ess(
    x: np.ndarray, *, max_pairs: int = 2000, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    r"""ESS of the centred products :math:`(x_i - \bar x_i)(x_j - \bar x_j)`, pairs :math:`i<j`.

    The effective n of each off-diagonal covariance entry, measured directly (:func:`ess`,
    BDA3) rather than modelled from the squares: it sees what the squares cannot, a shared
    trajectory length that moves all coordinates together (NUTS), oscillating
    autocorrelations that cancel in :math:`\sum_k \rho_i(k)\rho_j(k)` but not in
    :math:`\sum_k \rho_i(k)^2`. All pairs when there are at most ``max_pairs``, else that
    many drawn without replacement (generator seeded ``seed``): the pooled n is a mean over
    pairs, which a random subset estimates without bias.

    Returns
    -------
    (np.ndarray, np.ndarray)
        The pairs ``(P, 2)`` and their ESS ``(P,)``.
    """
    x = np.asarray(x, dtype=float)
    d = x.shape[-1]
    iu = np.stack(np.triu_indices(d, 1), 1)
    if len(iu) > max_pairs:
        iu = iu[np.sort(np.random.default_rng(seed).choice(len(iu), max_pairs, replace=False))]
    xc = x - x.mean((0, 1))
    out = np.empty(len(iu))
    with np.errstate(invalid="ignore", divide="ignore"):
        for k in range(0, len(iu), 256):
            p = iu[k : k + 256]
            out[k : k + 256] = ess(xc[..., p[:, 0]] * xc[..., p[:, 1]])
    return iu, out


def pooled_n_pairs(n_ij: np.ndarray) -> float | None:
    r"""``1 / mean(1 / n_ij)`` over the finite positive entries: the n whose leading bias
    :math:`D(D-1)/4n` is :math:`\frac12 \sum_{i<j} 1/n_{ij}` (module docstring). None when
    no entry is left."""
    v = np.asarray(n_ij, dtype=float).ravel()
    v = v[np.isfinite(v) & (v > 0)]
    return float(1.0 / np.mean(1.0 / v)) if v.size else None


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


def jackknife_se(leave_out: Sequence[float]) -> float | None:
    """Jackknife standard error ``sqrt((G-1)/G sum (t_g - mean)^2)`` of G leave-outs."""
    t = np.asarray([v for v in leave_out if v is not None], dtype=float)
    if t.size < 2 or t.size != len(leave_out) or not np.all(np.isfinite(t)):
        return None
    g = t.size
    return float(math.sqrt((g - 1) / g * ((t - t.mean()) ** 2).sum()))


class DebiasedKL(NamedTuple):
    """A plug-in KL, its bias at the squares' pooled ESS and the debiased value with its error.

    Attributes
    ----------
    kl : float
        KL(q_diag || q_full) of all the draws' sample covariance (plus jitter).
    n : float or None
        :func:`pooled_n` of the squares' ESS of all the draws.
    bias : float or None
        ``kl_sampling_bias(n, D)``; None where ``n <= D``.
    debiased : float or None
        ``kl - bias`` (:func:`kl_debiased`).
    se : float or None
        Jackknife standard error over chain groups (:func:`jackknife_se`); None with fewer
        than two groups or where a leave-out has ``n <= D``.
    groups : int
        Number of chain groups ``G``.
    blocks : dict of str to float or None
        Per block (e.g. layer): its own KL (as ``kl_diag_full`` with blocks) debiased at the
        pooled n of its own coordinates; no error.
    """

    kl: float
    n: float | None
    bias: float | None
    debiased: float | None
    se: float | None
    groups: int
    blocks: dict[str, float | None]


class _Coords(NamedTuple):
    """Per-coordinate squares' ESS and mean ESS of ``total`` draws (the moments path)."""

    squares: np.ndarray
    mean: np.ndarray
    total: float

    def n(self, idx: np.ndarray | slice = slice(None)) -> float | None:
        return pooled_n(self.squares[idx], self.total, self.mean[idx])


class _Products(NamedTuple):
    """Draws whose n is :func:`pooled_n_pairs` of :func:`products_ess` (the draws path)."""

    x: np.ndarray
    max_pairs: int

    def n(self, idx: np.ndarray | slice = slice(None)) -> float | None:
        y = self.x[..., idx]
        if y.shape[-1] < 2:
            return pooled_n(squares_ess(y), y.shape[0] * y.shape[1])
        return pooled_n_pairs(products_ess(y, max_pairs=self.max_pairs)[1])


def _coords_moments(cm: np.ndarray, cv: np.ndarray, n: int) -> _Coords:
    return _Coords(squares_ess_from_moments(cm, cv, n), mean_ess(cm, cv, n), float(cm.shape[0] * n))


def _kl_of(cov: np.ndarray, jitter: float, blocks: Mapping[str, Any] | None = None) -> Any:
    c = 0.5 * (cov + cov.T)
    c[np.diag_indices_from(c)] += jitter
    return kl_diag_full(c, blocks)


def _merge(counts: np.ndarray, means: np.ndarray, m2s: np.ndarray) -> np.ndarray:
    """Pooled ``ddof=1`` covariance of groups with counts, means and co-moments (Chan)."""
    total = float(counts.sum())
    mean = (counts[:, None] * means).sum(0) / total
    dev = means - mean
    return (m2s.sum(0) + (dev.T * counts) @ dev) / (total - 1)


def _debias(
    counts: np.ndarray,
    means: np.ndarray,
    m2s: np.ndarray,
    coords: _Coords | _Products,
    jitter: float,
    blocks: Mapping[str, Any] | None,
) -> DebiasedKL:
    """The KL of all groups debiased, per block, and the jackknife over the groups (each
    leave-out debiased at n scaled by the fraction of the draws it keeps)."""
    g, d = means.shape
    kls = _kl_of(_merge(counts, means, m2s), jitter, dict(blocks or {}) or None)
    kl = float(kls if isinstance(kls, float) else kls["total"])
    co = coords
    n = co.n()
    deb = kl_debiased(kl, n, d)
    per_block: dict[str, float | None] = {}
    for name, idx in (blocks or {}).items():
        index = np.arange(d)[idx]
        per_block[name] = kl_debiased(kls[name], co.n(index), index.size)
    leave_out: list[float | None] = []
    for k in range(g if deb is not None and g >= 2 else 0):
        keep = np.arange(g) != k
        kl_k = float(_kl_of(_merge(counts[keep], means[keep], m2s[keep]), jitter))
        leave_out.append(kl_debiased(kl_k, n * counts[keep].sum() / counts.sum(), d))
    return DebiasedKL(
        kl,
        n,
        None if deb is None else kl - deb,
        deb,
        jackknife_se(leave_out) if leave_out else None,
        g,
        per_block,
    )


def debiased_kl_draws(
    draws: np.ndarray,
    *,
    groups: int | None = None,
    jitter: float = 1e-6,
    blocks: Mapping[str, Any] | None = None,
    max_pairs: int = 2000,
) -> DebiasedKL:
    """:class:`DebiasedKL` of draws ``(C, S, D)``.

    The chains split into ``groups`` contiguous groups (default ``min(8, C)``, as
    :func:`numpy.array_split` splits them). The KL is of the ``ddof=1`` sample covariance
    plus ``jitter`` (as :func:`reports.gaussian.fit_gaussian` makes it); the n is
    :func:`pooled_n_pairs` of :func:`products_ess` (at most ``max_pairs`` pairs), and each
    leave-one-group-out estimate at n scaled by the draws it keeps (module docstring).
    ``blocks``: index arrays or slices of the columns, debiased each on its own.
    """
    x = np.asarray(draws, dtype=float)
    if x.ndim != 3:
        raise ValueError(f"draws must have shape (chains, draws, D), got {x.shape}")
    c, s, d = x.shape
    g = min(8, c) if groups is None else max(1, min(int(groups), c))
    parts = np.array_split(np.arange(c), g)
    counts = np.array([len(p) * s for p in parts], dtype=float)
    means = np.stack([x[p].reshape(-1, d).mean(0) for p in parts])
    m2s = np.stack([_comoment(x[p].reshape(-1, d) - means[i]) for i, p in enumerate(parts)])

    return _debias(counts, means, m2s, _Products(x, max_pairs), jitter, blocks)


def _comoment(y: np.ndarray) -> np.ndarray:
    return y.T @ y


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
) -> DebiasedKL:
    """:class:`DebiasedKL` from streamed moments (``zoo.inference.mcmc.streaming.Moments``).

    ``chain_mean``, ``chain_var`` ``(C, D)`` of ``n`` draws per chain; ``group_mean``
    ``(G, D)``, ``group_cov`` ``(G, D, D)`` (``ddof=1``) of ``G`` contiguous groups of
    ``group_sizes`` chains. The pooled covariance is merged from the groups (Chan, Golub &
    LeVeque 1979); the n is :func:`pooled_n` of :func:`squares_ess_from_moments` (Gaussian
    marginals) with signs from :func:`mean_ess`; each leave-one-group-out estimate at n
    scaled by the draws it keeps.
    """
    sizes = np.asarray(group_sizes, dtype=int)
    gm = np.asarray(group_mean, dtype=float)
    cm = np.atleast_2d(np.asarray(chain_mean, dtype=float))
    cv = np.atleast_2d(np.asarray(chain_var, dtype=float))
    if sizes.size != gm.shape[0] or sizes.sum() != cm.shape[0]:
        raise ValueError(f"group sizes {tuple(sizes)} do not split {cm.shape[0]} chains")
    counts = sizes.astype(float) * n
    m2s = np.asarray(group_cov, dtype=float) * (counts - 1)[:, None, None]
    return _debias(counts, gm, m2s, _coords_moments(cm, cv, n), jitter, blocks)
