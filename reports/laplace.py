r"""Mean field against a full Gaussian given by its precision matrix (a Laplace approximation).

At a mode :math:`m` of a posterior with :math:`H` the Hessian (or a Gauss-Newton matrix) of
the negative log posterior, the Laplace approximation is :math:`q_\mathrm{full} =
\mathcal{N}(m, H^{-1})`. Its KL-closest diagonal Gaussian,
:math:`\arg\min_{q_\mathrm{diag}} \mathrm{KL}(q_\mathrm{diag} \,\|\, q_\mathrm{full})`, keeps
the mean and has precisions :math:`H_{ii}` (:func:`reports.gaussian.closest_diagonal` with
:math:`\Sigma = H^{-1}`), so

.. math::

    \mathrm{KL}(q_\mathrm{diag} \,\|\, q_\mathrm{full})
    = \tfrac12 \Bigl(\sum_i \log H_{ii} - \log\det H\Bigr)
    = \tfrac12 \sum_i \log\Bigl(1 + \sum_{k<i} L_{ik}^2 / L_{ii}^2\Bigr),
    \qquad H = L L^\top,

non-negative term by term and 0 exactly when :math:`H` is diagonal; and the closed-form
2-Wasserstein distance between :math:`\mathcal{N}(m, \operatorname{diag}(1/H_{ii}))` and
:math:`\mathcal{N}(m, H^{-1})` (:func:`w2_diag_full_precision`). No sampling is
involved: these are the exact price of mean field for the Gaussian that the curvature at
the mode defines (Farquhar, Smith & Gal 2020 measure the same KL on a Gaussian fitted to
HMC draws).

Per block of parameters (a layer) there are two readings, both given by
:func:`laplace_diag_vs_full`: the *conditional* one uses the block :math:`H_{bb}` of the
precision (the layer's Gaussian with every other parameter held at the mode), the
*marginal* one the block :math:`(H^{-1})_{bb}` of the covariance (the layer's marginal, as
the per-layer KL of draws, :func:`reports.gaussian.kl_diag_full`, reads it).

For a grid of networks (depths x widths), :func:`axis_effects` says which axis moves a
positive measure such as the KL: the least-squares fit of its logarithm on the logarithms
of the axes, :math:`\log y = a + \sum_j b_j \log x_j`, whose :math:`b_j` is the
elasticity of :math:`y` in axis :math:`j` (doubling axis :math:`j` multiplies :math:`y` by
:math:`2^{b_j}`), with standard errors; :func:`reports.figures.laplace.grid_figure` draws the grid both ways.

NumPy/SciPy and Matplotlib's object API only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

import numpy as np
from scipy.linalg import LinAlgError, cho_solve, cholesky, eigvalsh

from reports.gaussian import Block, kl_diag_full

__all__ = [
    "AxisEffects",
    "axis_effects",
    "covariance_from_precision",
    "kl_diag_full_precision",
    "laplace_diag_vs_full",
    "w2_diag_full_precision",
]


def _chol(prec: np.ndarray) -> np.ndarray:
    prec = np.asarray(prec, dtype=float)
    if prec.ndim != 2 or prec.shape[0] != prec.shape[1]:
        raise ValueError(f"the precision must be a square matrix, got shape {prec.shape}")
    try:
        return cholesky(0.5 * (prec + prec.T), lower=True, check_finite=True)
    except (LinAlgError, ValueError) as err:
        raise ValueError(f"the precision matrix is not positive definite ({err})") from err


def _kl_from_chol(chol: np.ndarray) -> float:
    # H_ii = L_ii^2 + sum_{k<i} L_ik^2 and log det H = 2 sum log L_ii: a sum of log1p terms.
    d2 = np.diag(chol) ** 2
    off = np.sum(np.tril(chol, -1) ** 2, axis=1)
    return float(0.5 * np.sum(np.log1p(off / d2)))


def kl_diag_full_precision(
    prec: np.ndarray, blocks: Mapping[str, Block] | None = None
) -> float | dict[str, float]:
    r"""KL from the closest diagonal Gaussian to :math:`\mathcal{N}(m, H^{-1})`, from :math:`H`.

    .. math:: \tfrac12 \Bigl(\sum_i \log H_{ii} - \log\det H\Bigr)

    Parameters
    ----------
    prec : np.ndarray
        The precision :math:`H`, symmetric positive definite, shape ``(D, D)``.
    blocks : mapping of str to index array or slice, optional
        Parameter groups; each block's KL is that of the precision block :math:`H_{bb}`
        (the conditional Gaussian of the block given the others).

    Returns
    -------
    float or dict of str to float
        The KL; with ``blocks`` a dict with ``"total"`` and one key per block.

    Raises
    ------
    ValueError
        If ``prec`` (or a block of it) is not positive definite, or a block is empty or
        named ``"total"``.
    """
    prec = np.asarray(prec, dtype=float)
    total = _kl_from_chol(_chol(prec))
    if blocks is None:
        return total
    out = {"total": total}
    for name, idx in _indices(prec.shape[0], blocks).items():
        out[name] = _kl_from_chol(_chol(prec[np.ix_(idx, idx)]))
    return out


def covariance_from_precision(prec: np.ndarray) -> np.ndarray:
    """:math:`H^{-1}` through the Cholesky factor of ``prec`` (symmetrized)."""
    chol = _chol(prec)
    cov = cho_solve((chol, True), np.eye(chol.shape[0]))
    return 0.5 * (cov + cov.T)


def w2_diag_full_precision(prec: np.ndarray) -> float:
    r"""Closed-form :math:`W_2` between :math:`\mathcal{N}(m, \operatorname{diag}(1/H_{ii}))`
    and :math:`\mathcal{N}(m, H^{-1})`.

    .. math:: W_2^2 = \operatorname{tr} A + \operatorname{tr} B
              - 2 \operatorname{tr}\bigl(A^{1/2} B A^{1/2}\bigr)^{1/2},
              \quad A = \operatorname{diag}(1/H_{ii}),\ B = H^{-1},

    the formula of :func:`reports.wasserstein.w2_gaussian` for equal means, computed from
    eigenvalues alone: :math:`\operatorname{tr} B = \sum_k 1/\lambda_k(H)` and, since
    :math:`A^{1/2} B A^{1/2} = (D^{1/2} H D^{1/2})^{-1}` with :math:`D = \operatorname{diag}(H)`,
    the last trace is :math:`\sum_k \mu_k^{-1/2}` with :math:`\mu_k` the eigenvalues of
    :math:`D^{1/2} H D^{1/2}`. Two eigenvalue problems and no inverse.

    Raises
    ------
    ValueError
        If ``prec`` is not positive definite.
    """
    prec = np.asarray(prec, dtype=float)
    prec = 0.5 * (prec + prec.T)
    return _w2(prec, eigvalsh(prec))


def _w2(prec: np.ndarray, lam: np.ndarray) -> float:
    if not lam[0] > 0:
        raise ValueError(f"the precision matrix is not positive definite (eigenvalue {lam[0]:g})")
    dh = np.sqrt(np.diag(prec))
    mu = eigvalsh(dh[:, None] * prec * dh[None, :])
    w2sq = np.sum(1.0 / np.diag(prec)) + np.sum(1.0 / lam) - 2.0 * np.sum(mu**-0.5)
    return float(np.sqrt(max(w2sq, 0.0)))


def _indices(d: int, blocks: Mapping[str, Block]) -> dict[str, np.ndarray]:
    out = {}
    for name, idx in blocks.items():
        if name == "total":
            raise ValueError("a block may not be named 'total' (that key holds the full KL)")
        index = np.arange(d)[idx]
        if index.size == 0:
            raise ValueError(f"block {name!r} selects no parameters")
        out[name] = index
    return out


def laplace_diag_vs_full(
    prec: np.ndarray, blocks: Mapping[str, Block] | None = None
) -> dict[str, float]:
    r"""Every mean-field-versus-full measure of :math:`\mathcal{N}(m, H^{-1})`, as one record.

    Parameters
    ----------
    prec : np.ndarray
        The precision :math:`H` (e.g. a Hessian or Gauss-Newton matrix of the negative log
        posterior at a mode), shape ``(D, D)``.
    blocks : mapping of str to index array or slice, optional
        Parameter groups (e.g. layers).

    Returns
    -------
    dict of str to float
        ``kl`` and ``w2`` (whole vector); per block ``kl_<b>`` and ``w2_<b>`` from the
        precision block :math:`H_{bb}` (conditional) and ``kl_marginal_<b>`` from the
        covariance block :math:`(H^{-1})_{bb}` (marginal); ``min_eig``, the smallest
        eigenvalue of :math:`H`, and ``dim``. If :math:`H` is not positive definite (an
        exact Hessian away from a minimum) every KL and W2 is NaN and ``min_eig`` says why.
    """
    prec = np.asarray(prec, dtype=float)
    prec = 0.5 * (prec + prec.T)
    d = prec.shape[0]
    index = _indices(d, blocks or {})
    lam = eigvalsh(prec)
    out: dict[str, float] = {"min_eig": float(lam[0]), "dim": d}
    keys = ["kl", "w2"] + [f"{k}_{b}" for b in index for k in ("kl", "w2", "kl_marginal")]
    if not lam[0] > 0:
        return {**out, **dict.fromkeys(keys, float("nan"))}
    out["kl"] = kl_diag_full_precision(prec)
    out["w2"] = _w2(prec, lam)
    cov = covariance_from_precision(prec)
    for b, idx in index.items():
        sub = prec[np.ix_(idx, idx)]
        out[f"kl_{b}"] = kl_diag_full_precision(sub)
        out[f"w2_{b}"] = w2_diag_full_precision(sub)
        out[f"kl_marginal_{b}"] = float(kl_diag_full(cov[np.ix_(idx, idx)]))
    return out


class AxisEffects(NamedTuple):
    """Least-squares fit of ``log y`` on the logarithms of the axes (:func:`axis_effects`).

    Attributes
    ----------
    slopes, se : dict of str to float
        Per axis, the elasticity :math:`b_j` and its standard error (NaN with no residual
        degrees of freedom).
    r2 : float
        Coefficient of determination of the fit.
    n : int
        Points fitted (positive finite ``y`` only).
    """

    slopes: dict[str, float]
    se: dict[str, float]
    r2: float
    n: int


def axis_effects(y: Sequence[float], axes: Mapping[str, Sequence[float]]) -> AxisEffects:
    r"""Elasticities of a positive ``y`` in each axis: OLS of :math:`\log y` on
    :math:`\log x_j` with an intercept.

    Parameters
    ----------
    y : sequence of float
        The measure per cell (e.g. ``laplace_kl``); non-positive or non-finite values are
        left out (together with their axis values).
    axes : mapping of str to sequence of float
        Positive axis values per cell (e.g. ``{"depth": ..., "width": ...}``), each as long
        as ``y``.

    Returns
    -------
    AxisEffects
    """
    y = np.asarray(y, dtype=float)
    cols = {k: np.asarray(v, dtype=float) for k, v in axes.items()}
    if any(c.shape != y.shape for c in cols.values()):
        raise ValueError("every axis must have one value per y")
    ok = np.isfinite(y) & (y > 0)
    for c in cols.values():
        ok &= np.isfinite(c) & (c > 0)
    names = list(cols)
    x = np.column_stack([np.ones(int(ok.sum()))] + [np.log(cols[k][ok]) for k in names])
    ly = np.log(y[ok])
    n, p = x.shape
    if n < p or np.linalg.matrix_rank(x) < p:
        nan = dict.fromkeys(names, float("nan"))
        return AxisEffects(nan, dict(nan), float("nan"), n)
    coef, *_ = np.linalg.lstsq(x, ly, rcond=None)
    resid = ly - x @ coef
    dof = n - p
    tss = float(((ly - ly.mean()) ** 2).sum())
    r2 = 1.0 - float(resid @ resid) / tss if tss > 0 else float("nan")
    if dof > 0:
        cov = float(resid @ resid) / dof * np.linalg.inv(x.T @ x)
        se = np.sqrt(np.diag(cov))[1:]
    else:
        se = np.full(p - 1, np.nan)
    return AxisEffects(
        {k: float(c) for k, c in zip(names, coef[1:], strict=True)},
        {k: float(v) for k, v in zip(names, se, strict=True)},
        r2,
        n,
    )
