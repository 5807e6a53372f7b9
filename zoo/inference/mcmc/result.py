"""The result of the samplers and the helpers their paths share (seeding, checks, progress)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch

from zoo.inference.mcmc.potential import FlatPotential
from zoo.inference.progress import progress_bar as _progress_bar

# FlatPotential re-exported

__all__ = [
    "EXTEND_EVERY",
    "MCMCResult",
    "chain_rngs",
    "check_init",
    "collapsed",
    "progress_bar",
    "result",
]

#: With ``until``, the stopping rule is asked after every this many draws past ``draws``.
EXTEND_EVERY = 25


# --- object shell -------------------------------------------------------------------------


@dataclass(frozen=True)
class MCMCResult:
    """Result of :func:`run_nuts` / :func:`run_hmc`.

    Attributes
    ----------
    draws : dict of str to ndarray
        Constrained draws per site, shape ``(chain, draw, *site_shape)``.
    sample_stats : dict of str to ndarray
        Per-draw statistics, shape ``(chain, draw)``, named as arviz-base's NumPyro converter
        names them: ``lp`` (log density of the draw in unconstrained space, ``-U``; NumPyro
        stores ``U`` itself), ``step_size``, ``n_steps`` (leapfrog steps), ``tree_depth``
        (NUTS doublings; NUTS only), ``diverging``, ``energy`` (Hamiltonian of the draw with
        its momentum) and ``acceptance_rate`` (the adaptation statistic).
    settings : dict
        The sampler settings, plus the adapted ``step_size`` per chain.
    seconds, warmup_seconds : float
        Wall time of all chains, and the part of it spent in warm-up.
    site_slices : dict of str to slice
        Where each site sits in the flat vectors of :meth:`flat_draws`.
    """

    draws: dict[str, np.ndarray]
    sample_stats: dict[str, np.ndarray]
    settings: dict
    seconds: float
    warmup_seconds: float
    site_slices: dict[str, slice]
    flat: np.ndarray = field(repr=False)

    @property
    def n_divergent(self) -> int:
        """Number of divergent transitions after warm-up, over all chains."""
        return int(self.sample_stats["diverging"].sum())

    def flat_draws(self) -> np.ndarray:
        """Unconstrained flat draws, shape ``(chain * draw, D)`` (``noise`` as its log)."""
        return self.flat.reshape(-1, self.flat.shape[-1])


def chain_rngs(seed: int, chain: int) -> tuple[np.random.Generator, torch.Generator]:
    """Chain ``chain``'s generators: NumPy (directions, coins) and torch (momenta, prior)."""
    ss = np.random.SeedSequence([seed, chain])
    gen = torch.Generator().manual_seed(int(ss.generate_state(1, np.uint64)[0] >> 1))
    return np.random.default_rng(ss), gen


def collapsed(chain: int, eps: float, target_accept: float, blocks: list, warmup: int) -> None:
    """Raise when a chain's adapted step size is not a finite number above 1e-8."""
    if not (math.isfinite(eps) and eps > 1e-8):
        raise FloatingPointError(
            f"chain {chain}: the adapted step size collapsed to {eps:.3g} (target_accept"
            f"={target_accept}, mass matrix {blocks}, warmup={warmup}); start from a better "
            "point (init= the MF-VI posterior mean), warm up longer or lower target_accept"
        )


def result(
    pot: FlatPotential,
    flat: torch.Tensor,
    stats: dict,
    settings: dict,
    seconds: float,
    t_warm: float,
) -> MCMCResult:
    """The MCMCResult of flat draws ``(chain, draw, D)`` and stats ``(chain, draw)``."""
    with torch.no_grad():
        draws_c = {k: v.numpy() for k, v in pot.unravel(flat).items()}
    return MCMCResult(
        draws_c, stats, settings, seconds, t_warm, dict(pot.site_slices), flat.numpy()
    )


def check_init(pot: FlatPotential, z: torch.Tensor, where: str) -> None:
    u, g = pot.value_and_grad(z)
    if math.isfinite(u) and bool(torch.isfinite(g).all()):
        return
    bad = [n for n, s in pot.site_slices.items() if not bool(torch.isfinite(z[s]).all())]
    bad_g = [n for n, s in pot.site_slices.items() if not bool(torch.isfinite(g[s]).all())]
    raise FloatingPointError(
        f"the potential at the initial point ({where}) is {u}; non-finite values in sites "
        f"{bad}, non-finite gradients in sites {bad_g}; pass init= a finite point (e.g. the "
        "MF-VI posterior mean, guide.median()) and check x and y for NaN or inf"
    )


def progress_bar(total: int, desc: str, warmup: int = 0):
    """A bar of ``total`` draws, the first ``warmup`` of them warm-up."""
    return _progress_bar(total, desc, unit="draw", warmup=warmup)
