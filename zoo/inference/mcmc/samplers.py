"""The samplers by name: NUTS, HMC, ChEES-HMC, MCLMC and MAMS over a flat potential.

:data:`BATCHED` maps a name to the batched kernel factory that
:class:`~zoo.inference.mcmc.windowed.WindowedProgram` runs under Stan's window adaptation in
the one loop (:func:`~zoo.inference.mcmc.loop.sample`); a new batched kernel is one module
(its ``transition(pot, metric, p, eps, rngs)``) plus one entry here. ChEES-HMC has its own
adaptation (:class:`~zoo.inference.mcmc.chees_hmc.ChEESProgram`) in the same loop, and so
have MCLMC (:class:`~zoo.inference.mcmc.microcanonical.MCLMCProgram`, :func:`run_mclmc`)
and adjusted MCLMC (:class:`~zoo.inference.mcmc.microcanonical.MAMSProgram`, :func:`run_mams`).

:func:`run_nuts` and :func:`run_hmc` run the chains as one batch with ``vectorize_chains``
(diagonal mass matrix) and otherwise one after another on the one-chain Pyro reference path
(:func:`~zoo.inference.mcmc.sequential.run_sequential`: Pyro's ``WarmupAdapter``, any mass
matrix). That path stays separate on purpose: for a diagonal mass matrix its numbers differ
from a batch of one chain by the rounding of ``value_and_grad`` against its batched version.
Why the transitions are ported rather than Pyro's ``NUTS`` subclassed: ``docs/notes/samplers.md``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch

from zoo.inference.checkpoint import CheckpointChannel
from zoo.inference.mcmc.batched import hmc_step_batch, nuts_step_batch
from zoo.inference.mcmc.chees_adaptation import ADAM_RESTART, LEARNING_RATE
from zoo.inference.mcmc.chees_hmc import ChEESProgram
from zoo.inference.mcmc.kernel import hmc_step, nuts_step
from zoo.inference.mcmc.loop import Until, sample
from zoo.inference.mcmc.mams import MAX_STEPS
from zoo.inference.mcmc.mams_adaptation import MAMS_TARGET_ACCEPT
from zoo.inference.mcmc.mclmc_adaptation import DESIRED_ENERGY_VAR
from zoo.inference.mcmc.microcanonical import MAMSProgram, MCLMCProgram
from zoo.inference.mcmc.potential import FlatPotential
from zoo.inference.mcmc.result import MCMCResult
from zoo.inference.mcmc.sequential import run_sequential
from zoo.inference.mcmc.windowed import Transition, WindowedProgram

__all__ = ["BATCHED", "run_batched", "run_chees", "run_hmc", "run_mams", "run_mclmc", "run_nuts"]


def _nuts(max_tree_depth: int) -> Transition:
    if max_tree_depth < 1:
        raise ValueError(f"max_tree_depth={max_tree_depth} must be >= 1")

    def transition(pot, metric, p, eps, rngs):
        q, stats = nuts_step_batch(pot, metric, p, eps, max_tree_depth, rngs)
        return q, _flag_max_depth(stats, max_tree_depth)

    return transition


def _flag_max_depth(stats: dict, max_tree_depth: int) -> dict:
    """Add ``reached_max_treedepth`` (the name ArviZ 1.x's ``diagnose`` reads): the
    transitions whose trajectory was cut by the cap, not ended by a U-turn."""
    stats["reached_max_treedepth"] = np.asarray(stats["tree_depth"]) >= max_tree_depth
    return stats


def _hmc(num_steps: int) -> Transition:
    if num_steps < 1:
        raise ValueError(f"num_steps={num_steps} must be >= 1")

    def transition(pot, metric, p, eps, rngs):
        return hmc_step_batch(pot, metric, p, eps, num_steps, rngs)

    return transition


#: Batched kernels under the window adaptation: ``name -> factory(**options) -> transition``.
BATCHED: dict[str, Callable[..., Transition]] = {"nuts": _nuts, "hmc": _hmc}


def run_batched(
    name: str,
    potential: FlatPotential,
    *,
    seed: int,
    warmup: int,
    draws: int,
    chains: int,
    target_accept: float,
    step_size: float | None,
    adapt_mass_matrix: bool,
    init: Mapping[str, torch.Tensor] | None = None,
    progress: bool = False,
    threads: int | None = 1,
    until: Until | None = None,
    max_draws: int | None = None,
    checkpoint: CheckpointChannel | None = None,
    **options,
) -> MCMCResult:
    """All ``chains`` of the kernel ``BATCHED[name](**options)`` as one batch, each with its
    own seed and window adaptation (:class:`~zoo.inference.mcmc.windowed.WindowedProgram`).

    ``threads``: torch's threads while sampling (one is fastest for the small operations of
    a few chains); the stopping rule and the other arguments as in
    :func:`~zoo.inference.mcmc.loop.sample`.
    """
    program = WindowedProgram(
        BATCHED[name](**options),
        name,
        seed=seed,
        warmup=warmup,
        target_accept=target_accept,
        step_size=step_size,
        adapt_mass_matrix=adapt_mass_matrix,
    )
    return sample(
        program,
        potential,
        warmup=warmup,
        draws=draws,
        chains=chains,
        target_accept=target_accept,
        init=init,
        until=until,
        max_draws=max_draws,
        progress=progress,
        threads=threads,
        checkpoint=checkpoint,
    )


def _run(
    name: str,
    transition: Callable,
    potential: FlatPotential,
    *,
    vectorize_chains: bool,
    mass_matrix: str,
    chains: int,
    until: Until | None,
    **kw,
) -> MCMCResult:
    if vectorize_chains and mass_matrix != "diag":
        raise ValueError(
            f"{name}: vectorize_chains=True supports only mass_matrix='diag', got "
            f"mass_matrix={mass_matrix!r}; use mass_matrix='diag' or vectorize_chains=False"
        )
    if until is not None and not (vectorize_chains and chains > 1):
        raise ValueError(
            f"{name}: a stopping rule (until=) extends all chains together; it needs "
            f"vectorize_chains=True and chains >= 2, got {vectorize_chains} and {chains}"
        )
    options = kw.pop("options")
    if vectorize_chains and chains > 1:
        return run_batched(name, potential, chains=chains, until=until, **kw, **options)
    kw.pop("max_draws", None)
    kw.pop("checkpoint", None)  # the one-chain Pyro path saves no state: it starts over
    return run_sequential(
        potential, transition(**options), name, chains=chains, mass_matrix=mass_matrix, **kw
    )


def run_nuts(
    potential: FlatPotential,
    *,
    seed: int,
    warmup: int,
    draws: int,
    chains: int,
    target_accept: float,
    max_tree_depth: int,
    step_size: float | None,
    mass_matrix: str,
    vectorize_chains: bool,
    init: Mapping[str, torch.Tensor] | None = None,
    progress: bool = False,
    threads: int | None = 1,
    max_draws: int | None = None,
    until: Until | None = None,
    checkpoint: CheckpointChannel | None = None,
) -> MCMCResult:
    """Sample ``potential`` with NUTS (Pyro's multinomial variant, Hoffman & Gelman 2014).

    Step size and mass matrix adapted (dual averaging, Stan's windows). ``mass_matrix``:
    ``"diag"``, ``"dense"`` or ``"block"`` (dense per layer; the one-chain path only).
    ``vectorize_chains`` (two chains or more): one batch, :func:`run_batched`; otherwise the
    one-chain Pyro reference path. ``until``/``max_draws``: the stopping rule of
    :func:`~zoo.inference.mcmc.loop.sample` (batched only).
    """

    def transition(max_tree_depth):
        def step(pot, metric, p, eps, rng):
            q, stats = nuts_step(pot, metric, p, eps, max_tree_depth, rng)
            return q, _flag_max_depth(stats, max_tree_depth)

        return step

    options = {"max_tree_depth": max_tree_depth}
    _nuts(max_tree_depth)  # checks the option
    return _run(
        "nuts",
        transition,
        potential,
        vectorize_chains=vectorize_chains,
        mass_matrix=mass_matrix,
        chains=chains,
        until=until,
        seed=seed,
        warmup=warmup,
        draws=draws,
        target_accept=target_accept,
        step_size=step_size,
        adapt_mass_matrix=True,
        init=init,
        progress=progress,
        threads=threads,
        max_draws=max_draws,
        checkpoint=checkpoint,
        options=options,
    )


def run_hmc(
    potential: FlatPotential,
    *,
    seed: int,
    warmup: int,
    draws: int,
    chains: int,
    target_accept: float,
    num_steps: int,
    adapt_mass_matrix: bool,
    step_size: float | None,
    mass_matrix: str,
    vectorize_chains: bool,
    init: Mapping[str, torch.Tensor] | None = None,
    progress: bool = False,
    threads: int | None = 1,
    max_draws: int | None = None,
    until: Until | None = None,
    checkpoint: CheckpointChannel | None = None,
) -> MCMCResult:
    """Sample ``potential`` with HMC: ``num_steps`` leapfrog steps per draw (hamiltorch's
    fixed number of steps), dual-averaging step size, the mass matrix when
    ``adapt_mass_matrix``. Other arguments as in :func:`run_nuts`; no ``tree_depth``."""

    def transition(num_steps):
        def step(pot, metric, p, eps, rng):
            return hmc_step(pot, metric, p, eps, num_steps, rng)

        return step

    _hmc(num_steps)
    return _run(
        "hmc",
        transition,
        potential,
        vectorize_chains=vectorize_chains,
        mass_matrix=mass_matrix,
        chains=chains,
        until=until,
        seed=seed,
        warmup=warmup,
        draws=draws,
        target_accept=target_accept,
        step_size=step_size,
        adapt_mass_matrix=adapt_mass_matrix,
        init=init,
        progress=progress,
        threads=threads,
        max_draws=max_draws,
        checkpoint=checkpoint,
        options={"num_steps": num_steps},
    )


def run_chees(
    potential: FlatPotential,
    *,
    seed: int,
    warmup: int,
    draws: int,
    chains: int,
    target_accept: float,
    max_leapfrog: int,
    step_size: float | None,
    init: Mapping[str, torch.Tensor] | None = None,
    progress: bool = False,
    threads: int | None = 1,
    keep: int | None = None,
    on_draw: Callable[[torch.Tensor], None] | None = None,
    until: Until | None = None,
    max_draws: int | None = None,
    adapt_mass_matrix: bool = True,
    trajectory_length: float | None = None,
    learning_rate: float = LEARNING_RATE,
    adam_restart: int | None = ADAM_RESTART,
    checkpoint: CheckpointChannel | None = None,
    carry: Mapping[str, Any] | None = None,
) -> MCMCResult:
    """Sample ``potential`` with ChEES-HMC, all chains as one batch on its device
    (:class:`~zoo.inference.mcmc.chees_hmc.ChEESProgram`, arguments as there and in
    :func:`~zoo.inference.mcmc.loop.sample`). ``init``: constrained values per site, with
    the site's shape (all chains start there) or a leading dimension of ``chains``; None:
    each chain its own prior draw. ``checkpoint`` and ``carry``: saved and resumed state
    (:mod:`zoo.inference.checkpoint`)."""
    program = ChEESProgram(
        seed=seed,
        warmup=warmup,
        target_accept=target_accept,
        step_size=step_size,
        max_leapfrog=max_leapfrog,
        adapt_mass_matrix=adapt_mass_matrix,
        trajectory_length=trajectory_length,
        learning_rate=learning_rate,
        adam_restart=adam_restart,
    )
    return sample(
        program,
        potential,
        warmup=warmup,
        draws=draws,
        chains=chains,
        target_accept=target_accept,
        init=init,
        keep=keep,
        on_draw=on_draw,
        until=until,
        max_draws=max_draws,
        progress=progress,
        threads=threads,
        checkpoint=checkpoint,
        carry=carry,
    )


def run_mclmc(
    potential: FlatPotential,
    *,
    seed: int,
    warmup: int,
    draws: int,
    chains: int,
    step_size: float | None,
    init: Mapping[str, torch.Tensor] | None = None,
    progress: bool = False,
    threads: int | None = 1,
    keep: int | None = None,
    until: Until | None = None,
    max_draws: int | None = None,
    adapt_mass_matrix: bool = True,
    desired_energy_var: float = DESIRED_ENERGY_VAR,
    target_accept: float = 0.5,
    vectorize_chains: bool = True,
    checkpoint: CheckpointChannel | None = None,
) -> MCMCResult:
    """Sample ``potential`` with MCLMC, all chains as one batch, each tuned on its own
    (:class:`~zoo.inference.mcmc.microcanonical.MCLMCProgram`, arguments as there and in
    :func:`~zoo.inference.mcmc.loop.sample`). MCLMC has no Metropolis test:
    ``target_accept`` is only the loop's argument check; ``vectorize_chains`` is accepted for
    the sampler methods' common call and always true."""
    program = MCLMCProgram(
        seed=seed,
        warmup=warmup,
        step_size=step_size,
        adapt_mass_matrix=adapt_mass_matrix,
        desired_energy_var=desired_energy_var,
    )
    return sample(
        program,
        potential,
        warmup=warmup,
        draws=draws,
        chains=chains,
        target_accept=target_accept,
        init=init,
        keep=keep,
        until=until,
        max_draws=max_draws,
        progress=progress,
        threads=threads,
        checkpoint=checkpoint,
    )


def run_mams(
    potential: FlatPotential,
    *,
    seed: int,
    warmup: int,
    draws: int,
    chains: int,
    step_size: float | None,
    target_accept: float = MAMS_TARGET_ACCEPT,
    init: Mapping[str, torch.Tensor] | None = None,
    progress: bool = False,
    threads: int | None = 1,
    keep: int | None = None,
    until: Until | None = None,
    max_draws: int | None = None,
    adapt_mass_matrix: bool = True,
    max_steps: int = MAX_STEPS,
    vectorize_chains: bool = True,
    checkpoint: CheckpointChannel | None = None,
) -> MCMCResult:
    """Sample ``potential`` with adjusted MCLMC (MAMS), all chains as one batch, each tuned
    on its own (:class:`~zoo.inference.mcmc.microcanonical.MAMSProgram`, arguments as there and in
    :func:`~zoo.inference.mcmc.loop.sample`); ``vectorize_chains`` as in :func:`run_mclmc`."""
    program = MAMSProgram(
        seed=seed,
        warmup=warmup,
        target_accept=target_accept,
        step_size=step_size,
        adapt_mass_matrix=adapt_mass_matrix,
        max_steps=max_steps,
    )
    return sample(
        program,
        potential,
        warmup=warmup,
        draws=draws,
        chains=chains,
        target_accept=target_accept,
        init=init,
        keep=keep,
        until=until,
        max_draws=max_draws,
        progress=progress,
        threads=threads,
        checkpoint=checkpoint,
    )
