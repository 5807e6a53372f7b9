"""The typed result of a sampler run: the kept draws, their statistics and what was adapted."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import torch

__all__ = ["Adapted", "MCMCResult", "result"]


class Adapted(NamedTuple):
    """What a run adapted during its warm-up (and then sampled with)."""

    step_size: np.ndarray
    """(C,) float64: each chain's step size (ChEES: one value, repeated)."""
    inverse_mass_matrix: np.ndarray | None
    """Diagonal inverse mass matrix: (C, D) per chain or (D,) shared; None where the run
    does not report it (the one-chain path's dense and block matrices)."""
    trajectory_length: float | None = None
    """ChEES's adapted trajectory length :math:`T`; None for the other samplers."""
    trajectory_steps: np.ndarray | None = None
    r"""(C,) the adapted mean trajectory in the kernel's own steps, what its cap bounds:
    ChEES's :math:`T/\epsilon` (one value, repeated), MAMS's :math:`L/\epsilon` per chain;
    None where no trajectory length is adapted (NUTS, HMC, MCLMC)."""

    def steps(self) -> np.ndarray | None:
        r""":attr:`trajectory_steps`, or ChEES's :math:`T/\epsilon` from a checkpoint saved
        before the field was (only :math:`T` and :math:`\epsilon` there)."""
        if self.trajectory_steps is not None or self.trajectory_length is None:
            return self.trajectory_steps
        eps = float(self.step_size[0])
        return np.full(len(self.step_size), float(self.trajectory_length) / eps)


@dataclass(frozen=True)
class MCMCResult:
    """Result of a sampler run.

    Attributes
    ----------
    draws : dict of str to ndarray
        Constrained kept draws per site, shape ``(chain, draw, *site_shape)``.
    sample_stats : dict of str to ndarray
        Per-draw statistics of the kept draws, ``(chain, draw)``, named as arviz-base's
        NumPyro converter names them: ``lp`` (``-U``, the log density in unconstrained
        space), ``step_size``, ``n_steps`` (leapfrog steps), ``tree_depth`` (NUTS),
        ``diverging``, ``energy`` (Hamiltonian of the draw with its momentum) and
        ``acceptance_rate``.
    adapted : Adapted
        What the warm-up adapted.
    seconds, warmup_seconds : float
        Wall time of the whole run and of its warm-up.
    site_slices : dict of str to slice
        Where each site sits in the flat vectors of :meth:`flat_draws`.
    flat : ndarray
        Kept unconstrained draws ``(chain, draw, D)``.
    drawn : int
        Draws per chain after warm-up (more than kept when thinned; more than asked under a
        stopping rule).
    kept_index : tuple of int
        The post-warm-up indices of the kept draws.
    thin : int
        The final stride of the thinning (1: every draw kept).
    divergences, warmup_divergences : int
        Divergent transitions of all chains after and during warm-up (all drawn, not only
        the kept ones; the one-chain path reports the kept ones and 0).
    n_steps_mean : float
        Leapfrog steps per transition after warm-up, over all drawn.
    init : str
        How the chains started: ``"prior"``, ``"shared"`` or ``"per chain"``.
    trajectory_cap : int, optional
        The cap on one trajectory, in the kernel's own unit: NUTS's ``max_tree_depth``,
        ChEES's ``max_leapfrog`` steps, MAMS's ``max_steps``; None where a trajectory has no
        cap it could want past (HMC's fixed steps, MCLMC's one step per draw).
    saturated : int
        Post-warm-up transitions of all chains (all drawn) cut at ``trajectory_cap``.
    facts : dict of str to number
        What the program records of its own run beyond these (a tempering ladder's swap
        rate and round trips: :meth:`~zoo.inference.mcmc.tempering.TemperedProgram.facts`);
        empty for the others.
    """

    draws: dict[str, np.ndarray]
    sample_stats: dict[str, np.ndarray]
    adapted: Adapted
    seconds: float
    warmup_seconds: float
    site_slices: dict[str, slice]
    flat: np.ndarray = field(repr=False)
    drawn: int = 0
    kept_index: tuple[int, ...] = ()
    thin: int = 1
    divergences: int = 0
    warmup_divergences: int = 0
    n_steps_mean: float = math.nan
    init: str = "prior"
    trajectory_cap: int | None = None
    saturated: int = 0
    facts: dict[str, Any] = field(default_factory=dict)

    @property
    def chains(self) -> int:
        """Number of chains."""
        return int(self.flat.shape[0])

    @property
    def kept(self) -> int:
        """Draws held per chain."""
        return int(self.flat.shape[1])

    @property
    def n_divergent(self) -> int:
        """Divergent transitions after warm-up, over all chains."""
        return int(self.divergences)

    def flat_draws(self) -> np.ndarray:
        """Unconstrained flat draws, shape ``(chain * draw, D)`` (``noise`` as its log)."""
        return self.flat.reshape(-1, self.flat.shape[-1])


def result(
    pot: Any, flat: torch.Tensor, stats: dict, seconds: float, t_warm: float, **kw
) -> MCMCResult:
    """The MCMCResult of flat draws ``(chain, draw, D)`` and stats ``(chain, draw)``."""
    with torch.no_grad():
        draws = {k: v.numpy() for k, v in pot.unravel(flat).items()}
    return MCMCResult(
        draws,
        stats,
        seconds=seconds,
        warmup_seconds=t_warm,
        site_slices=dict(pot.site_slices),
        flat=flat.numpy(),
        **kw,
    )
