"""The one-chain path: each chain with the one-chain kernel and Pyro's ``WarmupAdapter``.

The only path for dense and block mass matrices, and the path of ``vectorize_chains=False``
(see :mod:`zoo.inference.mcmc.samplers` for why a diagonal one does not go through a batch of
one). It is the reference the batched samplers are checked against.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping

import numpy as np
import torch
from pyro.infer.mcmc.adaptation import WarmupAdapter

from zoo.inference.mcmc.kernel import Metric, leapfrog, new_point
from zoo.inference.mcmc.loop import chain_rngs, check_arguments, check_init, check_step_sizes
from zoo.inference.mcmc.potential import FlatPotential
from zoo.inference.mcmc.result import Adapted, MCMCResult, result
from zoo.inference.progress import progress_bar
from zoo.runtime import Runtime

__all__ = ["run_sequential"]


def _mass_shapes(pot: FlatPotential, mass_matrix: str) -> dict[tuple[str, ...], tuple]:
    """Pyro's ``mass_matrix_shape``: blocks keyed by tuples of site names, in model order."""
    names = tuple(pot.site_slices)
    if mass_matrix in ("diag", "dense"):
        return {names: (pot.dim,) * (1 if mass_matrix == "diag" else 2)}
    if mass_matrix != "block":
        raise ValueError(f"mass_matrix={mass_matrix!r}; use 'diag', 'dense' or 'block'")
    out: dict[tuple[str, ...], tuple] = {}
    for w, b in pot.model.layer_sites():
        n = pot.site_slices[b].stop - pot.site_slices[w].start
        out[(w, b)] = (n, n)
    if pot.learned_noise:
        out[("noise",)] = (1,)
    return out


class _Chain:
    """One chain: Pyro's WarmupAdapter around a transition function, seeded from (seed, c)."""

    def __init__(
        self,
        pot: FlatPotential,
        transition: Callable,
        seed: int,
        chain: int,
        warmup: int,
        target_accept: float,
        step_size: float | None,
        mass_matrix: str,
        adapt_mass_matrix: bool,
    ) -> None:
        self.pot, self.transition, self.warmup, self.chain = pot, transition, warmup, chain
        self.rng, self.gen = chain_rngs(seed, chain)
        shapes = _mass_shapes(pot, mass_matrix)
        sl = pot.site_slices
        self.slices = {k: slice(sl[k[0]].start, sl[k[-1]].stop) for k in shapes}
        self.skip_search = step_size is not None
        self.adapter = WarmupAdapter(
            step_size or 1.0,
            adapt_step_size=True,
            target_accept_prob=target_accept,
            adapt_mass_matrix=adapt_mass_matrix,
        )
        self.adapter.configure(
            warmup,
            initial_step_size=step_size or 1.0,
            mass_matrix_shape=shapes,
            find_reasonable_step_size_fn=self.find_step_size,
            options={"dtype": pot.x.dtype, "device": pot.x.device},
        )
        self._minv: tuple = ()
        self.metric = self.sync()

    def sync(self) -> Metric:
        """The flat metric of the adapter's current inverse mass matrix (rebuilt on change)."""
        minv = self.adapter.mass_matrix_adapter.inverse_mass_matrix
        vals = tuple(minv.values())
        if len(vals) != len(self._minv) or any(map(lambda a, b: a is not b, vals, self._minv)):
            self._minv, self.metric = vals, Metric(minv, self.slices)
        return self.metric

    def check_step_size(self) -> None:
        check_step_sizes(
            f"chain {self.chain}",
            [self.adapter.step_size],
            self.adapter.target_accept_prob,
            self.warmup,
        )

    def zdict(self, z: torch.Tensor) -> dict[str, torch.Tensor]:
        return {n: z[sl] for n, sl in self.pot.site_slices.items()}

    def find_step_size(self, zd: Mapping[str, torch.Tensor]) -> float:
        """Pyro's ``HMC._find_reasonable_step_size`` on flat tensors (double or halve)."""
        eps = self.adapter.step_size
        if self.skip_search:  # the user's initial step size is used as given
            self.skip_search = False
            return eps
        pot, metric = self.pot, self.sync()
        z = torch.cat([zd[n].reshape(-1) for n in pot.site_slices])
        u, g = pot.value_and_grad(z)
        direction = new_dir = None
        while new_dir == direction and 1e-10 < eps < 1e10:
            if direction is not None:
                eps *= 2.0**direction
            p = new_point(pot, metric, z, u, g, self.gen)
            q = leapfrog(pot, metric, p, eps)
            new_dir = 1 if math.log(0.8) < p.energy - q.energy else -1
            direction = new_dir if direction is None else direction
        return min(max(eps, 1e-10), 1e10)

    def run(self, z: torch.Tensor, draws: int, out: torch.Tensor, bar) -> tuple[dict, float]:
        """Warm up from ``z``, then write ``draws`` flat draws into ``out``; stats, warm-up s."""
        pot, adapter, warmup = self.pot, self.adapter, self.warmup
        t0 = time.perf_counter()
        u, g = pot.value_and_grad(z)
        adapter.reset_step_size_adaptation(self.zdict(z))
        metric, t_warm = self.sync(), 0.0
        rec: dict[str, list] = {}
        for t in range(warmup + draws):
            eps = adapter.step_size
            p = new_point(pot, metric, z, u, g, self.gen)
            q, st = self.transition(pot, metric, p, eps, self.rng)
            z, u, g = q.z, q.potential, q.g
            if t < warmup:
                adapter.step(t, self.zdict(z), torch.tensor(st["acceptance_rate"]))
                metric = self.sync()
                if t == warmup - 1:
                    t_warm = time.perf_counter() - t0
                    self.check_step_size()
            else:
                out[t - warmup] = z
                for k, val in (("lp", -u), ("step_size", eps), ("energy", q.energy), *st.items()):
                    rec.setdefault(k, []).append(val)
            if bar is not None:
                bar.update(1)
                if t % 10 == 0:
                    bar.set_postfix(eps=f"{eps:.2e}", n_steps=st["n_steps"])
        return {k: np.asarray(v) for k, v in rec.items()}, t_warm


