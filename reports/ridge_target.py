r"""A known answer with rescaling orbits: bilinear pairs on a hyperbola ridge, plus a Gaussian block.

The weights of a ReLU unit can be rescaled (incoming times :math:`c > 0`, outgoing divided
by it) without changing the network, so its posterior lies along orbits, and mean field in
raw coordinates pays for the curvature of those ridges. The smallest model with that
pathology is the bilinear pair

.. math::

    a \sim \mathcal N(\mu_a, \sigma_a^2), \quad b \sim \mathcal N(\mu_b, \sigma_b^2), \quad
    y \mid a, b \sim \mathcal N(a b, s^2),

whose posterior concentrates along the hyperbola :math:`a b = y` (the likelihood is
constant on it; only the prior picks a scale), with two branches (:math:`a, b > 0` and
:math:`a, b < 0` for :math:`y > 0`) joined through the origin when :math:`y / s` is small
and separated by a barrier of about :math:`y^2 / 2 s^2` nats when it is large: a sign
symmetry as well as a rescaling orbit. :class:`RidgeTarget` takes ``K`` independent pairs
and an independent correlated Gaussian block :math:`z \sim \mathcal N(m, S)` (its
posterior is its prior). Its exact moments (:meth:`RidgeTarget.moments`) are the pairs'
by two-dimensional quadrature (:func:`bilinear_moments`, Simpson's rule on a grid over
the prior's :math:`\pm 8\sigma`) and the block's own, so the exact KL(q_diag || q_full) of
the Gaussian moment-matched to the posterior (:meth:`RidgeTarget.kl`) is known: a sampler's
draws must recover those moments and that KL within their Monte Carlo error.

NumPy and SciPy only; the Pyro model of the same target is
``zoo.models.targets.ridge_model``.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from scipy.integrate import simpson
from scipy.stats import norm

from reports.gaussian import kl_diag_full
from reports.kl_reference import ess

__all__ = ["RidgeTarget", "bilinear_moments", "moment_band", "moment_z"]


def bilinear_moments(
    y: float,
    noise_sd: float,
    prior_mean: tuple[float, float] = (0.0, 0.0),
    prior_sd: tuple[float, float] = (1.0, 1.0),
    *,
    grid: int = 801,
    width: float = 8.0,
) -> tuple[np.ndarray, np.ndarray]:
    r"""Posterior mean ``(2,)`` and covariance ``(2, 2)`` of ``(a, b)`` in the bilinear model.

    The unnormalised log density on a ``grid x grid`` lattice over
    :math:`\mu \pm \mathrm{width}\, \sigma` of each prior, normalised and integrated by
    Simpson's rule (:func:`scipy.integrate.simpson`) along each axis. The prior's
    :math:`\pm 8\sigma` hold all but :math:`10^{-15}` of it and the likelihood only
    narrows it, so the truncation is below rounding; 801 points resolve a ridge of
    width :math:`s / |b|` down to :math:`s \approx 0.05` (tested against a one-dimensional
    route through the conjugate conditional of ``a``).
    """
    (ma, mb), (sa, sb) = prior_mean, prior_sd
    a = np.linspace(ma - width * sa, ma + width * sa, grid)
    b = np.linspace(mb - width * sb, mb + width * sb, grid)
    aa, bb = np.meshgrid(a, b, indexing="ij")
    logp = (
        -0.5 * ((aa - ma) / sa) ** 2
        - 0.5 * ((bb - mb) / sb) ** 2
        - 0.5 * ((y - aa * bb) / noise_sd) ** 2
    )
    p = np.exp(logp - logp.max())

    def integral(f: np.ndarray) -> float:
        return float(simpson(simpson(f, x=b, axis=1), x=a))

    z = integral(p)
    mean = np.array([integral(aa * p), integral(bb * p)]) / z
    da, db = aa - mean[0], bb - mean[1]
    caa, cab, cbb = (integral(u * p) / z for u in (da * da, da * db, db * db))
    return mean, np.array([[caa, cab], [cab, cbb]])


class RidgeTarget(NamedTuple):
    """``K`` independent bilinear pairs ``(a_k, b_k)`` with data ``y_k``, and a Gaussian block.

    The flat order of the parameters (of :meth:`moments` and of the draws compared with
    them) is ``a_1..a_K, b_1..b_K, z_1..z_G``.

    Attributes
    ----------
    y : np.ndarray
        ``(K,)`` observations, one per pair.
    noise_sd : float
        :math:`s`.
    prior_mean, prior_sd : tuple of float
        :math:`(\\mu_a, \\mu_b)`, :math:`(\\sigma_a, \\sigma_b)`, shared by the pairs.
    block_mean : np.ndarray
        ``(G,)``.
    block_cov : np.ndarray
        ``(G, G)``, symmetric positive definite.
    """

    y: np.ndarray
    noise_sd: float
    prior_mean: tuple[float, float]
    prior_sd: tuple[float, float]
    block_mean: np.ndarray
    block_cov: np.ndarray

    @property
    def dim(self) -> int:
        """``2K + G``."""
        return 2 * len(self.y) + len(self.block_mean)

    def moments(self, *, grid: int = 801) -> tuple[np.ndarray, np.ndarray]:
        """The exact posterior mean ``(D,)`` and covariance ``(D, D)``: each pair's by
        :func:`bilinear_moments`, the block's its own; independent parts, so the covariance
        is block diagonal."""
        k = len(self.y)
        mean = np.zeros(self.dim)
        cov = np.zeros((self.dim, self.dim))
        for i, yi in enumerate(np.asarray(self.y, dtype=float)):
            m, c = bilinear_moments(yi, self.noise_sd, self.prior_mean, self.prior_sd, grid=grid)
            idx = np.array([i, k + i])
            mean[idx] = m
            cov[np.ix_(idx, idx)] = c
        mean[2 * k :] = self.block_mean
        cov[2 * k :, 2 * k :] = self.block_cov
        return mean, cov

    def kl(self, *, grid: int = 801) -> float:
        """Exact KL(q_diag || q_full) of the Gaussian moment-matched to the posterior
        (:func:`reports.gaussian.kl_diag_full` of the exact covariance)."""
        return float(kl_diag_full(self.moments(grid=grid)[1]))

    def prior_draws(self, n: int, *, seed: int = 0, scale: float = 1.0) -> np.ndarray:
        """``n`` draws ``(n, D)`` of the prior, every standard deviation times ``scale``
        (over-dispersed starts for chains: ``scale`` > 1). The block's prior is its
        posterior."""
        rng = np.random.default_rng(seed)
        k = len(self.y)
        (ma, mb), (sa, sb) = self.prior_mean, self.prior_sd
        a = ma + scale * sa * rng.standard_normal((n, k))
        b = mb + scale * sb * rng.standard_normal((n, k))
        chol = np.linalg.cholesky(np.asarray(self.block_cov, dtype=float))
        z = self.block_mean + scale * rng.standard_normal((n, len(self.block_mean))) @ chol.T
        return np.concatenate([a, b, z], axis=1)


def moment_z(x: np.ndarray, mean: np.ndarray, cov: np.ndarray) -> np.ndarray:
    """z-scores of every mean and covariance entry of draws ``x`` ``(C, S, D)`` against the
    exact ``mean`` ``(D,)`` and ``cov`` ``(D, D)``: (estimate - exact) / s.e.

    The estimates are the pooled draws' means and the means of the centred products
    :math:`(x_i - m_i)(x_j - m_j)`, :math:`i \\le j`, centred at the exact mean (so each is
    a plain average); each s.e. is the standard deviation over the draws divided by the
    square root of the multi-chain ESS (:func:`reports.kl_reference.ess`, arviz-stats) of
    the coordinate or of its centred product. Returns ``(D + D (D + 1) / 2,)``: the means
    first, then the upper triangle row by row.
    """
    x = np.asarray(x, dtype=float)
    d = x.shape[-1]
    dev = x - mean
    iu = np.triu_indices(d)
    prods = dev[..., iu[0]] * dev[..., iu[1]]
    est = np.concatenate([x.mean((0, 1)), prods.mean((0, 1))])
    exact = np.concatenate([mean, np.asarray(cov)[iu]])
    both = np.concatenate([x, prods], axis=-1)
    se = both.std(axis=(0, 1)) / np.sqrt(ess(both))
    return (est - exact) / se


def moment_band(count: int, level: float = 0.95) -> float:
    """The largest |z| of :func:`moment_z` that a family of ``count`` z-scores may reach at
    family-wise ``level``: the Bonferroni bound, the normal quantile at
    ``1 - (1 - level) / (2 count)`` (3.19 for the 35 moments of 7 parameters)."""
    return float(norm.ppf(1.0 - (1.0 - level) / (2.0 * count)))
