r"""Isokinetic (ESH) dynamics for C chains and the MCLMC transition.

Microcanonical Langevin Monte Carlo (MCLMC; Robnik, De Luca, Silverstein & Seljak 2023)
moves a position :math:`z` with a momentum :math:`u` of unit norm: the energy-sampling
Hamiltonian dynamics of Ver Steeg & Galstyan (2021) in the form of Robnik et al. (2023),

.. math:: \dot z = M^{1/2} u, \qquad
          \dot u = -(I - u u^\top)\, M^{1/2} \nabla U(z) / (d - 1),

whose marginal over :math:`z` is the target :math:`e^{-U}` without a Metropolis test (the
kinetic energy is the log-speed change, :math:`(d-1)\log|\cdot|`, not
:math:`\tfrac12 r^\top M^{-1} r`). ``M^{-1}`` is a diagonal preconditioner, the estimated
posterior variances.

This module ports BlackJAX 1.7.1, file by file:

- :func:`esh_momentum_update`: ``mcmc/integrators.py::esh_dynamics_momentum_update_one_step``
  (the closed-form momentum update along the gradient with the kinetic energy change, no
  exponential of the step so no overflow), diagonal preconditioner;
- :func:`isokinetic_step`: ``isokinetic_mclachlan`` of the same file, i.e.
  ``generalized_two_stage_integrator`` with McLachlan's minimal-error coefficients
  :math:`(b_1, \tfrac12, 1 - 2 b_1, \tfrac12, b_1)`, :math:`b_1 = 0.1931833275037836`:
  two gradient evaluations per step (the first momentum update reuses the last gradient);
- :func:`partial_refresh`: ``partially_refresh_momentum``, the Langevin noise
  :math:`u \leftarrow (u + \nu\xi)/|u + \nu\xi|`, :math:`\nu = \sqrt{(e^{2\epsilon/L}-1)/d}`,
  applied for half a step before and after each deterministic step
  (``with_isokinetic_maruyama``);
- :func:`mclmc_transition`: ``mcmc/mclmc.py::build_kernel`` with its ``handle_nans`` (a
  step that gives a non-finite position, momentum, potential or energy change is undone
  and the momentum redrawn). ``desired_energy_var_max_ratio`` is BlackJAX's default,
  infinity, so its high-energy cutoff never fires and is left out.

Rows do not interact: each chain's step depends on its rows of the inputs only. The chains
may have their own step sizes, lengths and preconditioners (per-chain tensors), as a
``jax.vmap`` of BlackJAX's kernel over chains. Per-chain scalars (norms, :math:`\zeta`, the
kinetic energy change) are float64; the vectors keep the potential's dtype.

References
----------
Robnik, J., De Luca, G. B., Silverstein, E. and Seljak, U. (2023). Microcanonical
Hamiltonian Monte Carlo. JMLR 24(311).

Robnik, J. and Seljak, U. (2024). Fluctuation without dissipation: Microcanonical Langevin
Monte Carlo. Proceedings of the 6th Symposium on Advances in Approximate Bayesian Inference,
PMLR 253.

Ver Steeg, G. and Galstyan, A. (2021). Hamiltonian dynamics with non-Newtonian momentum for
rapid sampling. NeurIPS.

McLachlan, R. I. (1995). On the numerical integration of ordinary differential equations by
symmetric composition methods. SIAM J. Sci. Comput. 16(1).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

__all__ = [
    "MCLACHLAN",
    "IsokineticState",
    "MCLMCInfo",
    "esh_momentum_update",
    "isokinetic_step",
    "mclmc_transition",
    "partial_refresh",
    "unit_vectors",
]

_B1 = 0.1931833275037836
#: McLachlan's coefficients (momentum, position, momentum, position, momentum), BlackJAX's
#: ``mclachlan_coefficients``.
MCLACHLAN = (_B1, 0.5, 1.0 - 2.0 * _B1, 0.5, _B1)
#: Gradient evaluations per :func:`isokinetic_step` (the positions' updates).
GRADS_PER_STEP = 2
_LOG2 = math.log(2.0)


class IsokineticState(NamedTuple):
    """The chains' states: positions, unit momenta, potentials and their gradients."""

    z: torch.Tensor
    """(C, D) positions."""
    u: torch.Tensor
    """(C, D) momenta of unit norm (in the preconditioned frame)."""
    potential: torch.Tensor
    """(C,) float64 :math:`U(z)`, minus the log density."""
    g: torch.Tensor
    """(C, D) :math:`\\nabla U(z)`."""