def run_sequential(
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
) -> MCMCResult:
    """The chains one after another, each with the one-chain kernel ``transition`` and its own
    Pyro ``WarmupAdapter`` (any mass matrix)."""
    check_arguments(method, warmup, draws, chains, target_accept)
    z_init = None if init is None else pot.ravel(init).detach().clone()
    flat = torch.empty(chains, draws, pot.dim, dtype=pot.x.dtype)
    stats: dict[str, list] = {}
    steps, t_warm, t0 = [], 0.0, time.perf_counter()
    for c in range(chains):
        chain = _Chain(
            pot,
            transition,
            seed,
            c,
            warmup,
            target_accept,
            step_size,
            mass_matrix,
            adapt_mass_matrix,
        )
        z = z_init.clone() if z_init is not None else pot.prior_draw(chain.gen)
        check_init(pot, z, "init" if init is not None else "a prior draw (init=None)")
        bar = None
        if progress:
            bar = progress_bar(warmup + draws, f"{method} chain {c}", unit="draw", warmup=warmup)
        try:
            with Runtime(threads=threads).threads_scope():
                rec, tw = chain.run(z, draws, flat[c], bar)
        finally:
            if bar is not None:
                bar.close()
        eps = chain.adapter.step_size
        steps.append(eps)
        t_warm += tw
        for k, v in rec.items():
            stats.setdefault(k, []).append(v)
    seconds = time.perf_counter() - t0
    st = {k: np.stack(v) for k, v in stats.items()}
    return result(
        pot,
        flat,
        st,
        seconds,
        t_warm,
        adapted=Adapted(np.asarray(steps, dtype=np.float64), None),
        drawn=draws,
        kept_index=tuple(range(draws)),
        divergences=int(st["diverging"].sum()),
        n_steps_mean=float(st["n_steps"].mean()),
        init="shared" if init is not None else "prior",
    )
