"""Batched kernels with Stan's window adaptation, per chain: batched NUTS and HMC for the loop.

:class:`WindowedProgram` is the :class:`~zoo.inference.mcmc.loop.Program` of any batched
transition ``transition(pot, metric, p, eps, rngs) -> (BatchPoint, stats)`` of
:mod:`zoo.inference.mcmc.batched` (NUTS, fixed-length HMC): each chain keeps its own step
size and diagonal mass matrix, adapted by
:func:`~zoo.inference.mcmc.window_adaptation.window_adaptation` (Pyro's ``WarmupAdapter``, bit for
bit, all chains in one state), with
:func:`~zoo.inference.mcmc.step_size.find_reasonable_step_size` at the start (unless a step
size is given) and after each mass-matrix window.

Seeding: chain ``c`` draws its prior start, momenta and step-size search from the torch
generator of :func:`~zoo.inference.mcmc.loop.chain_rngs` ``(seed, c)`` and its directions
and coins from the NumPy one, in the order the one-chain path
(:mod:`zoo.inference.mcmc.sequential`) draws them, so it visits the points it would visit
alone, up to the float rounding of the batched products.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping

import numpy as np
import torch

from zoo.inference.mcmc.batched import BatchMetric, leapfrog_batch, new_point_batch
from zoo.inference.mcmc.loop import Step, chain_rngs, given_starts
from zoo.inference.mcmc.metrics import pooled_estimate, pooled_metric
from zoo.inference.mcmc.potential import FlatPotential
from zoo.inference.mcmc.result import Adapted
from zoo.inference.mcmc.step_size import find_reasonable_step_size
from zoo.inference.mcmc.window_adaptation import window_adaptation

__all__ = ["Transition", "WindowedProgram"]

#: A batched kernel: ``transition(pot, metric, p, eps (C,), rngs) -> (BatchPoint, stats)``,
#: ``stats`` a dict of ``(C,)`` NumPy arrays with at least ``acceptance_rate``,
#: ``n_steps`` and ``diverging``.
Transition = Callable[..., tuple]


class WindowedProgram:
    """A batched ``transition`` with per-chain window adaptation (module docstring).

    Parameters
    ----------
    transition : Transition
    trajectory_cap : int, optional
        The transition's cap (NUTS's ``max_tree_depth``): a transition cut by it flags
        ``reached_max_treedepth`` in its statistics; None: no cap (HMC).
    label : str
        The method's name, for the bar and the messages.
    seed : int
        Chain ``c`` is seeded from ``(seed, c)``.
    warmup : int
        Warm-up iterations (fixes the adaptation's schedule).
    target_accept : float
        Dual averaging's target.
    step_size : float, optional
        The starting step size of every chain; None searches one per chain.
    adapt_mass_matrix : bool
        Estimate each chain's diagonal inverse mass matrix in Stan's windows.
    pooled : str, optional
        Instead, at the end of each of Stan's slow windows, one metric for all chains from
        the draws and gradients of all chains in the window
        (:data:`~zoo.inference.mcmc.metrics.POOLED`: ``dense``, ``fisher_diag``,
        ``fisher_low_rank``; needs ``adapt_mass_matrix``); None: per chain, diagonal.
    """

    #: Not saved by a checkpoint (:func:`~zoo.inference.mcmc.loop.sample`): the potential,
    #: the kernel and the adaptation's functions, and the metric :meth:`restored` rebuilds.
    not_state = ("pot", "transition", "ad", "metric", "trajectory_cap")

    def restored(self) -> None:
        """After a checkpoint's state was set: the metric of the restored mass matrix."""
        self.metric = self._metric_of(self.minv)

    def _metric_of(self, minv: torch.Tensor):
        """The batched metric in use: the pooled one once a window set it, else ``minv``'s."""
        cov = getattr(self, "cov", None)
        if cov is None:
            return BatchMetric(minv)
        return pooled_metric(cov, minv.shape[0], minv)

    def __init__(
        self,
        transition: Transition,
        label: str,
        *,
        trajectory_cap: int | None,
        seed: int,
        warmup: int,
        target_accept: float,
        step_size: float | None,
        adapt_mass_matrix: bool,
        pooled: str | None = None,
    ) -> None:
        self.transition, self.label, self.seed = transition, label, seed
        if pooled is not None:  # set only then: the diagonal's checkpoints keep their layout
            if not adapt_mass_matrix:
                raise ValueError(f"pooled={pooled!r} needs adapt_mass_matrix=True")
            self.pooled, self.cov, self.seen_z, self.seen_g = pooled, None, [], []
        self.trajectory_cap = trajectory_cap
        self.step_size = step_size
        self.ad = window_adaptation(
            warmup, target_accept=target_accept, adapt_mass_matrix=adapt_mass_matrix
        )

    def starts(
        self, pot: FlatPotential, init: Mapping[str, torch.Tensor] | None, chains: int
    ) -> tuple[torch.Tensor, str]:
        self.pot = pot
        self.gens, self.rngs = [], []
        for c in range(chains):
            rng, gen = chain_rngs(self.seed, c)
            self.gens.append(gen)
            self.rngs.append(rng)
        if init is not None:
            return given_starts(pot, init, chains)
        return torch.stack([pot.prior_draw(gen) for gen in self.gens]), "prior"

    def _search(self, state):
        """The batched step-size search where the schedule asks for it, and the restart."""
        if not state.needs_search:
            return state
        metric = self._metric_of(state.inverse_mass_matrix)
        leap = functools.partial(leapfrog_batch, self.pot, metric)
        eps = find_reasonable_step_size(
            self.pot.value_and_grad_batch, leap, self.z, state.step_size, metric, self.gens
        )
        return self.ad.restart(state, eps)

    def start(self, z: torch.Tensor, u: torch.Tensor, g: torch.Tensor) -> None:
        self.z, self.u, self.g = z, u, g
        eps = 1.0 if self.step_size is None else self.step_size
        self.state = self._search(self.ad.init(z, eps, search=self.step_size is None))
        self.minv = self.state.inverse_mass_matrix
        self.metric = BatchMetric(self.minv)

    def _step(self) -> Step:
        eps = self.state.step_size
        p = new_point_batch(self.metric, self.z, self.u, self.g, self.gens)
        # float32 step sizes: what torch.tensor made of the per-chain adapters' Python floats
        # in earlier versions (kept: the same numbers); the kernels cast them to z's dtype
        q, st = self.transition(self.pot, self.metric, p, eps.float(), self.rngs)
        self.z, self.u, self.g = q.z, q.potential, q.g
        self.acceptance = st["acceptance_rate"]

        def stats() -> dict[str, np.ndarray]:
            return {
                "lp": -q.potential.numpy(),
                "step_size": eps.numpy(),
                "energy": q.energy.numpy(),
                **st,
            }

        at_cap = int(np.count_nonzero(st["reached_max_treedepth"])) if self.trajectory_cap else 0
        return Step(q.z, float(np.mean(st["n_steps"])), int(np.sum(st["diverging"])), stats, at_cap)

    def warmup(self, t: int) -> Step:
        step = self._step()
        # float32 acceptance statistics, as the per-chain adapters were fed
        acc = torch.from_numpy(self.acceptance).float()
        state = self.ad.update(self.state, t, self.z, acc)
        if getattr(self, "pooled", None) is not None:
            state = self._pool(state, t)
        self.state = self._search(state)
        if self.state.inverse_mass_matrix is not self.minv:
            self.minv = self.state.inverse_mass_matrix
            self.metric = self._metric_of(self.minv)
        return step

    def _pool(self, state, t: int):
        """Keep a slow window's draws and gradients; at its end, the pooled metric
        (:func:`~zoo.inference.mcmc.metrics.pooled_estimate`) replaces the per-chain one."""
        i = self.state.window
        if i >= len(self.ad.schedule) or self.ad.schedule[i].kind != "slow":
            return state
        self.seen_z.append(self.z.detach().to("cpu", torch.float64))
        self.seen_g.append(self.g.detach().to("cpu", torch.float64))
        if t != self.ad.schedule[i].end:
            return state
        z, g = torch.stack(self.seen_z), torch.stack(self.seen_g)
        self.cov, self.seen_z, self.seen_g = pooled_estimate(self.pooled, z, g), [], []
        metric = pooled_metric(self.cov, self.z.shape[0], self.z)
        diag = metric.diagonal(self.z.shape[0]) if self.cov.dim() == 2 else metric.minv
        return state._replace(inverse_mass_matrix=diag)

    def adapted(self) -> Adapted:
        eps, minv = self.ad.final(self.state)
        return Adapted(eps.numpy().copy(), minv.to("cpu", torch.float64).numpy())

    def draw(self, j: int) -> Step:
        return self._step()

    def reposition(self, z: torch.Tensor, u: torch.Tensor, g: torch.Tensor) -> None:
        """Go on from ``z`` (potentials ``u``, gradients ``g``): a move between transitions."""
        self.z, self.u, self.g = z, u, g
