r"""Metrics shared by all chains of a batched kernel, estimated from the pooled warm-up.

Stan's window adaptation (:mod:`~zoo.inference.mcmc.window_adaptation`) gives each chain
its own diagonal inverse mass matrix from its own draws. Here the draws (and gradients) of
all chains in a slow window are pooled, each chain centred on its own window mean (so that
chains sitting in different modes do not inflate the estimate with the distance between
them), and one metric is set for every chain (:data:`POOLED`):

- ``dense``: Stan's regularized dense covariance of the pooled draws,
  :math:`\Sigma = \frac{n}{n + 5}\hat\Sigma + 10^{-3}\frac{5}{n + 5} I` (Stan Reference
  Manual, "HMC algorithm parameters"), :math:`n` the pooled draws;
- ``fisher_diag``: the diagonal that minimizes the Fisher divergence between the target
  and the Gaussian it makes HMC see, :math:`\sigma_i^2 = \sqrt{\mathrm{Var}(x_i) /
  \mathrm{Var}(\partial_i \log p)}` (exact for a Gaussian with diagonal covariance, and
  robust where the draws have not yet spread: the gradients carry the curvature);
- ``fisher_low_rank``: that diagonal, corrected by a low-rank term in the diagonally scaled
  space (:func:`fisher_low_rank`).

The inverse mass matrix of ``dense`` and ``fisher_low_rank`` is a full :math:`D \times D`
matrix :math:`\Sigma = L L^\top`; :class:`DenseBatchMetric` draws momenta
:math:`r = L^{-\top}\xi \sim N(0, \Sigma^{-1})` and moves with :math:`\Sigma r` (kinetic
energy :math:`r^\top \Sigma r / 2`), in the same batched kernels as the diagonal
:class:`~zoo.inference.mcmc.batched.BatchMetric` (the zoo's networks have D of about 100:
a dense product costs less than one gradient).

References
----------
Seyboldt, A., Carlson, E. and Carpenter, B. (2026). Preconditioning Hamiltonian Monte
Carlo by minimizing Fisher divergence. arXiv:2603.18845. (nutpie's ``low_rank``
adaptation, nuts-rs ``transform/adapt/low_rank.rs``; BlackJAX's ``low_rank_adaptation``.)

Stan Development Team. Stan Reference Manual, "HMC algorithm parameters".
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from zoo.inference.mcmc.batched import BatchMetric

__all__ = [
    "POOLED",
    "DenseBatchMetric",
    "dense_covariance",
    "fisher_diagonal",
    "fisher_low_rank",
    "pooled_estimate",
    "pooled_metric",
]

#: The pooled metrics a batched NUTS or HMC may adapt (``mass_matrix`` of its section).
POOLED = ("dense", "fisher_diag", "fisher_low_rank")

#: nuts-rs's defaults: the regularization of the projected covariances and the eigenvalue
#: cutoff (eigenvalues within [1/2, 2] of the diagonal's are left to it).
GAMMA, EIGVAL_CUTOFF = 1e-5, 2.0


class DenseBatchMetric:
    """One dense inverse mass matrix ``minv`` :math:`\\Sigma` ``(D, D)`` for every chain.

    The interface of :class:`~zoo.inference.mcmc.batched.BatchMetric` (module docstring).
    """

    def __init__(self, minv: torch.Tensor) -> None:
        if minv.dim() != 2 or minv.shape[0] != minv.shape[1]:
            raise ValueError(f"minv has shape {tuple(minv.shape)}; expected (D, D) (dense)")
        self.minv = 0.5 * (minv + minv.T)
        self.chol = torch.linalg.cholesky(self.minv.double()).to(minv.dtype)

    def momentum(self, gens: Sequence[torch.Generator], like: torch.Tensor) -> torch.Tensor:
        """One momentum per chain, each from its own generator."""
        d = like.shape[1]
        noise = torch.stack([torch.randn(d, generator=g, dtype=like.dtype) for g in gens])
        return self.from_noise(noise)

    def from_noise(self, noise: torch.Tensor) -> torch.Tensor:
        """:math:`r = L^{-\\top}\\xi`, rows of ``noise`` :math:`\\xi`: :math:`r \\sim
        N(0, \\Sigma^{-1})`."""
        sol = torch.linalg.solve_triangular(self.chol.T, noise.T, upper=True)
        return sol.T.contiguous()

    def velocity(self, r: torch.Tensor) -> torch.Tensor:
        """:math:`\\Sigma r` of every chain (rows of ``r``)."""
        return r @ self.minv

    def scale(self, eps: torch.Tensor) -> torch.Tensor:
        """The step sizes as they are (the matrix is applied in :meth:`drift`)."""
        return eps

    def drift(
        self, z: torch.Tensor, scaled: torch.Tensor, r: torch.Tensor, out=None
    ) -> torch.Tensor:
        """:math:`z + \\epsilon \\Sigma r`, into ``out`` if given."""
        return torch.add(z, scaled * (r @ self.minv), out=out)

    def diagonal(self, chains: int) -> torch.Tensor:
        """The diagonal of :math:`\\Sigma`, repeated per chain ``(C, D)`` (what a report reads)."""
        return self.minv.diagonal().expand(chains, -1).clone()


def _centred(x: torch.Tensor) -> torch.Tensor:
    """``(T, C, D)`` window rows, each chain less its own mean, as ``(T C, D)`` float64."""
    x = x.double()
    return (x - x.mean(0, keepdim=True)).reshape(-1, x.shape[-1])


def dense_covariance(draws: torch.Tensor) -> torch.Tensor:
    """Stan's regularized covariance of the pooled, per-chain-centred ``draws`` ``(T, C, D)``.

    :math:`\\frac{n}{n+5}\\hat\\Sigma + 10^{-3}\\frac{5}{n+5} I`, :math:`\\hat\\Sigma` the
    within-chain covariance (:math:`n - C` degrees of freedom), :math:`n = TC`.
    """
    t, c, d = draws.shape
    x = _centred(draws)
    n = t * c
    if n - c < 1:
        raise RuntimeError("Insufficient samples to estimate covariance")
    cov = x.T @ x / (n - c)
    eye = torch.eye(d, dtype=torch.float64)
    return (n / (n + 5.0)) * cov + 1e-3 * (5.0 / (n + 5.0)) * eye


def fisher_diagonal(draws: torch.Tensor, grads: torch.Tensor) -> torch.Tensor:
    """:math:`\\sqrt{\\mathrm{Var}(x_i)/\\mathrm{Var}(g_i)}` per coordinate ``(D,)`` float64.

    ``draws`` and ``grads`` ``(T, C, D)``: positions and gradients of the potential
    (:math:`-\\nabla \\log p`; the sign does not matter) of the window, pooled within chains.
    A coordinate whose draws or gradients did not move gets 1.
    """
    vx = _centred(draws).square().mean(0)
    vg = _centred(grads).square().mean(0)
    var = (vx / vg).sqrt()
    return torch.where(torch.isfinite(var) & (var > 0), var, 1.0).clamp(1e-20, 1e20)


def fisher_low_rank(
    draws: torch.Tensor,
    grads: torch.Tensor,
    *,
    gamma: float = GAMMA,
    cutoff: float = EIGVAL_CUTOFF,
) -> torch.Tensor:
    """The Fisher-divergence diagonal plus low-rank inverse mass matrix ``(D, D)`` float64.

    Seyboldt, Carlson & Carpenter (2026), as nuts-rs (nutpie's ``low_rank`` adaptation)
    computes it: with :math:`S = \\mathrm{diag}(\\sigma)` from :func:`fisher_diagonal`
    (:math:`\\sigma_i^2` its value), the centred draws :math:`X S^{-1}` and gradients
    :math:`G S` span a subspace (an orthonormal basis :math:`Q` of their left singular
    vectors); there :math:`C_x = Q^\\top X^\\top X Q / \\gamma + I` and
    :math:`C_g = Q^\\top G^\\top G Q / \\gamma + I`, and their geometric mean
    :math:`C_g^{-1/2} (C_g^{1/2} C_x C_g^{1/2})^{1/2} C_g^{-1/2}`, the covariance whose
    Gaussian has the least Fisher divergence from the draws' and gradients' (it solves
    :math:`A C_g A = C_x`), has eigenpairs :math:`(\\lambda_k, u_k)`. The eigenvalues outside
    :math:`[1/\\text{cutoff}, \\text{cutoff}]` correct the diagonal:

    .. math:: \\Sigma = S \\bigl(I + \\textstyle\\sum_k (\\lambda_k - 1) Q u_k u_k^\\top
              Q^\\top\\bigr) S.

    (nuts-rs's defaults: :math:`\\gamma = 10^{-5}`, cutoff 2; ``draws`` and ``grads``
    ``(T, C, D)``, pooled within chains.)
    """
    var = fisher_diagonal(draws, grads)
    sd = var.sqrt()
    x = _centred(draws) / sd  # (N, D): rows are draws
    g = _centred(grads) * sd
    ux = torch.linalg.svd(x.T, full_matrices=False).U
    ug = torch.linalg.svd(g.T, full_matrices=False).U
    q = torch.linalg.qr(torch.cat([ux, ug], 1)).Q  # (D, k)
    xp, gp = x @ q, g @ q
    eye = torch.eye(q.shape[1], dtype=torch.float64)
    cx = xp.T @ xp / gamma + eye
    cg = gp.T @ gp / gamma + eye
    vals, vecs = torch.linalg.eigh(_spd_mean(cx, cg))
    keep = (vals > cutoff) | (vals < 1.0 / cutoff)
    u = q @ vecs[:, keep]
    inner = torch.eye(len(sd), dtype=torch.float64) + (u * (vals[keep] - 1.0)) @ u.T
    return sd[:, None] * inner * sd[None, :]


def _spd_mean(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The geometric mean :math:`b^{-1/2}(b^{1/2} a b^{1/2})^{1/2} b^{-1/2}` of two SPD
    matrices: the SPD solution :math:`m` of :math:`m b m = a`."""
    w, v = torch.linalg.eigh(b)
    b_half = (v * w.sqrt()) @ v.T
    b_inv_half = (v * w.rsqrt()) @ v.T
    wm, vm = torch.linalg.eigh(b_half @ a @ b_half)
    m_half = (vm * wm.clamp_min(0).sqrt()) @ vm.T
    return b_inv_half @ m_half @ b_inv_half


def pooled_estimate(kind: str, draws: torch.Tensor, grads: torch.Tensor) -> torch.Tensor:
    """The inverse mass matrix of ``kind`` (:data:`POOLED`) from a window's ``draws`` and
    ``grads`` ``(T, C, D)``: float64 ``(D, D)``, or ``(D,)`` for ``fisher_diag``."""
    if kind == "dense":
        return dense_covariance(draws)
    if kind == "fisher_diag":
        return fisher_diagonal(draws, grads)
    if kind == "fisher_low_rank":
        return fisher_low_rank(draws, grads)
    raise ValueError(f"pooled metric {kind!r}; expected one of {', '.join(POOLED)}")


def pooled_metric(
    minv: torch.Tensor, chains: int, like: torch.Tensor
) -> DenseBatchMetric | BatchMetric:
    """The batched metric of a pooled estimate: :class:`DenseBatchMetric` of a ``(D, D)``
    one, :class:`~zoo.inference.mcmc.batched.BatchMetric` of a ``(D,)`` one repeated per
    chain; in ``like``'s dtype and device."""
    minv = minv.to(like.device, like.dtype)
    if minv.dim() == 2:
        return DenseBatchMetric(minv)
    return BatchMetric(minv.expand(chains, -1).clone())
