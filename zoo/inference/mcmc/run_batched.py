"""All chains of :func:`zoo.inference.mcmc.driver.run_nuts` / :func:`~zoo.inference.mcmc.driver.run_hmc` as one computation.

``vectorize_chains=True`` comes here. Every chain keeps what it has when run alone (a
:class:`zoo.inference.mcmc.driver._Chain`: seeded from ``(seed, c)``, its own Pyro ``WarmupAdapter`` with
dual-averaging step size and windowed diagonal mass matrix fed with that chain's draws and
acceptance, its own step-size search, which runs chain by chain), while the transitions of
all chains are one batched computation (:mod:`zoo.inference.mcmc.batched`): one
:meth:`~zoo.inference.mcmc.potential.FlatPotential.value_and_grad_batch` per leapfrog step of all chains.
A chain draws its coins and momenta from its own generators in the order the sequential
kernel does, so it visits the points it would visit alone, up to float rounding (which
chaotic trajectories amplify over many draws).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

import numpy as np
import torch

from zoo.inference.mcmc.batched import BatchMetric, new_point_batch
from zoo.inference.mcmc.driver import MCMCResult, _Chain, _check_init, _progress, _result
from zoo.inference.mcmc.potential import FlatPotential

__all__ = ["run_batched"]


class _Metrics:
    """The chains' diagonal inverse mass matrices as one BatchMetric, rebuilt on change."""

    def __init__(self, chains: list[_Chain]) -> None:
        self.chains, self._minv, self.metric = chains, (), None

    def sync(self) -> BatchMetric:
        minv = tuple(ch.sync().blocks[0][1] for ch in self.chains)
        if any(map(lambda a, b: a is not b, minv, self._minv)) or not self._minv:
            self._minv, self.metric = minv, BatchMetric(torch.stack(minv))
        return self.metric


#: With ``until``, the stopping rule is asked after every this many draws past ``draws``.
EXTEND_EVERY = 25


def _sample(pot: FlatPotential, transition: Callable, chs: list[_Chain], z: torch.Tensor,
            warmup: int, draws: int, out: torch.Tensor, bar,
            until: Callable[[np.ndarray], bool] | None = None) -> tuple[dict, float, int]:  # fmt: skip
    """Warm up all chains from ``z`` (C, D), write ``out`` (C, max draws, D).

    Draws ``draws``, then (with ``until``) goes on in rounds of :data:`EXTEND_EVERY` until
    ``until(out[:, :k])`` is true or ``out`` is full. Returns stats, warm-up seconds and ``k``.
    """
    t0 = time.perf_counter()
    u, g = pot.value_and_grad_batch(z)
    for c, ch in enumerate(chs):
        ch.adapter.reset_step_size_adaptation(ch.zdict(z[c]))
    metrics = _Metrics(chs)
    metric, t_warm = metrics.sync(), 0.0
    gens, rngs = [ch.gen for ch in chs], [ch.rng for ch in chs]
    rec: dict[str, list] = {}
    kept = out.shape[1]
    for t in range(warmup + out.shape[1]):
        eps = [ch.adapter.step_size for ch in chs]
        p = new_point_batch(metric, z, u, g, gens)
        q, st = transition(pot, metric, p, torch.tensor(eps), rngs)
        z, u, g = q.z, q.potential, q.g
        if t < warmup:
            acc = st["acceptance_rate"].tolist()
            for c, ch in enumerate(chs):  # float32 like the sequential chain's statistic
                ch.adapter.step(t, ch.zdict(z[c]), torch.tensor(acc[c], dtype=torch.float32))
            metric = metrics.sync()
            if t == warmup - 1:
                t_warm = time.perf_counter() - t0
                for ch in chs:
                    ch.check_step_size()
        else:
            out[:, t - warmup] = z
            for k, val in (("lp", -u.numpy()), ("step_size", np.array(eps)),
                           ("energy", q.energy.numpy()), *st.items()):  # fmt: skip
                rec.setdefault(k, []).append(val)
        if bar is not None:
            bar.update(1)
            if t % 10 == 0:
                bar.set_postfix(eps=f"{np.median(eps):.2e}", n_steps=int(st["n_steps"].mean()))
        k = t - warmup + 1
        if until is not None and k >= draws and (k - draws) % EXTEND_EVERY == 0:
            if k == out.shape[1] or until(out[:, :k].numpy()):
                kept = k
                break
    return {k: np.stack(v, 1) for k, v in rec.items()}, t_warm, kept


def run_batched(pot: FlatPotential, transition: Callable, method: str, *, seed: int,
                warmup: int, draws: int, chains: int, target_accept: float,
                step_size: float | None, adapt_mass_matrix: bool,
                init: Mapping[str, torch.Tensor] | None, progress: bool, threads: int | None,
                settings: dict, max_draws: int | None = None,
                until: Callable[[np.ndarray], bool] | None = None) -> MCMCResult:  # fmt: skip
    """Sample ``chains`` chains together with the batched ``transition``; diagonal mass only.

    Parameters as in :func:`zoo.inference.mcmc.driver.run_nuts`; ``transition(pot, metric, p, eps, rngs)`` is
    a batched kernel of :mod:`zoo.inference.mcmc.batched`. ``warmup_seconds`` is the wall time of the joint
    warm-up; one progress bar for all chains. With ``until`` every chain draws ``draws``, then
    all go on together in rounds of :data:`EXTEND_EVERY` draws until ``until(flat draws so far,
    shape (chains, k, D))`` is true or they have ``max_draws``; ``settings["draws"]`` is the
    number drawn.
    """
    cap = draws if until is None or max_draws is None else max_draws
    z_init = None if init is None else pot.ravel(init).detach().clone()
    t0 = time.perf_counter()
    chs, zs = [], []
    for c in range(chains):
        ch = _Chain(pot, transition, seed, c, warmup, target_accept, step_size, "diag",
                    adapt_mass_matrix)  # fmt: skip
        z = z_init.clone() if z_init is not None else pot.prior_draw(ch.gen)
        _check_init(pot, z, "init" if init is not None else "a prior draw (init=None)")
        chs.append(ch)
        zs.append(z)
    flat = torch.empty(chains, cap, pot.dim, dtype=pot.x.dtype)
    saved = torch.get_num_threads()
    threads = saved if threads is None else threads
    bar = _progress(warmup + cap, f"{method} {chains} chains") if progress else None
    try:
        torch.set_num_threads(threads)
        stats, t_warm, kept = _sample(pot, transition, chs, torch.stack(zs), warmup, draws, flat,
                                      bar, until)  # fmt: skip
        flat = flat[:, :kept].clone()
    finally:
        torch.set_num_threads(saved)
        if bar is not None:
            bar.close()
    seconds = time.perf_counter() - t0
    if until is not None:
        settings = dict(settings, min_draws=draws, max_draws=cap)
    settings = dict(settings, method=method, seed=seed, warmup=warmup, draws=kept, chains=chains,
                    target_accept=target_accept, initial_step_size=step_size,
                    mass_matrix="diag", adapt_mass_matrix=adapt_mass_matrix,
                    init="given" if init is not None else "prior",
                    step_size=[ch.adapter.step_size for ch in chs], threads=threads)  # fmt: skip
    return _result(pot, flat, stats, settings, seconds, t_warm)
