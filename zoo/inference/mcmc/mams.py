r"""Adjusted MCLMC (MAMS): isokinetic trajectories with a Metropolis test, for C chains.

The Metropolis-adjusted microcanonical sampler (MAMS; Robnik, Cohn-Gordon & Seljak 2025)
draws a fresh unit momentum, follows the isokinetic dynamics of
:mod:`zoo.inference.mcmc.mclmc` for :math:`n` McLachlan steps of size :math:`\epsilon`
without noise, and accepts the end point with probability
:math:`\min(1, e^{-\Delta U - \Delta K})`, where :math:`\Delta K` is the kinetic energy
change the integrator accumulates: the chain is then exact for any step size, unlike
MCLMC. The number of steps is random, :math:`n = \max(\lceil v\, s(L/\epsilon)\rceil, 1)`
with :math:`v \sim U(0, 1)` and :math:`s` such that the mean is :math:`L/\epsilon`.

Ported from BlackJAX 1.7.1: :func:`mams_transition` is
``mcmc/adjusted_mclmc_dynamic.py::build_kernel`` (momentum ``generate_unit_vector``,
``L_proposal_factor`` infinite, so no refresh inside a trajectory) with
``mcmc/adjusted_mclmc.py::adjusted_mclmc_proposal`` (a non-finite energy error is a
rejection; above 1000 it is a divergence) and :func:`steps_mean_rescale` its ``rescale``
(``make_random_trajectory_length_fn(True)``). The chains of a batch have their own
:math:`n`: each step evaluates the gradient of the chains still moving only (the rows of
the batch), and the batch takes the longest chain's steps. Consecutive steps share the
momentum update between them (McLachlan's last :math:`b_1` and the next first :math:`b_1`
use the same gradient, and the exact momentum flow composes): three momentum updates per two
gradients become two, up to rounding the trajectory of BlackJAX's step repeated
(``tests/zoo/inference/mcmc/test_mclmc.py`` checks both). The zoo caps :math:`n` at
``max_steps``.

The tuning is :mod:`~zoo.inference.mcmc.mams_adaptation`, the program that runs the two
:class:`~zoo.inference.mcmc.microcanonical.MAMSProgram`.

References
----------
Robnik, J., Cohn-Gordon, R. and Seljak, U. (2025). Metropolis adjusted microcanonical
Hamiltonian Monte Carlo. arXiv:2503.01707.

Hoffman, M. D. and Gelman, A. (2014). The No-U-Turn Sampler. JMLR 15 (dual averaging).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch

from zoo.inference.mcmc.kernel import MAX_ENERGY_ERROR
from zoo.inference.mcmc.mclmc import (
    MCLACHLAN,
    IsokineticState,
    esh_momentum_update,
    unit_vectors,
)

__all__ = ["MAMSInfo", "mams_transition", "steps_mean_rescale"]


class MAMSInfo(NamedTuple):
    """What one :func:`mams_transition` of ``C`` chains did."""

    acceptance_rate: torch.Tensor
    """(C,) float64 :math:`\\min(1, e^{-\\Delta H})`, 0 where not finite."""
    accepted: torch.Tensor
    """(C,) bool."""
    diverging: torch.Tensor
    """(C,) bool: :math:`\\Delta H > 1000` or not finite."""


def steps_mean_rescale(mean: np.ndarray) -> np.ndarray:
    """BlackJAX's ``rescale``: ``s`` with :math:`E\\,\\mathrm{round}(U(0,1)s + 1/2) =`
    ``mean``."""
    k = np.floor(2 * mean - 1)
    return k + k * (mean - 0.5 * (k + 1)) / (k + 1 - mean)


def mams_transition(
    pot,
    state: IsokineticState,
    eps: torch.Tensor,
    n_steps: np.ndarray,
    sqrt_minv: torch.Tensor,
    noise: torch.Tensor,
    log_uniform: torch.Tensor,
) -> tuple[IsokineticState, MAMSInfo]:
    """One MAMS transition: chain ``c`` runs ``n_steps[c]`` McLachlan steps from a fresh unit
    momentum (``noise`` made unit) and is accepted where ``log_uniform`` :math:`< -\\Delta H`.

    Parameters
    ----------
    pot
        Anything with ``value_and_grad_batch`` (rows independent).
    state : IsokineticState
        The chains' states (the momentum is not used).
    eps : Tensor
        ``(C,)`` float64 step sizes.
    n_steps : np.ndarray
        ``(C,)`` integers >= 1.
    sqrt_minv : Tensor
        ``(D,)`` or ``(C, D)``.
    noise, log_uniform : Tensor
        ``(C, D)`` standard normal, ``(C,)`` logarithms of uniforms.
    """
    z, potential, g = state.z, state.potential, state.g
    e = eps.to(torch.float64).unsqueeze(1)
    b1, a, b2 = MCLACHLAN[:3]
    u, v, kinetic = esh_momentum_update(unit_vectors(noise), g, e * b1, sqrt_minv)
    steps = torch.as_tensor(n_steps, device=e.device)
    for s in range(int(n_steps.max())):
        active = n_steps > s
        idx = None if active.all() else torch.as_tensor(np.flatnonzero(active), device=e.device)
        ez, zs, vs, us, ns = (x if idx is None else x[idx] for x in (e, z, v, u, steps))
        sm = sqrt_minv[idx] if idx is not None and sqrt_minv.dim() == 2 else sqrt_minv
        # a McLachlan step whose last momentum update is fused with the next step's first
        # (the same gradient: the exact flow composes, b1 + b1), except on the last step
        zs = zs + (ez * a).to(zs.dtype) * vs
        _, gs = pot.value_and_grad_batch(zs)
        us, vs, dk1 = esh_momentum_update(us, gs, ez * b2, sm)
        zs = zs + (ez * a).to(zs.dtype) * vs
        us_pot, gs = pot.value_and_grad_batch(zs)
        last = (ns == s + 1).unsqueeze(1)
        us, vs, dk2 = esh_momentum_update(us, gs, torch.where(last, ez * b1, ez * (2 * b1)), sm)
        if idx is None:
            z, u, v, g, potential = zs, us, vs, gs, us_pot.to(torch.float64)
            kinetic = kinetic + dk1 + dk2
        else:
            z, u, v, g = (x.index_copy(0, idx, y) for x, y in ((z, zs), (u, us), (v, vs), (g, gs)))
            potential = potential.index_copy(0, idx, us_pot.to(torch.float64))
            kinetic = kinetic.index_add(0, idx, dk1 + dk2)
    cur = IsokineticState(z, u, potential, g)
    dh = cur.potential - state.potential + kinetic
    finite = torch.isfinite(dh)
    diverging = ~finite | (dh > MAX_ENERGY_ERROR)
    acc = torch.where(finite, torch.exp(torch.clamp(-dh, max=0.0)), 0.0)
    accept = (log_uniform.to(torch.float64) < -dh) & finite
    a = accept.unsqueeze(1)
    new = IsokineticState(
        torch.where(a, cur.z, state.z),
        cur.u,
        torch.where(accept, cur.potential, state.potential),
        torch.where(a, cur.g, state.g),
    )
    return new, MAMSInfo(acc, accept, diverging)
