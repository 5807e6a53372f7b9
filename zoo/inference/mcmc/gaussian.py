r"""The potential of a known Gaussian :math:`\mathcal N(0, \Sigma)`, for the samplers' ground truth.

:class:`GaussianPotential` has the interface the HMC and NUTS drivers of
:mod:`zoo.inference.mcmc.samplers` ask of :class:`~zoo.inference.mcmc.potential.FlatPotential`
(``value_and_grad``, ``value_and_grad_batch``, ``ravel``, ``unravel``, ``prior_draw``,
``site_slices``, ``dim``, ``x`` for the dtype), with one site ``theta`` of shape ``(D,)``:

.. math:: U(z) = \tfrac12 z^\top \Sigma^{-1} z, \qquad \nabla U(z) = \Sigma^{-1} z,

so the same samplers, warm-up and batching that sample the networks sample a target whose
covariance, and hence whose KL(q_diag || q_full), is known exactly
(:mod:`zoo.studies.price_of_mf.ground_truth`).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch

__all__ = ["GaussianPotential"]


class GaussianPotential:
    """:math:`U(z) = z^\\top \\Sigma^{-1} z / 2` over a flat ``z`` of dimension D (float64).

    Parameters
    ----------
    cov : np.ndarray
        The target covariance :math:`\\Sigma`, symmetric positive definite, ``(D, D)``.
    init_scale : float, default 2.0
        Chains start at ``init_scale * sqrt(diag(cov)) * N(0, I)``: overdispersed, so the
        warm-up has to find the typical set as it does for a network.
    """

    site = "theta"

    def __init__(self, cov: np.ndarray, init_scale: float = 2.0) -> None:
        cov = np.asarray(cov, dtype=np.float64)
        if cov.ndim != 2 or cov.shape[0] != cov.shape[1]:
            raise ValueError(f"cov must be a square matrix, got shape {cov.shape}")
        prec = np.linalg.inv(np.linalg.cholesky(cov))  # L^-1; precision = L^-T L^-1
        self.prec = torch.from_numpy(prec.T @ prec)
        self.prec = 0.5 * (self.prec + self.prec.T)
        self.dim = cov.shape[0]
        self.x = torch.empty(0, dtype=torch.float64)  # the dtype the drivers read
        self.site_shapes = {self.site: (self.dim,)}
        self.site_slices = {self.site: slice(0, self.dim)}
        self._init_sd = init_scale * torch.from_numpy(np.sqrt(np.diag(cov)))

    def unravel(self, z: torch.Tensor) -> dict[str, torch.Tensor]:
        """``{"theta": z}``."""
        return {self.site: z}

    def ravel(self, params: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Inverse of :meth:`unravel`."""
        return torch.as_tensor(params[self.site], dtype=torch.float64)

    def __call__(self, z: torch.Tensor) -> torch.Tensor:
        """U(z) for ``z`` of shape ``batch + (D,)``."""
        return 0.5 * ((z @ self.prec) * z).sum(-1)

    def value_and_grad(self, z: torch.Tensor) -> tuple[float, torch.Tensor]:
        """``(U(z), Σ^-1 z)`` for one ``z`` of shape ``(D,)``."""
        g = self.prec @ z
        return 0.5 * float(z.dot(g)), g

    def value_and_grad_batch(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(U, grad)`` for ``z`` of shape ``(C, D)``: U float64 ``(C,)``, grad ``(C, D)``."""
        if z.dim() != 2 or z.shape[1] != self.dim:
            raise ValueError(f"z has shape {tuple(z.shape)}; expected (chains, {self.dim})")
        g = z @ self.prec
        return 0.5 * (z * g).sum(1), g

    def grad_batch(self, z: torch.Tensor) -> torch.Tensor:
        """``Σ^-1 z`` for ``z`` of shape ``(C, D)`` (the leapfrog steps that need no energy)."""
        return z @ self.prec

    def prior_draw(self, gen: torch.Generator) -> torch.Tensor:
        """An overdispersed starting point (see ``init_scale``)."""
        return self._init_sd * torch.randn(self.dim, generator=gen, dtype=torch.float64)
