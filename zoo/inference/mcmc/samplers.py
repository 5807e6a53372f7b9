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

A spec's sampler section is its settings (:mod:`~zoo.inference.mcmc.programs`:
:func:`program_for` and :func:`run_method`, re-exported here). The keyword functions here
(``run_nuts`` ...) serve code without a spec (tests, benchmarks, the ground-truth
simulation); a setting they leave out takes the schema's default, so every default lives in
the schema.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from zoo.inference.checkpoint import CheckpointChannel
from zoo.inference.mcmc.chees_adaptation import ADAM_RESTART, LEARNING_RATE
from zoo.inference.mcmc.loop import Until, sample
from zoo.inference.mcmc.potential import FlatPotential
from zoo.inference.mcmc.programs import (
    BATCHED,
    PROGRAMS,
    chees_program,
    default_of,
    program_for,
    run_method,
)
from zoo.inference.mcmc.result import MCMCResult
from zoo.inference.mcmc.windowed import WindowedProgram
from zoo.spec.sections.samplers import (
    ChEESMethod,
    MAMSMethod,
    MCLMCMethod,
    NUTSMethod,
    mass_matrix_problem,
)

__all__ = [
    "BATCHED",
    "PROGRAMS",
    "default_of",
    "program_for",
    "run_batched",
    "run_chees",
    "run_hmc",
    "run_mams",
    "run_mclmc",
    "run_method",
    "run_nuts",
]


