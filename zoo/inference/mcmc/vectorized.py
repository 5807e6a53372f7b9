"""The vectorized path: all chains as one batched computation with the pure batched adaptation."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import torch

from zoo.inference.mcmc.adaptation import (
    AdaptationState,
    WindowAdaptation,
    find_reasonable_step_size,
    window_adaptation,
)
from zoo.inference.mcmc.batched import (
    BatchMetric,
    leapfrog_batch,
    new_point_batch,
)
from zoo.inference.mcmc.potential import FlatPotential

# FlatPotential re-exported
from zoo.inference.mcmc.result import (
    EXTEND_EVERY,
    MCMCResult,
    chain_rngs,
    check_init,
    collapsed,
    progress_bar,
    result,
)

__all__ = ["run_vectorized"]


def _search(
    pot: FlatPotential,
    ad: WindowAdaptation,
    state: AdaptationState,
    z: torch.Tensor,
    gens: Sequence[torch.Generator],
) -> AdaptationState:
    """The batched step-size search where the schedule asks for it, and the restart after it."""
    if not state.needs_search:
        return state
    minv = state.inverse_mass_matrix
    leap = functools.partial(leapfrog_batch, pot, BatchMetric(minv))
    eps = find_reasonable_step_size(pot.value_and_grad_batch, leap, z, state.step_size, minv, gens)
    return ad.restart(state, eps)


def _sample_batched(
    pot: FlatPotential,
    transition: Callable,
    ad: WindowAdaptation,
    warmup: int,
    z: torch.Tensor,
    step_size: float | None,
    gens: Sequence[torch.Generator],
    rngs: Sequence[np.random.Generator],
    draws: int,
    out: torch.Tensor,
    bar,
    until: Callable[[np.ndarray], bool] | None,
    check: Callable[[torch.Tensor], None],
) -> tuple[dict, float, int, torch.Tensor]:
    """Warm up all chains from ``z`` (C, D), write ``out`` (C, max draws, D).

    Draws ``draws``, then (with ``until``) goes on in rounds of :data:`EXTEND_EVERY` until
    ``until(out[:, :k])`` is true or ``out`` is full. Returns stats, warm-up seconds, ``k``
    and the adapted step sizes (C,); ``check(step_sizes)`` runs at the end of warm-up.
    """
    t0 = time.perf_counter()
    u, g = pot.value_and_grad_batch(z)
    state = ad.init(z, 1.0 if step_size is None else step_size, search=step_size is None)
    state = _search(pot, ad, state, z, gens)
    minv, t_warm = state.inverse_mass_matrix, 0.0
    metric = BatchMetric(minv)
    rec: dict[str, list] = {}
    kept = out.shape[1]
    for t in range(warmup + out.shape[1]):
        eps = state.step_size
        p = new_point_batch(metric, z, u, g, gens)
        # float32 step sizes: what torch.tensor made of the per-chain adapters' Python floats
        # in earlier versions (kept: the same numbers); the kernels cast them to z's dtype
        q, st = transition(pot, metric, p, eps.float(), rngs)
        z, u, g = q.z, q.potential, q.g
        if t < warmup:
            # float32 acceptance statistics, as the per-chain adapters were fed
            acc = torch.from_numpy(st["acceptance_rate"]).float()
            state = _search(pot, ad, ad.update(state, t, z, acc), z, gens)
            if state.inverse_mass_matrix is not minv:
                minv = state.inverse_mass_matrix
                metric = BatchMetric(minv)
            if t == warmup - 1:
                t_warm = time.perf_counter() - t0
                check(state.step_size)
        else:
            out[:, t - warmup] = z
            for k, val in (
                ("lp", -u.numpy()),
                ("step_size", eps.numpy()),
                ("energy", q.energy.numpy()),
                *st.items(),
            ):
                rec.setdefault(k, []).append(val)
        if bar is not None:
            bar.update(1)
            if t % 10 == 0:
                bar.set_postfix(eps=f"{eps.median().item():.2e}", n_steps=int(st["n_steps"].mean()))
        k = t - warmup + 1
        if until is not None and k >= draws and (k - draws) % EXTEND_EVERY == 0:
            if k == out.shape[1] or until(out[:, :k].numpy()):
                kept = k
                break
    step_size_final, _ = ad.final(state)
    return {k: np.stack(v, 1) for k, v in rec.items()}, t_warm, kept, step_size_final


def run_vectorized(
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
    adapt_mass_matrix: bool,
    init: Mapping[str, torch.Tensor] | None,
    progress: bool,
    threads: int | None,
    settings: dict,
    max_draws: int | None = None,
    until: Callable[[np.ndarray], bool] | None = None,
) -> MCMCResult:
    """Sample ``chains`` chains together with the batched ``transition``; diagonal mass only.

    Parameters as in :func:`run_nuts`; ``transition(pot, metric, p, eps, rngs)`` is a batched
    kernel of :mod:`zoo.inference.mcmc.batched`. The warm-up is
    :func:`~zoo.inference.mcmc.adaptation.window_adaptation` for all chains at once, with
    :func:`~zoo.inference.mcmc.adaptation.find_reasonable_step_size` at the start (unless
    ``step_size`` is given) and after each mass-matrix window. ``warmup_seconds`` is the wall
    time of the joint warm-up; one progress bar for all chains. With ``until`` every chain
    draws ``draws``, then all go on together in rounds of :data:`EXTEND_EVERY` draws until
    ``until(flat draws so far, shape (chains, k, D))`` is true or they have ``max_draws``;
    ``settings["draws"]`` is the number drawn.
    """
    cap = draws if until is None or max_draws is None else max_draws
    z_init = None if init is None else pot.ravel(init).detach().clone()
    t0 = time.perf_counter()
    gens, rngs, zs = [], [], []
    for c in range(chains):
        rng, gen = chain_rngs(seed, c)
        z = z_init.clone() if z_init is not None else pot.prior_draw(gen)
        check_init(pot, z, "init" if init is not None else "a prior draw (init=None)")
        gens.append(gen)
        rngs.append(rng)
        zs.append(z)
    ad = window_adaptation(warmup, target_accept=target_accept, adapt_mass_matrix=adapt_mass_matrix)
    blocks = [tuple(pot.site_slices)]

    def check(eps: torch.Tensor) -> None:
        for c, e in enumerate(eps.tolist()):
            collapsed(c, e, target_accept, blocks, warmup)

    flat = torch.empty(chains, cap, pot.dim, dtype=pot.x.dtype)
    saved = torch.get_num_threads()
    threads = saved if threads is None else threads
    bar = progress_bar(warmup + cap, f"{method} {chains} chains", warmup) if progress else None
    try:
        torch.set_num_threads(threads)
        stats, t_warm, kept, steps = _sample_batched(
            pot,
            transition,
            ad,
            warmup,
            torch.stack(zs),
            step_size,
            gens,
            rngs,
            draws,
            flat,
            bar,
            until,
            check,
        )
        flat = flat[:, :kept].clone()
    finally:
        torch.set_num_threads(saved)
        if bar is not None:
            bar.close()
    seconds = time.perf_counter() - t0
    if until is not None:
        settings = dict(settings, min_draws=draws, max_draws=cap)
    settings = dict(
        settings,
        method=method,
        seed=seed,
        warmup=warmup,
        draws=kept,
        chains=chains,
        target_accept=target_accept,
        initial_step_size=step_size,
        mass_matrix="diag",
        adapt_mass_matrix=adapt_mass_matrix,
        init="given" if init is not None else "prior",
        step_size=steps.tolist(),
        threads=threads,
    )
    return result(pot, flat, stats, settings, seconds, t_warm)
