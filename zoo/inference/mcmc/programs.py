"""The spec's sampler sections as programs: where a section's fields become its kernel's.

A spec's sampler section is its settings, as :func:`zoo.inference.svi.fit_svi` takes its
method: :func:`program_for` builds a method's program from its frozen section
(:data:`PROGRAMS`, one entry per kernel, the only place a section's fields are read) and
:func:`run_method` runs it in the loop (:func:`~zoo.inference.mcmc.loop.sample`), or, for
NUTS and HMC without ``vectorize_chains``, one chain after another on the one-chain Pyro
path (:func:`~zoo.inference.mcmc.sequential.run_sequential`). :data:`BATCHED` maps a name to
the batched kernel that :class:`~zoo.inference.mcmc.windowed.WindowedProgram` runs under
Stan's window adaptation. Every default lives in the schema (:func:`default_of` reads it for
the keyword functions of :mod:`~zoo.inference.mcmc.samplers`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import numpy as np
import torch

from zoo.inference.checkpoint import CheckpointChannel
from zoo.inference.mcmc.batched import hmc_step_batch, nuts_step_batch
from zoo.inference.mcmc.chees_adaptation import ADAM_RESTART, LEARNING_RATE
from zoo.inference.mcmc.chees_hmc import ChEESProgram
from zoo.inference.mcmc.kernel import hmc_step, nuts_step
from zoo.inference.mcmc.loop import Program, Until, sample
from zoo.inference.mcmc.metrics import POOLED
from zoo.inference.mcmc.microcanonical import MAMSProgram, MCLMCProgram
from zoo.inference.mcmc.potential import FlatPotential
from zoo.inference.mcmc.result import MCMCResult
from zoo.inference.mcmc.sequential import run_sequential
from zoo.inference.mcmc.symmetry import symmetry_move
from zoo.inference.mcmc.tempering import TemperedProgram
from zoo.inference.mcmc.trajectory_floor import floor_time, min_leapfrog_steps, min_tree_depth
from zoo.inference.mcmc.windowed import Transition, WindowedProgram

__all__ = [
    "BATCHED",
    "PROGRAMS",
    "BatchedKernel",
    "chees_program",
    "default_of",
    "program_for",
    "run_method",
]


def default_of(section: type, field: str) -> Any:
    """The schema's default of a section's field (the one place a sampler default lives)."""
    return section.model_fields[field].default


class BatchedKernel(NamedTuple):
    """A batched transition and its cap, as :class:`WindowedProgram` runs them."""

    transition: Transition
    trajectory_cap: int | None
    """NUTS's ``max_tree_depth`` (its transitions flag ``reached_max_treedepth``); None."""


def _nuts(max_tree_depth: int, min_trajectory: float | str | None = None) -> BatchedKernel:
    """Batched NUTS; ``min_trajectory``: a floor on its trajectories
    (:mod:`~zoo.inference.mcmc.trajectory_floor`), None: none."""
    if max_tree_depth < 1:
        raise ValueError(f"max_tree_depth={max_tree_depth} must be >= 1")

    def transition(pot, metric, p, eps, rngs):
        floor = None
        if min_trajectory is not None:
            time = floor_time(min_trajectory, pot, metric, len(rngs))
            floor = min_tree_depth(time, eps, max_tree_depth)
        q, stats = nuts_step_batch(pot, metric, p, eps, max_tree_depth, rngs, floor)
        return q, _flag_max_depth(stats, max_tree_depth)

    return BatchedKernel(transition, max_tree_depth)


def _flag_max_depth(stats: dict, max_tree_depth: int) -> dict:
    """Add ``reached_max_treedepth`` (the name ArviZ 1.x's ``diagnose`` reads): the
    transitions whose trajectory was cut by the cap, not ended by a U-turn."""
    stats["reached_max_treedepth"] = np.asarray(stats["tree_depth"]) >= max_tree_depth
    return stats


