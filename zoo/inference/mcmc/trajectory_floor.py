r"""A floor on the trajectory length of batched NUTS and HMC (``min_trajectory``).

NUTS stops a trajectory at its first U-turn; where the posterior is a narrow ridge in some
directions and as wide as the prior in others, the U-turn in the narrow directions comes
long before the chain has crossed the wide ones, and the chain then diffuses along them.
Izmailov et al. (2021) ran HMC on Bayesian networks with the trajectory length
:math:`\tau = \pi s / 2` for a Gaussian prior :math:`N(0, s^2)`: a quarter of the period
:math:`2\pi s` of the prior's own oscillation under a unit metric, the time in which a
trajectory carries a chain from the prior's centre to its edge. The floor :math:`T` is
either that time (``prior``) or a number (in the units of ``step size x steps``).

Under an adapted metric :math:`M^{-1}` the chain moves in the coordinates it whitens, in
which a coordinate of inverse mass :math:`m_i` has the prior scale :math:`s/\sqrt{m_i}`;
``prior`` takes the widest direction the metric knows, :math:`T = \frac{\pi}{2}\,
s / \sqrt{\max_i m_i}` (:math:`\pi s / 2` under the unit metric of the first window; about
:math:`\pi/2` once a coordinate's posterior is as wide as its prior).

NUTS: the floor is a minimum tree depth, the least :math:`d` with :math:`(2^d - 1)
\epsilon \ge T` (at most ``max_tree_depth``), which
:func:`~zoo.inference.mcmc.batched.nuts_step_batch` honours by not letting subtrees below
that size stop the trajectory. HMC: at least :math:`\lceil T/\epsilon \rceil` leapfrog
steps (the most over the chains, so that all take the same number). ChEES: every
transition at least :math:`\lceil T/\epsilon \rceil` steps, whatever its jitter drew
(:class:`~zoo.inference.mcmc.chees_hmc.ChEESProgram`).

References
----------
Izmailov, P., Vikram, S., Hoffman, M. D. and Wilson, A. G. (2021). What are Bayesian
neural network posteriors really like? ICML, section 3 ("we set the trajectory length to
:math:`\pi\alpha_{prior}/2`").
"""

from __future__ import annotations

import math
from typing import Any

import torch

__all__ = ["PRIOR", "floor_time", "min_leapfrog_steps", "min_tree_depth"]

#: The ``min_trajectory`` that names Izmailov et al.'s length from the prior's scale.
PRIOR = "prior"


def floor_time(setting: float | str, pot: Any, metric: Any, chains: int) -> torch.Tensor:
    """The floor :math:`T` of each of ``chains`` chains ``(C,)`` float64 (module docstring).

    ``setting``: a number (the time itself) or :data:`PRIOR` (``pot.prior_scale()`` under
    ``metric``: a :class:`~zoo.inference.mcmc.batched.BatchMetric`, ``minv`` ``(C, D)``,
    or a :class:`~zoo.inference.mcmc.metrics.DenseBatchMetric`, ``minv`` ``(D, D)``).
    """
    if setting != PRIOR:
        return torch.full((chains,), float(setting), dtype=torch.float64)
    minv = metric.minv.detach().to("cpu", torch.float64)
    if hasattr(metric, "chol"):  # dense: one matrix for all chains
        widest = minv.diagonal().max().expand(chains)
    else:
        widest = minv.max(1).values
    return 0.5 * math.pi * pot.prior_scale() / widest.sqrt()


def min_tree_depth(time: torch.Tensor, eps: torch.Tensor, max_depth: int) -> torch.Tensor:
    """The least depth :math:`d` with :math:`(2^d - 1)\\epsilon \\ge T`, at most
    ``max_depth``, per chain (``time``, ``eps`` ``(C,)``)."""
    ratio = time.to(torch.float64).cpu() / eps.to(torch.float64).reshape(-1).cpu()
    depth = torch.log2(ratio + 1.0).ceil().clamp(0, max_depth)
    return depth.long().to(eps.device)


def min_leapfrog_steps(time: torch.Tensor, eps: torch.Tensor) -> int:
    """:math:`\\max_c \\lceil T_c / \\epsilon_c \\rceil`: one number of steps for all chains."""
    ratio = time.to(torch.float64).cpu() / eps.to(torch.float64).reshape(-1).cpu()
    return int(ratio.ceil().max())
