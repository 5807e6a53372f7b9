r"""The ChEES-HMC kernel: jittered HMC with one step size and one trajectory length for C chains.

ChEES-HMC (Hoffman, Radul & Sountsov, "An Adaptive-MCMC Scheme for Setting Trajectory
Lengths in Hamiltonian Monte Carlo", AISTATS 2021) gives all chains one step size
:math:`\epsilon`, one diagonal inverse mass matrix :math:`M^{-1}` and one trajectory length
:math:`T`; transition :math:`t` draws a jitter :math:`u_t \in (0, 1)` shared by the chains
and runs

.. math:: n_t = \min\bigl(\max(\lceil u_t T / \epsilon \rceil, 1), L_{\max}\bigr)

leapfrog steps for every chain (:func:`chees_transition`), so the batch of ``C`` chains is
one computation of ``n_t`` batched gradients and never waits for the longest trajectory (as
batched NUTS does). The jitter is the base-2 Halton (van der Corput) sequence,
:math:`u_t = \mathrm{radical\ inverse}(t + 1)` (:func:`halton`), as in BlackJAX and
TensorFlow Probability. Divergence: an energy error above 1000 (or a non-finite one) marks
the chain's transition divergent and rejects it. No host synchronization happens inside a
transition's leapfrog loop, which updates two buffers in place and asks the potential for
the gradient alone (``grad_batch``, where it has one) at every step but the last.

The adaptation of :math:`\epsilon`,
:math:`T` and :math:`M^{-1}` is :mod:`zoo.inference.mcmc.chees_adaptation`; the two meet in
:mod:`zoo.inference.mcmc.chees_hmc`.

References
----------
Hoffman, M. D., Radul, A. and Sountsov, P. (2021). An adaptive-MCMC scheme for setting
trajectory lengths in Hamiltonian Monte Carlo. AISTATS.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from zoo.inference.mcmc.kernel import MAX_ENERGY_ERROR
from zoo.inference.mcmc.potential import FlatPotential

__all__ = ["ChEESInfo", "chees_transition", "halton", "num_steps"]


class ChEESInfo(NamedTuple):
    """What one :func:`chees_transition` of ``C`` chains did."""

    proposal: torch.Tensor
    """(C, D): the end of each trajectory, before the Metropolis test."""
    velocity: torch.Tensor
    """(C, D): :math:`M^{-1} r` at the end of each trajectory (what ChEES differentiates)."""
    acceptance_rate: torch.Tensor
    """(C,) float64: :math:`\\min(1, e^{-\\Delta H})`, 0 where :math:`\\Delta H` is not finite."""
    accepted: torch.Tensor
    """(C,) bool: the proposal became the new state."""
    diverging: torch.Tensor
    """(C,) bool: :math:`\\Delta H > 1000` or not finite (always rejected)."""
    energy: torch.Tensor
    """(C,) float64: the Hamiltonian of the returned state with its momentum."""
    n_steps: int
    """Leapfrog steps of every chain."""


def _kinetic(r: torch.Tensor, minv: torch.Tensor) -> torch.Tensor:
    return 0.5 * (r * r * minv).sum(1).to(torch.float64)


def chees_transition(
    pot: FlatPotential,
    z: torch.Tensor,
    u: torch.Tensor,
    g: torch.Tensor,
    eps: float,
    minv: torch.Tensor,
    n_steps: int,
    noise: torch.Tensor,
    log_uniform: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, ChEESInfo]:
    """One HMC transition of ``n_steps`` leapfrog steps for each of ``C`` chains.

    Momenta :math:`r = M^{1/2}\\xi` from ``noise`` :math:`\\xi`; velocity Verlet with step
    ``eps``; the proposal is accepted where ``log_uniform`` :math:`< -\\Delta H` and the
    transition did not diverge. Rows do not interact: each chain's result depends only on its
    rows of ``z``, ``u``, ``g``, ``noise`` and ``log_uniform``. The leapfrog loop makes no host
    synchronization (a diverging chain runs on and is rejected at the end).

    Parameters
    ----------
    pot : FlatPotential
        Anything with ``value_and_grad_batch(z (C, D)) -> (U (C,) float64, grad (C, D))``;
        its ``grad_batch(z) -> grad``, where it has one, serves the inner steps (it must
        give the same gradient). The returned tensors are new; the inputs are not written.
    z, u, g : Tensor
        The chains' states ``(C, D)``, potentials ``(C,)`` (float64) and gradients ``(C, D)``.
    eps : float
        Step size, shared by the chains.
    minv : Tensor
        Diagonal inverse mass matrix, ``(D,)`` (shared) or ``(C, D)``.
    n_steps : int
        Leapfrog steps, at least 1.
    noise : Tensor
        ``(C, D)`` standard normal draws (the momenta before scaling).
    log_uniform : Tensor
        ``(C,)`` logarithms of uniform draws (the Metropolis tests).

    Returns
    -------
    z, u, g : Tensor
        The new states, potentials (float64) and gradients.
    info : ChEESInfo
    """
    if n_steps < 1:
        raise ValueError(f"n_steps={n_steps} must be >= 1")
    eps = float(eps)
    minv = minv.to(z.dtype)
    r = noise.to(z.dtype) * minv.rsqrt()
    h0 = u.to(torch.float64) + _kinetic(r, minv)
    half = 0.5 * eps
    step = eps * minv
    # Two buffers per transition, updated in place (the same elementwise kernels as the
    # out-of-place ops: bitwise the same numbers); inner steps ask for the gradient only.
    grad = getattr(pot, "grad_batch", None) or (lambda x: pot.value_and_grad_batch(x)[1])
    r1 = torch.add(r, g, alpha=-half)
    z1 = torch.addcmul(z, step, r1)
    for _ in range(n_steps - 1):
        r1.add_(grad(z1), alpha=-eps)
        z1.addcmul_(step, r1)
    u1, g1 = pot.value_and_grad_batch(z1)
    r1.add_(g1, alpha=-half)
    u1 = u1.to(torch.float64)
    v1 = minv * r1
    h1 = u1 + 0.5 * (r1 * v1).sum(1).to(torch.float64)
    dh = h1 - h0
    finite = torch.isfinite(dh)
    diverging = ~finite | (dh > MAX_ENERGY_ERROR)
    acc = torch.where(finite, torch.exp(torch.clamp(-dh, max=0.0)), 0.0)
    accept = (log_uniform.to(torch.float64) < -dh) & ~diverging
    a2 = accept.unsqueeze(1)
    info = ChEESInfo(z1, v1, acc, accept, diverging, torch.where(accept, h1, h0), n_steps)
    return (
        torch.where(a2, z1, z),
        torch.where(accept, u1, u.to(torch.float64)),
        torch.where(a2, g1, g),
        info,
    )


def halton(i: int) -> float:
    """Element ``i + 1`` of the base-2 Halton (van der Corput) sequence, in ``(0, 1)``.

    The radical inverse of ``i + 1``: 0.5, 0.25, 0.75, 0.125, ... (BlackJAX's
    ``halton_sequence(i)`` without its bit limit).
    """
    n, f, x = i + 1, 0.5, 0.0
    while n:
        x += f * (n & 1)
        n >>= 1
        f *= 0.5
    return x


def num_steps(
    jitter: float, log_trajectory_length: float, log_step_size: float, max_leapfrog: int
) -> int:
    """:math:`\\min(\\max(\\lceil u T / \\epsilon \\rceil, 1), L_{\\max})` from logs (no 0/0)."""
    ratio = math.exp(min(log_trajectory_length - log_step_size, math.log(max_leapfrog)))
    return min(max(math.ceil(jitter * ratio), 1), max_leapfrog)