def _hmc(num_steps: int, min_trajectory: float | str | None = None) -> BatchedKernel:
    """Batched HMC of ``num_steps`` leapfrog steps, or more where ``min_trajectory``
    (:mod:`~zoo.inference.mcmc.trajectory_floor`) asks for a longer trajectory."""
    if num_steps < 1:
        raise ValueError(f"num_steps={num_steps} must be >= 1")

    def transition(pot, metric, p, eps, rngs):
        steps = num_steps
        if min_trajectory is not None:
            time = floor_time(min_trajectory, pot, metric, len(rngs))
            steps = max(steps, min_leapfrog_steps(time, eps))
        return hmc_step_batch(pot, metric, p, eps, steps, rngs)

    return BatchedKernel(transition, None)  # a fixed number of steps: nothing is cut


#: Batched kernels under the window adaptation: ``name -> factory(**options) -> kernel``.
BATCHED: dict[str, Callable[..., BatchedKernel]] = {"nuts": _nuts, "hmc": _hmc}


def _windowed(method: Any, seed: int) -> WindowedProgram:
    """NUTS or HMC (``method.kind``) under the window adaptation, from its section."""
    floor = method.min_trajectory
    if method.kind == "nuts":
        kernel, adapt_mass_matrix = _nuts(method.max_tree_depth, floor), True
    else:
        kernel, adapt_mass_matrix = _hmc(method.num_steps, floor), method.adapt_mass_matrix
    pooled = method.mass_matrix if method.mass_matrix in POOLED else None
    settings = dict(
        trajectory_cap=kernel.trajectory_cap,
        seed=seed,
        warmup=method.warmup,
        target_accept=method.target_accept,
        step_size=method.step_size,
        adapt_mass_matrix=adapt_mass_matrix,
        pooled=pooled,
    )
    tempering = getattr(method, "tempering", None)
    if tempering is None:
        return WindowedProgram(kernel.transition, method.kind, **settings)
    return TemperedProgram(
        kernel.transition,
        method.kind,
        rungs=tempering.rungs,
        beta_min=tempering.beta_min,
        **settings,
    )


def chees_program(
    method: Any,
    seed: int,
    *,
    adapt_mass_matrix: bool = True,
    trajectory_length: float | None = None,
    learning_rate: float = LEARNING_RATE,
    adam_restart: int | None = ADAM_RESTART,
) -> ChEESProgram:
    """ChEES-HMC from its section; the keywords, not settings of the spec, are for
    experiments (:func:`~zoo.inference.mcmc.samplers.run_chees`): by default a diagonal mass
    matrix, :math:`T` from one step, Adam's rate and restart of
    :mod:`~zoo.inference.mcmc.chees_adaptation`."""
    return ChEESProgram(
        seed=seed,
        warmup=method.warmup,
        target_accept=method.target_accept,
        step_size=method.step_size,
        max_leapfrog=method.max_leapfrog,
        adapt_mass_matrix=adapt_mass_matrix,
        trajectory_length=trajectory_length,
        learning_rate=learning_rate,
        adam_restart=adam_restart,
        min_trajectory=method.min_trajectory,
    )


def _mclmc(method: Any, seed: int) -> MCLMCProgram:
    """MCLMC from its section."""
    return MCLMCProgram(
        seed=seed,
        warmup=method.warmup,
        step_size=method.step_size,
        adapt_mass_matrix=method.adapt_mass_matrix,
        desired_energy_var=method.desired_energy_var,
    )


def _mams(method: Any, seed: int) -> MAMSProgram:
    """MAMS from its section."""
    return MAMSProgram(
        seed=seed,
        warmup=method.warmup,
        target_accept=method.target_accept,
        step_size=method.step_size,
        adapt_mass_matrix=method.adapt_mass_matrix,
        max_steps=method.max_steps,
    )


#: Sampler kind -> ``build(section, seed) -> Program``: where a section's fields become its
#: kernel's and adaptation's settings (a new sampler: its section and one entry here).
PROGRAMS: dict[str, Callable[[Any, int], Program]] = {
    "nuts": _windowed,
    "hmc": _windowed,
    "chees": chees_program,
    "mclmc": _mclmc,
    "mams": _mams,
}


def program_for(method: Any, seed: int) -> Program:
    """The batched program of sampler section ``method`` (a frozen spec section of
    :mod:`zoo.spec.sections.samplers`, or anything with its fields) seeded with ``seed``."""
    return PROGRAMS[method.kind](method, seed)


