"""NUTS and HMC for :class:`~zoo.models.mlp.BayesianMLP` over one flat parameter vector.

:class:`~zoo.inference.mcmc.potential.FlatPotential` is the potential energy
:math:`U(z) = -\\log p(z \\mid x, y) + c` of the model as one function of a flat
unconstrained vector ``z`` (sites concatenated in model order, ``noise`` as
:math:`\\log\\sigma` with its Jacobian), computed from :meth:`BayesianMLP.apply` /
:meth:`BayesianMLP.log_likelihood` and the Normal prior parameters, never through a Pyro
trace.

The samplers are a thin kernel (the functional core in :mod:`zoo.inference.mcmc.kernel`: leapfrog,
NUTS and HMC transitions over its ``Point`` NamedTuple) driven by Pyro's own
:class:`~pyro.infer.mcmc.adaptation.WarmupAdapter`: dual-averaging step size, Stan's
windowed Welford mass matrix (:class:`~pyro.infer.mcmc.adaptation.BlockMassMatrix`, blocks
named by tuples of site names like Pyro's ``full_mass``) and Pyro's step-size heuristic.
The NUTS transition is Pyro's (multinomial sampling, biased progressive sampling between
doublings, Pyro's U-turn criterion, divergence when the energy error exceeds 1000) ported
to flat tensors with Python-float bookkeeping. Why not subclass ``pyro.infer.mcmc.NUTS``:
its ``sample`` keeps the per-draw statistics local, works on dicts of per-site tensors
(a ``torch.cat`` and split per mass-matrix product), calls ``pyro.sample`` for every coin
flip and keeps scalars as tensors, which costs tens of tensor operations per leapfrog step
on top of the gradient; here one leapfrog step is six tensor operations plus one
:meth:`FlatPotential.value_and_grad` (see ``benchmarks/nuts.py`` for the measured ratios).
With ``vectorize_chains=True`` (and two chains or more, diagonal mass matrix) all chains run
as one batched computation: the transitions are :mod:`zoo.inference.mcmc.batched` (one
:meth:`~zoo.inference.mcmc.potential.FlatPotential.value_and_grad_batch` per leapfrog step of
all chains) and the warm-up is :mod:`zoo.inference.mcmc.adaptation` (the same adaptation as
Pyro's ``WarmupAdapter``, bit for bit, as pure functions over one state for all chains; its
step-size search is batched too). Each chain is seeded from ``(seed, c)`` and draws its
momenta and coins from its own generators in the order the one-chain code draws them, so it
visits the points it would visit alone, up to float rounding of the batched products (which
chaotic trajectories amplify over many draws).

The one-chain path (``vectorize_chains=False``, or one chain) keeps the one-chain kernel and
Pyro's ``WarmupAdapter`` per chain: it is the only path for dense and block mass matrices, and
for a diagonal one its numbers differ from a batch of one chain by the rounding of
:meth:`~zoo.inference.mcmc.potential.FlatPotential.value_and_grad` against its batched
version, so running it through the batched path would move every published sequential run.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import torch

from zoo.inference.mcmc.batched import (
    hmc_step_batch,
    nuts_step_batch,
)
from zoo.inference.mcmc.kernel import hmc_step, nuts_step
from zoo.inference.mcmc.potential import FlatPotential

# FlatPotential re-exported
from zoo.inference.mcmc.result import (
    EXTEND_EVERY,
    MCMCResult,
)
from zoo.inference.mcmc.sequential import run_sequential
from zoo.inference.mcmc.vectorized import run_vectorized

__all__ = ["EXTEND_EVERY", "FlatPotential", "MCMCResult", "run_hmc", "run_nuts"]


def _run(
    pot: FlatPotential,
    transition: Callable,
    method: str,
    *,
    seed: int,
    warmup: int,
    draws: int,
    chains: int,
    target_accept: float,
    step_size: float | None,
    mass_matrix: str,
    adapt_mass_matrix: bool,
    init: Mapping[str, torch.Tensor] | None,
    progress: bool,
    threads: int | None,
    settings: dict,
    vectorize_chains: bool = False,
    batch_transition: Callable | None = None,
    max_draws: int | None = None,
    until: Callable[[np.ndarray], bool] | None = None,
) -> MCMCResult:
    if warmup < 0 or draws < 1 or chains < 1 or not 0 < target_accept < 1:
        raise ValueError(
            f"{method}: need warmup >= 0, draws >= 1, chains >= 1 and 0 < target_accept < 1; "
            f"got {warmup}, {draws}, {chains}, {target_accept}"
        )
    if until is not None and not (vectorize_chains and chains > 1):
        raise ValueError(
            f"{method}: a stopping rule (until=) extends all chains together; it needs "
            f"vectorize_chains=True and chains >= 2, got {vectorize_chains} and {chains}"
        )
    if until is not None and (max_draws is None or max_draws < draws):
        raise ValueError(
            f"{method}: with a stopping rule max_draws must be >= draws ({draws}), got {max_draws}"
        )
    settings = dict(settings, vectorize_chains=vectorize_chains)
    if vectorize_chains and mass_matrix != "diag":
        raise ValueError(
            f"{method}: vectorize_chains=True supports only mass_matrix='diag', got "
            f"mass_matrix={mass_matrix!r}; use mass_matrix='diag' or vectorize_chains=False"
        )
    if vectorize_chains and chains > 1:
        return run_vectorized(
            pot,
            batch_transition,
            method,
            seed=seed,
            warmup=warmup,
            draws=draws,
            chains=chains,
            target_accept=target_accept,
            step_size=step_size,
            adapt_mass_matrix=adapt_mass_matrix,
            init=init,
            progress=progress,
            threads=threads,
            settings=settings,
            max_draws=max_draws,
            until=until,
        )
    return run_sequential(
        pot,
        transition,
        method,
        seed=seed,
        warmup=warmup,
        draws=draws,
        chains=chains,
        target_accept=target_accept,
        step_size=step_size,
        mass_matrix=mass_matrix,
        adapt_mass_matrix=adapt_mass_matrix,
        init=init,
        progress=progress,
        threads=threads,
        settings=settings,
    )


def run_nuts(
    potential: FlatPotential,
    *,
    seed: int,
    warmup: int,
    draws: int,
    chains: int = 1,
    target_accept: float = 0.8,
    max_tree_depth: int = 10,
    step_size: float | None = None,
    mass_matrix: str = "diag",
    init: Mapping[str, torch.Tensor] | None = None,
    progress: bool = False,
    threads: int | None = 1,
    vectorize_chains: bool = False,
    max_draws: int | None = None,
    until: Callable[[np.ndarray], bool] | None = None,
) -> MCMCResult:
    """Sample ``potential`` with NUTS (Pyro's multinomial variant and warm-up adaptation).

    Parameters
    ----------
    potential : FlatPotential
    seed : int
        Chain ``c`` is seeded from ``(seed, c)``; chains run one after another unless
        ``vectorize_chains``.
    warmup, draws, chains : int
        Warm-up iterations (discarded), kept draws per chain, number of chains.
    target_accept : float
        Target of the dual-averaging step-size adaptation.
    max_tree_depth : int
        At most ``2**max_tree_depth - 1`` leapfrog steps per draw.
    step_size : float, optional
        Initial step size; ``None`` runs Pyro's heuristic from 1.
    mass_matrix : {"diag", "dense", "block"}
        Adapted inverse mass matrix: diagonal, dense, or dense per layer (weight and bias of
        one layer together; ``noise`` diagonal). Pyro's windowed Welford estimate.
    init : dict, optional
        Constrained initial values per site (e.g. the MF-VI posterior mean); ``None`` draws
        each chain's start from the prior.
    progress : bool
        tqdm bar per chain, or one for all when vectorized (off when stderr is not a terminal).
    threads : int, optional
        torch intra-op threads while sampling, restored afterwards (``None`` keeps torch's
        setting). One is fastest for these small sequential operations: with two threads on
        a busy 2-core machine every leapfrog step was 25 times slower.
    vectorize_chains : bool
        Run all chains as one batched computation: each chain keeps its own seed, step-size
        search, dual averaging and mass-matrix windows (:mod:`zoo.inference.mcmc.adaptation`,
        all chains in one state), while every leapfrog step of all chains is one forward and
        backward pass (:mod:`zoo.inference.mcmc.batched`). On small networks 4
        chains then cost about 1.5 chains. ``mass_matrix="diag"`` only; ``warmup_seconds`` is
        then the wall time of the joint warm-up. One chain runs the sequential path.
    max_draws, until : optional
        A stopping rule (vectorized chains only): after ``draws`` draws per chain, and then
        every :data:`EXTEND_EVERY`, ``until(draws so far)`` is called with the
        flat draws of shape ``(chains, k, D)``; sampling stops when it returns true or at
        ``max_draws``. ``settings["draws"]`` is the number drawn.

    Returns
    -------
    MCMCResult
    """
    if max_tree_depth < 1:
        raise ValueError(f"max_tree_depth={max_tree_depth} must be >= 1")

    def transition(pot, metric, p, eps, rng):
        return nuts_step(pot, metric, p, eps, max_tree_depth, rng)

    def batch_transition(pot, metric, p, eps, rngs):
        return nuts_step_batch(pot, metric, p, eps, max_tree_depth, rngs)

    return _run(
        potential,
        transition,
        "nuts",
        seed=seed,
        warmup=warmup,
        draws=draws,
        chains=chains,
        target_accept=target_accept,
        step_size=step_size,
        mass_matrix=mass_matrix,
        adapt_mass_matrix=True,
        init=init,
        progress=progress,
        threads=threads,
        settings={"max_tree_depth": max_tree_depth},
        vectorize_chains=vectorize_chains,
        batch_transition=batch_transition,
        max_draws=max_draws,
        until=until,
    )


def run_hmc(
    potential: FlatPotential,
    *,
    seed: int,
    warmup: int,
    draws: int,
    num_steps: int,
    chains: int = 1,
    target_accept: float = 0.8,
    step_size: float | None = None,
    adapt_mass_matrix: bool = False,
    mass_matrix: str = "diag",
    init: Mapping[str, torch.Tensor] | None = None,
    progress: bool = False,
    threads: int | None = 1,
    vectorize_chains: bool = False,
    max_draws: int | None = None,
    until: Callable[[np.ndarray], bool] | None = None,
) -> MCMCResult:
    """Sample ``potential`` with HMC: ``num_steps`` leapfrog steps per draw, adapted step size.

    Like hamiltorch's HMC the trajectory has a fixed number of steps (not a fixed length);
    the step size is adapted by dual averaging during warm-up, the mass matrix only when
    ``adapt_mass_matrix``. Other parameters (``vectorize_chains``, ``max_draws`` and ``until``
    too) as in :func:`run_nuts`;
    ``sample_stats`` has no ``tree_depth``.
    """
    if num_steps < 1:
        raise ValueError(f"num_steps={num_steps} must be >= 1")

    def transition(pot, metric, p, eps, rng):
        return hmc_step(pot, metric, p, eps, num_steps, rng)

    def batch_transition(pot, metric, p, eps, rngs):
        return hmc_step_batch(pot, metric, p, eps, num_steps, rngs)

    return _run(
        potential,
        transition,
        "hmc",
        seed=seed,
        warmup=warmup,
        draws=draws,
        chains=chains,
        target_accept=target_accept,
        step_size=step_size,
        mass_matrix=mass_matrix,
        adapt_mass_matrix=adapt_mass_matrix,
        init=init,
        progress=progress,
        threads=threads,
        settings={"num_steps": num_steps},
        vectorize_chains=vectorize_chains,
        batch_transition=batch_transition,
        max_draws=max_draws,
        until=until,
    )
