"""Markov chain Monte Carlo over a flat potential, in BlackJAX's shape.

One concept per module, in floors; a module imports only from the floors below its own
(``tests/zoo/inference/mcmc/test_folder_rule.py`` checks it):

1. **Targets and numerics** (import nothing of this folder but each other's types):
   :mod:`~.potential` (the model's flat batched log density, hand-written for MLPs),
   :mod:`~.replay` (its batched gradient by autograd's formulas, without the graph),
   :mod:`~.hand_backward` (the opt-in backward written out, autograd's values to rounding),
   :mod:`~.functional` (the same for any network, through ``torch.func``), :mod:`~.gaussian` (a
   Gaussian target), :mod:`~.dual_averaging`, :mod:`~.welford`, :mod:`~.result` (the typed
   result), :mod:`~.thinning` (the kept draws), :mod:`~.resume` (the loop's state, what a
   checkpoint saves of a run and how it resumes), :mod:`~.streaming` (running moments; uses :mod:`~.welford`), :mod:`~.ess` (each
   chain's effective sample size, weighted moments), :mod:`~.gig` (exact generalised inverse
   Gaussian draws), :mod:`~.nuts_record` (the host's side of a batched NUTS transition: its
   coins drawn ahead, its statistics from the tree's record), :mod:`~.nuts_tree` (a NUTS
   subtree's merges level by level for all chains at once).
2. **Kernels**, one per module, which know no adaptation and no loop: :mod:`~.kernel`
   (one chain, Pyro's NUTS and HMC: the reference), :mod:`~.batched` (NUTS and HMC for C
   chains), :mod:`~.chees` (ChEES-HMC's jittered transition), :mod:`~.mclmc` (the isokinetic
   integrator and MCLMC's transition), :mod:`~.mams` (adjusted MCLMC's), :mod:`~.symmetry`
   (exact Gibbs moves along an MLP's weight-space symmetries, which the loop takes after any
   kernel's transition); a kernel may use the reference's divergence threshold (``kernel.MAX_ENERGY_ERROR``), the batched point
   and metric types (``batched.BatchPoint``, ``BatchMetric``) and the isokinetic integrator
   (``mclmc``).
3. **Adaptations** as ``(init, update, final)`` over a NamedTuple state, which import no
   kernel: :mod:`~.window_adaptation` (Stan's windows, per chain), :mod:`~.chees_adaptation`
   (one step size and trajectory length for all chains), :mod:`~.mclmc_adaptation` and
   :mod:`~.mams_adaptation` (BlackJAX's tunings, per chain); and :mod:`~.step_size` (Hoffman &
   Gelman's search, which runs a kernel's leapfrog step), :mod:`~.metrics` (one metric for
   all chains from the pooled warm-up: dense, Fisher diagonal and low rank) and
   :mod:`~.trajectory_floor` (``min_trajectory``).
4. **The loop**, :mod:`~.loop`: warm-up, draws, threads, progress, stopping, thinning,
   collapse check; it imports no kernel and no adaptation.
5. **Programs**, a kernel plus an adaptation for the loop: :mod:`~.windowed` (any batched
   kernel with the window adaptation), :mod:`~.chees_hmc`, :mod:`~.microcanonical` (MCLMC
   and MAMS); and the one-chain Pyro reference
   path :mod:`~.sequential`, which has its own loop per chain.
6. **A program over a program**, :mod:`~.tempering`: parallel tempering, ladders of any
   windowed program's chains at tempered likelihoods, of which the loop sees the cold ones.
7. **The spec's sections as programs**, :mod:`~.programs`: :data:`~.programs.BATCHED`,
   :data:`~.programs.PROGRAMS` (where a sampler section's fields become its program, the
   one place), :func:`~.programs.run_method`.
8. **The keyword entry points** for code without a spec, :mod:`~.samplers`:
   :func:`~.samplers.run_nuts`, :func:`~.samplers.run_hmc`, :func:`~.samplers.run_chees`,
   :func:`~.samplers.run_mclmc`, :func:`~.samplers.run_mams` (their defaults the schema's).
9. **Your own model**, :mod:`~.user`: :func:`~.user.sample_nuts` and
   :func:`~.user.sample_chees` on any Pyro model (its potential:
   :mod:`~.pyro_potential`, floor 1), an ArviZ DataTree out (``docs/samplers.md``).

A new batched kernel is one module in floor 2 (a ``transition(pot, metric, p, eps, rngs)``)
plus one entry in :data:`~.programs.BATCHED`; it runs with the window adaptation in the loop.
"""

from zoo.inference.mcmc.functional import ModulePotential, module_forward, potential_for
from zoo.inference.mcmc.gaussian import GaussianPotential
from zoo.inference.mcmc.loop import EXTEND_EVERY, sample
from zoo.inference.mcmc.potential import FlatPotential
from zoo.inference.mcmc.pyro_potential import PyroPotential
from zoo.inference.mcmc.result import Adapted, MCMCResult
from zoo.inference.mcmc.samplers import (
    BATCHED,
    run_batched,
    run_chees,
    run_hmc,
    run_mams,
    run_mclmc,
    run_nuts,
)
from zoo.inference.mcmc.streaming import Moments, StreamingMoments
from zoo.inference.mcmc.user import sample_chees, sample_nuts

__all__ = [
    "BATCHED",
    "EXTEND_EVERY",
    "Adapted",
    "FlatPotential",
    "GaussianPotential",
    "MCMCResult",
    "ModulePotential",
    "Moments",
    "PyroPotential",
    "StreamingMoments",
    "module_forward",
    "potential_for",
    "run_batched",
    "run_chees",
    "run_hmc",
    "run_mams",
    "run_mclmc",
    "run_nuts",
    "sample_chees",
    "sample_nuts",
    "sample",
]