def _one_chain_path(method: Any) -> bool:
    """NUTS and HMC run one chain after another unless ``vectorize_chains`` and two chains
    or more (the other samplers always run as one batch)."""
    return method.kind in BATCHED and not (method.vectorize_chains and method.chains > 1)


def _sequential(method: Any, potential: FlatPotential, seed: int, **kw) -> MCMCResult:
    """``method`` (NUTS or HMC) on the one-chain Pyro path, any mass matrix."""
    if method.kind == "nuts":
        depth = method.max_tree_depth

        def transition(pot, metric, p, eps, rng):
            q, stats = nuts_step(pot, metric, p, eps, depth, rng)
            return q, _flag_max_depth(stats, depth)

        mass_matrix, adapt, cap = method.mass_matrix, True, depth
    else:
        steps = method.num_steps

        def transition(pot, metric, p, eps, rng):
            return hmc_step(pot, metric, p, eps, steps, rng)

        # the hmc section adapts a diagonal matrix; the keyword run_hmc may name another
        mass_matrix, adapt = getattr(method, "mass_matrix", "diag"), method.adapt_mass_matrix
        cap = None
    res = run_sequential(
        potential,
        transition,
        method.kind,
        seed=seed,
        warmup=method.warmup,
        draws=method.draws,
        chains=method.chains,
        target_accept=method.target_accept,
        step_size=method.step_size,
        mass_matrix=mass_matrix,
        adapt_mass_matrix=adapt,
        **kw,
    )
    cut = 0 if cap is None else int(np.count_nonzero(res.sample_stats["reached_max_treedepth"]))
    return dataclasses.replace(res, trajectory_cap=cap, saturated=cut)


def run_method(
    method: Any,
    potential: FlatPotential,
    *,
    seed: int,
    init: Mapping[str, torch.Tensor] | None = None,
    progress: bool = False,
    threads: int | None = 1,
    keep: int | None = None,
    on_draw: Callable[[torch.Tensor], None] | None = None,
    until: Until | None = None,
    max_draws: int | None = None,
    checkpoint: CheckpointChannel | None = None,
    carry: Mapping[str, Any] | None = None,
    program: Program | None = None,
) -> MCMCResult:
    """Sample ``potential`` with the sampler of section ``method`` (:func:`program_for`).

    The section's settings are the sampler's; the other arguments are the loop's
    (:func:`~zoo.inference.mcmc.loop.sample`). NUTS and HMC without ``vectorize_chains`` (or
    with one chain) take the one-chain Pyro path, which saves no checkpoint (it starts over)
    and has no stopping rule. ``program``: one built with settings beyond the section's
    (:func:`chees_program`'s experiments); None: :func:`program_for`'s. The section's
    ``symmetry_moves`` (not ``off``) adds the exact moves of
    :func:`~zoo.inference.mcmc.symmetry.symmetry_move` after every transition (with
    ``tempering``, the tempered program moves every rung itself).
    """
    if _one_chain_path(method):
        if method.symmetry_moves != "off":
            raise ValueError(
                f"{method.kind}: symmetry_moves: {method.symmetry_moves} runs in the batched "
                f"loop; it needs vectorize_chains=True and chains >= 2, got "
                f"{method.vectorize_chains} and {method.chains}"
            )
        if until is not None:
            raise ValueError(
                f"{method.kind}: a stopping rule (until=) extends all chains together; it "
                f"needs vectorize_chains=True and chains >= 2, got {method.vectorize_chains} "
                f"and {method.chains}"
            )
        return _sequential(method, potential, seed, init=init, progress=progress, threads=threads)
    program = program_for(method, seed) if program is None else program
    move = symmetry_move(method.symmetry_moves, potential, seed)
    if isinstance(program, TemperedProgram):
        program.move, program.move_gen = move, None if move is None else move.gen
        move = None
    return sample(
        program,
        potential,
        warmup=method.warmup,
        draws=method.draws,
        chains=method.chains,
        target_accept=method.target_accept,
        init=init,
        keep=keep,
        on_draw=on_draw,
        until=until,
        max_draws=max_draws,
        progress=progress,
        threads=threads,
        checkpoint=checkpoint,
        carry=carry,
        move=move,
    )