class _Settings:
    """A sampler's settings given as keywords (code without a spec): the fields
    :func:`program_for` reads."""

    symmetry_moves: str = default_of(ChEESMethod, "symmetry_moves")

    def __init__(self, kind: str, **fields: Any) -> None:
        self.kind = kind
        self.__dict__.update(fields)


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
    kernel = BATCHED[name](**options)
    program = WindowedProgram(
        kernel.transition,
        name,
        trajectory_cap=kernel.trajectory_cap,
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


def _per_chain(
    kind: str,
    potential: FlatPotential,
    settings: dict[str, Any],
    *,
    mass_matrix: str,
    vectorize_chains: bool,
    seed: int,
    **loop: Any,
) -> MCMCResult:
    """NUTS or HMC of keyword ``settings`` through :func:`run_method`, after the checks of
    the keywords a section's validation makes."""
    problem = mass_matrix_problem(mass_matrix, vectorize_chains, settings["chains"])
    if problem is not None:
        raise ValueError(f"{kind}: {problem}")
    settings = {"min_trajectory": default_of(NUTSMethod, "min_trajectory"), **settings}
    method = _Settings(kind, mass_matrix=mass_matrix, vectorize_chains=vectorize_chains, **settings)
    return run_method(method, potential, seed=seed, **loop)


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
    ``"diag"``, ``"dense"``, ``"block"`` (dense per layer; the one-chain path only) or, batched
    only, ``"fisher_diag"`` and ``"fisher_low_rank"``; batched, ``dense`` and the Fisher
    metrics are pooled over the chains (:mod:`~zoo.inference.mcmc.metrics`).
    ``vectorize_chains`` (two chains or more): one batch, :func:`run_batched`; otherwise the
    one-chain Pyro reference path. ``until``/``max_draws``: the stopping rule of
    :func:`~zoo.inference.mcmc.loop.sample` (batched only).
    """
    BATCHED["nuts"](max_tree_depth)  # checks the option
    return _per_chain(
        "nuts",
        potential,
        dict(
            warmup=warmup,
            draws=draws,
            chains=chains,
            target_accept=target_accept,
            step_size=step_size,
            max_tree_depth=max_tree_depth,
        ),
        mass_matrix=mass_matrix,
        vectorize_chains=vectorize_chains,
        seed=seed,
        init=init,
        progress=progress,
        threads=threads,
        max_draws=max_draws,
        until=until,
        checkpoint=checkpoint,
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
    BATCHED["hmc"](num_steps)  # checks the option
    return _per_chain(
        "hmc",
        potential,
        dict(
            warmup=warmup,
            draws=draws,
            chains=chains,
            target_accept=target_accept,
            step_size=step_size,
            num_steps=num_steps,
            adapt_mass_matrix=adapt_mass_matrix,
        ),
        mass_matrix=mass_matrix,
        vectorize_chains=vectorize_chains,
        seed=seed,
        init=init,
        progress=progress,
        threads=threads,
        max_draws=max_draws,
        until=until,
        checkpoint=checkpoint,
    )


def run_chees(
    potential: FlatPotential,
    *,
    seed: int,
    warmup: int,
    draws: int,
    chains: int,
    target_accept: float = default_of(ChEESMethod, "target_accept"),
    max_leapfrog: int = default_of(ChEESMethod, "max_leapfrog"),
    step_size: float | None = default_of(ChEESMethod, "step_size"),
    min_trajectory: float | str | None = default_of(ChEESMethod, "min_trajectory"),
    adapt_mass_matrix: bool = True,
    trajectory_length: float | None = None,
    learning_rate: float = LEARNING_RATE,
    adam_restart: int | None = ADAM_RESTART,
    **loop: Any,
) -> MCMCResult:
    """Sample ``potential`` with ChEES-HMC, all chains as one batch on its device
    (:class:`~zoo.inference.mcmc.chees_hmc.ChEESProgram`; the settings default as the
    schema's ``chees``, ``loop`` as :func:`run_method`'s: ``init`` constrained values per
    site, with the site's shape (all chains start there) or a leading dimension of
    ``chains``, None each chain its own prior draw; ``keep``, ``on_draw``, ``until``,
    ``max_draws``; ``checkpoint`` and ``carry``, saved and resumed state,
    :mod:`zoo.inference.checkpoint`). ``adapt_mass_matrix``, ``trajectory_length``,
    ``learning_rate`` and ``adam_restart`` (not settings of the spec) are for experiments
    (:func:`~zoo.inference.mcmc.programs.chees_program`)."""
    method = _Settings(
        "chees",
        warmup=warmup,
        draws=draws,
        chains=chains,
        target_accept=target_accept,
        step_size=step_size,
        max_leapfrog=max_leapfrog,
        min_trajectory=min_trajectory,
    )
    program = chees_program(
        method,
        seed,
        adapt_mass_matrix=adapt_mass_matrix,
        trajectory_length=trajectory_length,
        learning_rate=learning_rate,
        adam_restart=adam_restart,
    )
    return run_method(method, potential, seed=seed, program=program, **loop)


def run_mclmc(
    potential: FlatPotential,
    *,
    seed: int,
    warmup: int,
    draws: int,
    chains: int,
    step_size: float | None = default_of(MCLMCMethod, "step_size"),
    adapt_mass_matrix: bool = default_of(MCLMCMethod, "adapt_mass_matrix"),
    desired_energy_var: float = default_of(MCLMCMethod, "desired_energy_var"),
    **loop: Any,
) -> MCMCResult:
    """Sample ``potential`` with MCLMC, all chains as one batch, each tuned on its own
    (:class:`~zoo.inference.mcmc.microcanonical.MCLMCProgram`; the settings default as the
    schema's ``mclmc``, ``loop`` as :func:`run_method`'s)."""
    method = _Settings(
        "mclmc",
        warmup=warmup,
        draws=draws,
        chains=chains,
        step_size=step_size,
        adapt_mass_matrix=adapt_mass_matrix,
        desired_energy_var=desired_energy_var,
        target_accept=MCLMCMethod.target_accept,  # no Metropolis test: the loop's check only
    )
    return run_method(method, potential, seed=seed, **loop)


def run_mams(
    potential: FlatPotential,
    *,
    seed: int,
    warmup: int,
    draws: int,
    chains: int,
    step_size: float | None = default_of(MAMSMethod, "step_size"),
    target_accept: float = default_of(MAMSMethod, "target_accept"),
    adapt_mass_matrix: bool = default_of(MAMSMethod, "adapt_mass_matrix"),
    max_steps: int = default_of(MAMSMethod, "max_steps"),
    **loop: Any,
) -> MCMCResult:
    """Sample ``potential`` with adjusted MCLMC (MAMS), all chains as one batch, each tuned
    on its own (:class:`~zoo.inference.mcmc.microcanonical.MAMSProgram`; the settings
    default as the schema's ``mams``, ``loop`` as :func:`run_method`'s)."""
    method = _Settings(
        "mams",
        warmup=warmup,
        draws=draws,
        chains=chains,
        step_size=step_size,
        target_accept=target_accept,
        adapt_mass_matrix=adapt_mass_matrix,
        max_steps=max_steps,
    )
    return run_method(method, potential, seed=seed, **loop)