class MCLMCInfo(NamedTuple):
    """What one :func:`mclmc_transition` of ``C`` chains did."""

    energy_change: torch.Tensor
    """(C,) float64: kinetic energy change plus :math:`U(z') - U(z)`, 0 where undone."""
    kinetic_change: torch.Tensor
    """(C,) float64: the kinetic energy change of the step, 0 where undone."""
    ok: torch.Tensor
    """(C,) bool: the step was finite and kept (BlackJAX's ``nonans``)."""


def unit_vectors(noise: torch.Tensor) -> torch.Tensor:
    """Rows of ``noise`` (standard normal draws) scaled to unit norm: uniform directions."""
    return noise / torch.linalg.vector_norm(noise, dim=1, keepdim=True)


def _normalized(x: torch.Tensor, tol: float = 1e-13) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows over their norm (left as they are below ``tol``), and the norms ``(C, 1)``."""
    n = torch.linalg.vector_norm(x, dim=1, keepdim=True)
    return torch.where(n > tol, x / n, x), n


def esh_momentum_update(
    u: torch.Tensor, g: torch.Tensor, step: torch.Tensor, sqrt_minv: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    r"""The exact ESH momentum update over time ``step`` with the gradient held fixed.

    With :math:`e = -M^{1/2}\nabla U / |M^{1/2}\nabla U|`, :math:`\delta = \epsilon
    |M^{1/2}\nabla U| / (d - 1)` and :math:`\zeta = e^{-\delta}`,

    .. math:: u' \propto e (1 - \zeta)(1 + \zeta + u\cdot e\,(1 - \zeta)) + 2 \zeta u,

    and the kinetic energy changes by :math:`(d - 1)(\delta - \log 2 + \log a)`, with
    :math:`a = \tfrac12|u + e|^2 (1 - \zeta^2) + 2\zeta^2` (BlackJAX's form, which avoids
    :math:`e^{\delta}`).

    Parameters
    ----------
    u : Tensor
        ``(C, D)`` unit momenta.
    g : Tensor
        ``(C, D)`` gradients of the potential :math:`U` (minus the log density).
    step : Tensor
        ``(C, 1)`` float64: the step size times the integrator's coefficient, per chain.
    sqrt_minv : Tensor
        ``(D,)`` or ``(C, D)``: :math:`M^{-1/2}`, the square root of the inverse mass matrix.

    Returns
    -------
    u, velocity : Tensor
        The new unit momenta and :math:`M^{1/2} u'` (the position's rate), ``(C, D)``.
    kinetic_change : Tensor
        ``(C,)`` float64.
    """
    d = u.shape[1]
    e, gnorm = _normalized(-g * sqrt_minv)
    # one float64 (C, 3) of the per-chain scalars: |g'|, u.e and |u|^2 + |e|^2
    dots = torch.stack([gnorm.squeeze(1), (u * e).sum(1), (u * u).sum(1) + (e * e).sum(1)], 1).to(
        torch.float64
    )
    gn, ue, sq = dots[:, :1], dots[:, 1:2], dots[:, 2:]
    delta = step * gn / (d - 1)
    zeta = torch.exp(-delta)
    coef_e = ((1 - zeta) * (1 + zeta + ue * (1 - zeta))).to(u.dtype)
    new, _ = _normalized(torch.addcmul(e * coef_e, (2 * zeta).to(u.dtype), u))
    z2 = zeta * zeta
    # 0.5 |u +- e|^2 = 0.5 (|u|^2 + |e|^2) +- u.e
    a = torch.where(z2 <= 1, (0.5 * sq + ue) * (1 - z2) + 2 * z2, (0.5 * sq - ue) * (z2 - 1) + 2)
    kinetic = ((delta - _LOG2 + torch.log(a)) * (d - 1)).squeeze(1)
    return new, new * sqrt_minv, kinetic


def isokinetic_step(
    pot, state: IsokineticState, eps: torch.Tensor, sqrt_minv: torch.Tensor
) -> tuple[IsokineticState, torch.Tensor]:
    """One McLachlan step of the isokinetic dynamics (two gradient evaluations).

    Parameters
    ----------
    pot
        Anything with ``value_and_grad_batch(z (C, D)) -> (U (C,), grad (C, D))``.
    state : IsokineticState
    eps : Tensor
        ``(C,)`` float64 step sizes.
    sqrt_minv : Tensor
        ``(D,)`` or ``(C, D)``.

    Returns
    -------
    IsokineticState, Tensor
        The new state and the ``(C,)`` float64 kinetic energy change.
    """
    z, u, _, g = state
    e = eps.to(torch.float64).unsqueeze(1)
    kinetic = torch.zeros(z.shape[0], dtype=torch.float64, device=z.device)
    potential = state.potential
    for i, coef in enumerate(MCLACHLAN):
        if i % 2 == 0:
            u, v, dk = esh_momentum_update(u, g, e * coef, sqrt_minv)
            kinetic = kinetic + dk
        else:
            z = z + (e * coef).to(z.dtype) * v
            potential, g = pot.value_and_grad_batch(z)
    return IsokineticState(z, u, potential.to(torch.float64), g), kinetic


def partial_refresh(
    u: torch.Tensor, eps: torch.Tensor, length: torch.Tensor, noise: torch.Tensor
) -> torch.Tensor:
    r""":math:`(u + \nu\xi)/|u + \nu\xi|` with :math:`\nu = \sqrt{(e^{2\epsilon/L} - 1)/d}`.

    ``eps`` and ``length`` are ``(C,)`` float64 (an infinite length leaves ``u`` as it is,
    as BlackJAX's ``partially_refresh_momentum``); ``noise`` ``(C, D)`` standard normal.
    """
    d = u.shape[1]
    nu = torch.sqrt(torch.expm1(2 * eps / length) / d).unsqueeze(1).to(u.dtype)
    return unit_vectors(u + nu * noise)


def _rows_finite(x: torch.Tensor) -> torch.Tensor:
    return torch.isfinite(x).all(1)


def mclmc_transition(
    pot,
    state: IsokineticState,
    eps: torch.Tensor,
    length: torch.Tensor,
    sqrt_minv: torch.Tensor,
    noise: tuple[torch.Tensor, torch.Tensor],
) -> tuple[IsokineticState, MCLMCInfo]:
    """One MCLMC transition of ``C`` chains: half a refresh, a McLachlan step, half a refresh.

    A chain whose step is not finite (position, momentum, potential, kinetic or energy
    change) keeps its state and gets a new random momentum, and reports an energy change of
    0 (BlackJAX's ``handle_nans``); the new momentum is the second refresh's noise made a
    unit vector (independent of the kept state, so no third draw is needed).

    Parameters
    ----------
    pot
        Anything with ``value_and_grad_batch``.
    state : IsokineticState
    eps, length : Tensor
        ``(C,)`` float64: step sizes and momentum decoherence lengths :math:`L`.
    sqrt_minv : Tensor
        ``(D,)`` or ``(C, D)``.
    noise : tuple of Tensor
        Two ``(C, D)`` standard normal draws: the refreshes before and after the step.

    Returns
    -------
    IsokineticState, MCLMCInfo
    """
    half = 0.5 * eps
    u = partial_refresh(state.u, half, length, noise[0])
    new, kinetic = isokinetic_step(pot, state._replace(u=u), eps, sqrt_minv)
    u1 = partial_refresh(new.u, half, length, noise[1])
    energy = kinetic + new.potential - state.potential
    ok = (
        _rows_finite(new.z)
        & _rows_finite(u1)
        & torch.isfinite(new.potential)
        & torch.isfinite(kinetic)
        & torch.isfinite(energy)
    )
    k = ok.unsqueeze(1)
    kept = IsokineticState(
        torch.where(k, new.z, state.z),
        torch.where(k, u1, unit_vectors(noise[1].to(u1.dtype))),
        torch.where(ok, new.potential, state.potential),
        torch.where(k, new.g, state.g),
    )
    zero = torch.zeros_like(energy)
    info = MCLMCInfo(torch.where(ok, energy, zero), torch.where(ok, kinetic, zero), ok)
    return kept, info
