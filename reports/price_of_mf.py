r"""The price-of-mean-field records of a posterior: KL and Wasserstein of its Gaussian fits.

What the ``price_of_mean_field`` study records of a sampled cell (Farquhar, Smith & Gal
2020): :func:`diag_vs_full` from the draws, :func:`diag_vs_full_moments` from streamed
moments (thousands of chains), each one record of plain numbers: ``kl_diag_full`` (and per
block), the closed-form ``w2_diag_full``, the empirical Wasserstein error and its excess,
and how the fit was made. The math is in :mod:`reports.gaussian` and
:mod:`reports.wasserstein`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from reports.gaussian import (
    Block,
    CovMethod,
    GaussianFit,
    as_draws,
    closest_diagonal,
    fit_gaussian,
    gaussian_from_moments,
    kl_diag_full,
)
from reports.wasserstein import w2_gaussian, wasserstein_error_of_fit

__all__ = ["diag_vs_full", "diag_vs_full_moments"]


def diag_vs_full(
    draws: np.ndarray,
    blocks: Mapping[str, Block] | None = None,
    *,
    cov: CovMethod = "empirical",
    jitter: float = 1e-6,
    seed: int,
    w_max_draws: int = 2000,
) -> dict[str, Any]:
    r"""All diagonal-versus-full Gaussian measures of a posterior, as one flat record.

    Parameters
    ----------
    draws : np.ndarray
        Posterior draws, shape ``(S, D)``.
    blocks : mapping of str to index array or slice, optional
        Parameter groups for per-block KLs (e.g. :attr:`reports.draws.FlatDraws.blocks`).
    cov, jitter
        Passed to :func:`fit_gaussian`.
    seed : int
        Seed for :func:`reports.wasserstein.wasserstein_error`.
    w_max_draws : int, default 2000
        The Wasserstein error uses at most this many draws, evenly spaced over all of them
        (the exact assignment costs :math:`O(S^3)`; timings in docs/notes/reports.md); the
        Gaussian fit and the KL use every draw.

    Returns
    -------
    dict
        Plain floats, ints and strings: ``kl_diag_full`` (total) and
        ``kl_diag_full.<block>`` per block; ``w2_diag_full``, the closed-form
        :func:`w2_gaussian` between :math:`q_\mathrm{diag}` and :math:`q_\mathrm{full}`;
        ``w_diag``, ``w_full``, ``w_error``, ``w_diag_self``, ``w_full_self`` and
        ``w_excess`` from :func:`wasserstein_error` and ``w_draws``, the number of draws they
        used; and
        ``cov_method``, ``jitter``, ``shrinkage`` (None, not applicable, for empirical),
        ``n_draws``, ``dim``.
    """
    fit = fit_gaussian(draws, cov=cov, jitter=jitter)
    out, var = _kl_w2_record(fit, blocks)
    out.update(_w_record(np.asarray(draws, dtype=float), fit, var, seed, w_max_draws))
    out.update(_fit_record(fit))
    return out


def _kl_w2_record(fit: GaussianFit, blocks: Mapping[str, Block] | None) -> tuple[dict, np.ndarray]:
    """``kl_diag_full`` (and per block) and ``w2_diag_full`` of a fit; q_diag's variances."""
    var = closest_diagonal(fit.cov)
    kl = kl_diag_full(fit.cov, blocks)
    out: dict[str, Any] = {}
    if isinstance(kl, dict):
        out["kl_diag_full"] = kl["total"]
        out.update({f"kl_diag_full.{k}": v for k, v in kl.items() if k != "total"})
    else:
        out["kl_diag_full"] = kl
    out["w2_diag_full"] = w2_gaussian(fit.mean, np.diag(var), fit.mean, fit.cov)
    return out, var


def _w_record(
    x: np.ndarray, fit: GaussianFit, var: np.ndarray, seed: int, w_max_draws: int, suffix: str = ""
) -> dict[str, Any]:
    """The Wasserstein error of ``fit`` against at most ``w_max_draws`` of the draws ``x``."""
    if x.shape[0] > w_max_draws:
        x = x[np.linspace(0, x.shape[0] - 1, w_max_draws).round().astype(int)]
    we = wasserstein_error_of_fit(x, fit, var, seed)
    keys = ("w_diag", "w_full", "w_error", "w_diag_self", "w_full_self", "w_excess", "w_draws")
    values = (we.w_diag, we.w_full, we.error, we.w_diag_self, we.w_full_self, we.excess, we.n)
    return {k + suffix: v for k, v in zip(keys, values, strict=True)}


def _fit_record(fit: GaussianFit) -> dict[str, Any]:
    return {
        "cov_method": fit.cov_method,
        "jitter": fit.jitter,
        "shrinkage": fit.shrinkage,
        "n_draws": fit.n_draws,
        "dim": fit.dim,
    }


def diag_vs_full_moments(
    mean: np.ndarray,
    cov: np.ndarray,
    blocks: Mapping[str, Block] | None = None,
    *,
    n_draws: int,
    jitter: float = 1e-6,
    draws: np.ndarray | None = None,
    seed: int = 0,
    w_max_draws: int = 2000,
    suffix: str = "_kept",
) -> dict[str, Any]:
    r""":func:`diag_vs_full` of draws known by their moments, and of a kept subset of them.

    :math:`q_\mathrm{full}` is :func:`gaussian_from_moments` of ``mean`` and ``cov`` (the
    ``ddof=1`` covariance of ``n_draws`` draws) and :math:`q_\mathrm{diag}` its KL-closest
    diagonal Gaussian. The KLs and the closed-form W2 need nothing else and are computed by
    the same code as :func:`diag_vs_full`, under the same keys: given the moments of the
    draws that :func:`diag_vs_full` sees, the two agree to rounding (tests/reports). The
    empirical Wasserstein error needs draws: with ``draws`` (e.g. the thinned subset a
    streaming sampler keeps) it compares these two Gaussians with those draws, and its keys
    carry ``suffix`` to say so.

    Parameters
    ----------
    mean, cov, n_draws, jitter
        As :func:`gaussian_from_moments`.
    blocks : mapping of str to index array or slice, optional
        Parameter groups for per-block KLs.
    draws : np.ndarray, optional
        ``(S, D)`` draws for the Wasserstein error (at most ``w_max_draws`` of them, evenly
        spaced, are used); without them there are no ``w_*`` keys.
    seed : int, default 0
        Seed of the Gaussians' draws in the Wasserstein error.
    w_max_draws : int, default 2000
    suffix : str, default "_kept"
        Appended to every Wasserstein key (``w_error_kept``, ``w_draws_kept``, ...).

    Returns
    -------
    dict
        ``kl_diag_full``, ``kl_diag_full.<block>``, ``w2_diag_full``; with ``draws``
        ``w_diag``, ``w_full``, ``w_error``, ``w_diag_self``, ``w_full_self``, ``w_excess``
        and ``w_draws``, each with ``suffix``; ``cov_method`` (``"empirical"``), ``jitter``,
        ``shrinkage`` (None), ``n_draws`` and ``dim``.
    """
    fit = gaussian_from_moments(mean, cov, n_draws, jitter=jitter)
    out, var = _kl_w2_record(fit, blocks)
    if draws is not None:
        x = as_draws(draws)
        if x.shape[1] != fit.dim:
            raise ValueError(f"draws have {x.shape[1]} columns, the moments {fit.dim}")
        out.update(_w_record(x, fit, var, seed, w_max_draws, suffix))
    out.update(_fit_record(fit))
    return out
