"""Hoffman & Gelman's step-size search (2014, Algorithm 4): double or halve until one
leapfrog step crosses an acceptance threshold.

From :math:`\\epsilon`, draw momenta, take one leapfrog step and compare the acceptance with
0.8: the first comparison fixes the direction :math:`d = \\pm 1`, and :math:`\\epsilon
\\leftarrow 2^d \\epsilon` with fresh momenta until the comparison flips or :math:`\\epsilon`
leaves :math:`(10^{-10}, 10^{10})`; the result is clamped to that range (Pyro's
``HMC._find_reasonable_step_size``). Two forms, both kept for their numbers:

- :func:`find_reasonable_step_size`: one step size per chain (the window adaptation of the
  batched NUTS/HMC), each chain with its own generator and its own energy error, exactly as
  the one-chain search draws;
- :func:`find_shared_step_size`: one step size for all chains (ChEES), on the chains' mean
  acceptance probability, with one generator for the batch.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch

from zoo.inference.mcmc.batched import BatchMetric, BatchPoint
from zoo.inference.mcmc.chees import chees_transition
from zoo.inference.mcmc.potential import FlatPotential

__all__ = ["MAX_STEP_SIZE", "MIN_STEP_SIZE", "find_reasonable_step_size", "find_shared_step_size"]

#: Bounds of the step-size search (Pyro's).
MIN_STEP_SIZE, MAX_STEP_SIZE = 1e-10, 1e10


def find_reasonable_step_size(
    value_and_grad_batch: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]],
    leapfrog: Callable[[BatchPoint, torch.Tensor], BatchPoint],
    z: torch.Tensor,
    step_size: torch.Tensor,
    inverse_mass_matrix: torch.Tensor | Any,
    generators: Sequence[torch.Generator],
    active: torch.Tensor | None = None,
) -> torch.Tensor:
    """Double or halve each chain's step size until one leapfrog step crosses acceptance 0.8.

    Hoffman & Gelman (2014, Algorithm 4) as Pyro's ``HMC._find_reasonable_step_size``: from
    :math:`\\epsilon`, draw a momentum :math:`r \\sim N(0, M)`, take one leapfrog step and
    compare :math:`\\Delta = H(z, r) - H(z', r')` with :math:`\\log 0.8`; the first comparison
    fixes the direction :math:`d = \\pm 1`, and :math:`\\epsilon \\leftarrow 2^d \\epsilon`
    with a fresh momentum until the comparison flips or :math:`\\epsilon` leaves
    :math:`(10^{-10}, 10^{10})`; the result is clamped to that range. All chains try at once,
    one batched leapfrog step per round; a chain that has flipped is masked out (it draws no
    more momenta and its step size stays). Chain ``c`` draws its momenta from
    ``generators[c]`` as ``torch.randn(D, generator=generators[c])``, in the order the
    one-chain search draws them, so it ends with the step size and generator state of that
    search (up to the rounding of the batched energies, which could only matter for an energy
    error within rounding of :math:`\\log 0.8`).

    Parameters
    ----------
    value_and_grad_batch : callable
        ``z (C, D) -> (U (C,) float64, grad U (C, D))``, e.g.
        :meth:`~zoo.inference.mcmc.potential.FlatPotential.value_and_grad_batch`.
    leapfrog : callable
        ``(point, eps) -> point``: one leapfrog step of a :class:`BatchPoint` with signed step
        sizes ``eps`` of shape (C, 1), e.g. ``functools.partial(leapfrog_batch, pot,
        BatchMetric(inverse_mass_matrix))``.
    z : Tensor
        (C, D) positions.
    step_size : Tensor
        (C,) starting step sizes (float64).
    inverse_mass_matrix : Tensor or metric
        (C, D) diagonal inverse mass matrices (the ones ``leapfrog`` uses), or the metric
        itself (a :class:`BatchMetric` or
        :class:`~zoo.inference.mcmc.metrics.DenseBatchMetric`).
    generators : sequence of torch.Generator
        One per chain.
    active : Tensor, optional
        (C,) bool: the chains to search; the others keep ``step_size`` and draw nothing.

    Returns
    -------
    Tensor
        (C,) float64 step sizes.
    """
    c = z.shape[0]
    eps = step_size.to(torch.float64).clone()
    searching = torch.ones(c, dtype=torch.bool) if active is None else active.clone()
    searching &= (MIN_STEP_SIZE < eps) & (eps < MAX_STEP_SIZE)
    if bool(searching.any()):
        threshold = math.log(0.8)
        metric = (
            inverse_mass_matrix
            if hasattr(inverse_mass_matrix, "from_noise")
            else BatchMetric(inverse_mass_matrix)
        )
        u, g = value_and_grad_batch(z)
        direction = torch.zeros(c, dtype=torch.int64)  # 0: not yet fixed
        while bool(searching.any()):
            grow = searching & (direction != 0)
            eps = torch.where(grow, eps * torch.where(direction > 0, 2.0, 0.5).double(), eps)
            noise = torch.zeros_like(z)
            for i in searching.nonzero().flatten().tolist():
                noise[i] = torch.randn(z.shape[1], generator=generators[i], dtype=z.dtype)
            r = metric.from_noise(noise)
            v = metric.velocity(r)
            e0 = u + 0.5 * (r * v).sum(1).double()
            step = torch.where(searching, eps, 0.0).to(z.dtype).unsqueeze(1)
            q = leapfrog(BatchPoint(z, r, v, g, u, e0), step)
            new = torch.where(threshold < e0 - q.energy, 1, -1)
            direction = torch.where(searching & (direction == 0), new, direction)
            searching &= (new == direction) & (MIN_STEP_SIZE < eps) & (eps < MAX_STEP_SIZE)
    return eps.clamp(MIN_STEP_SIZE, MAX_STEP_SIZE)


def find_shared_step_size(
    pot: FlatPotential,
    z: torch.Tensor,
    u: torch.Tensor,
    g: torch.Tensor,
    minv: torch.Tensor,
    step_size: float,
    gen: torch.Generator,
    threshold: float = 0.8,
) -> float:
    """One step size for all chains: Hoffman & Gelman (2014), Algorithm 4, on the chains' mean.

    From ``step_size``, fresh momenta for all chains and one leapfrog step; the mean over
    chains of :math:`\\min(1, e^{-\\Delta H})` (0 where not finite) compared with
    ``threshold`` fixes a direction; the step size doubles (or halves) with fresh momenta
    until the comparison flips or it leaves :math:`(10^{-10}, 10^{10})`; that step size is
    returned (as Pyro's ``_find_reasonable_step_size`` returns it), clamped to the range.
    """
    c, d = z.shape
    eps, direction = float(step_size), 0
    zeros = torch.zeros(c, dtype=torch.float64, device=z.device)
    while MIN_STEP_SIZE < eps < MAX_STEP_SIZE:
        noise = torch.randn(c, d, generator=gen, dtype=z.dtype, device=z.device)
        info = chees_transition(pot, z, u, g, eps, minv, 1, noise, zeros)[3]
        new = 1 if float(info.acceptance_rate.mean()) > threshold else -1
        if direction == 0:
            direction = new
        elif new != direction:
            break
        eps *= 2.0**direction
    return min(max(eps, MIN_STEP_SIZE), MAX_STEP_SIZE)
