"""ChEES-HMC as a program of :func:`zoo.inference.mcmc.loop.sample`: the kernel of
:mod:`~zoo.inference.mcmc.chees` with the adaptation of
:mod:`~zoo.inference.mcmc.chees_adaptation`, all chains as one batch.

Warm-up iteration :math:`t`: one transition of :math:`n_t` leapfrog steps at the current
:math:`\\epsilon` and :math:`T` (Halton jitter :math:`u_t`), the adaptation's statistics of it
(one host synchronization), the step-size/trajectory update, and inside Stan's slow windows
the pooled Welford estimate of all chains' states; at a window's end the regularized variance
becomes :math:`M^{-1}` and the step size is searched again. Draws: :math:`\\epsilon`,
:math:`M^{-1}` and :math:`T` fixed, the Halton index going on from the warm-up.

Randomness: one ``torch.Generator`` on the potential's device, seeded from ``seed``, draws
the momenta and Metropolis uniforms of all chains as ``(C, D)`` and ``(C,)`` tensors, and one
CPU generator seeded from ``seed`` draws the prior starts (``init=None``). Chains are thus not
seeded one by one (chain ``c`` of a run with ``C`` chains is not chain ``c`` of another
``C``); the kernel is row-independent given its noise. The warm-up reads two statistics per
transition back to the host, the sampling phase only the kept draws.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import torch

from zoo.inference.mcmc.batched import BatchMetric
from zoo.inference.mcmc.chees import chees_transition, halton, num_steps
from zoo.inference.mcmc.chees_adaptation import (
    BETA1_ONE_CHAIN,
    CENTRE_WINDOW,
    chees_adaptation,
    chees_statistics,
)
from zoo.inference.mcmc.loop import Step, given_starts
from zoo.inference.mcmc.potential import FlatPotential
from zoo.inference.mcmc.result import Adapted
from zoo.inference.mcmc.step_size import find_shared_step_size
from zoo.inference.mcmc.trajectory_floor import floor_time, min_leapfrog_steps
from zoo.inference.mcmc.welford import chan_merge, regularized_variance, welford_init
from zoo.inference.mcmc.window_adaptation import build_schedule

__all__ = ["ChEESProgram"]


def _seeds(seed: int) -> tuple[int, int]:
    s = np.random.SeedSequence([seed]).generate_state(2, np.uint64) >> np.uint64(1)
    return int(s[0]), int(s[1])


class ChEESProgram:
    """ChEES-HMC for :func:`zoo.inference.mcmc.loop.sample` (module docstring).

    Parameters
    ----------
    seed : int
        Seeds the device generator (momenta, Metropolis tests) and the CPU generator of the
        prior starts; chains are not seeded one by one.
    warmup : int
        Warm-up iterations (Stan's windows for the mass matrix).
    target_accept : float
        Dual averaging's target for the harmonic mean of the chains' acceptance.
    step_size : float, optional
        Initial step size; None searches one (:func:`~zoo.inference.mcmc.step_size.find_shared_step_size` from 1).
    max_leapfrog : int
        :math:`L_{\\max}`, at most this many leapfrog steps per transition.
    adapt_mass_matrix : bool
        Estimate the diagonal inverse mass matrix (pooled across chains); else identity.
    trajectory_length : float, optional
        Initial :math:`T`; None starts at the step size (one leapfrog step), as BlackJAX.
    learning_rate : float
        Adam's rate on :math:`\\log T`.
    adam_restart : int, optional
        Restart Adam's moments at this dual-averaging iteration after each (re)start.
    min_trajectory : float or str, optional
        A floor on every transition's integration time: at least :math:`\\lceil T_{\\min} /
        \\epsilon \\rceil` steps (at most ``max_leapfrog``), whatever the jitter drew; a
        number or ``prior`` (:mod:`~zoo.inference.mcmc.trajectory_floor`, under the pooled
        diagonal metric). The adaptation of :math:`T` is unchanged. None: no floor.
    """

    label = "chees"
    #: Attributes that a checkpoint does not save (:func:`~zoo.inference.mcmc.loop.sample`):
    #: the potential, the adaptation's functions and the schedule made from ``warmup``.
    not_state = ("pot", "ad", "schedule")

    def __init__(
        self,
        *,
        seed: int,
        warmup: int,
        target_accept: float,
        step_size: float | None,
        max_leapfrog: int,
        adapt_mass_matrix: bool,
        trajectory_length: float | None,
        learning_rate: float,
        adam_restart: int | None,
        min_trajectory: float | str | None = None,
    ) -> None:
        if max_leapfrog < 1:
            raise ValueError(f"chees: need max_leapfrog >= 1, got {max_leapfrog}")
        if step_size is not None and not (math.isfinite(step_size) and step_size > 0):
            raise ValueError(f"chees: step_size must be a positive number, got {step_size}")
        self.seed, self.num_warmup, self.step_size = seed, warmup, step_size
        self.target_accept, self.max_leapfrog = target_accept, max_leapfrog
        self.adapt_mass_matrix, self.trajectory_length = adapt_mass_matrix, trajectory_length
        self.learning_rate, self.adam_restart = learning_rate, adam_restart
        if min_trajectory is not None:  # set only then: checkpoints without it keep their layout
            self.min_trajectory = min_trajectory

    @property
    def trajectory_cap(self) -> int:
        """``max_leapfrog``: a transition of that many steps was cut by it."""
        return self.max_leapfrog

    def starts(
        self, pot: FlatPotential, init: Mapping[str, torch.Tensor] | None, chains: int
    ) -> tuple[torch.Tensor, str]:
        self.pot, self.chains = pot, chains
        device, dtype = pot.x.device, pot.x.dtype
        s_dev, s_cpu = _seeds(self.seed)
        self.gen = torch.Generator(device=device).manual_seed(s_dev)
        if init is not None:
            return given_starts(pot, init, chains)
        cpu = torch.Generator().manual_seed(s_cpu)
        z = torch.stack([pot.prior_draw(cpu) for _ in range(chains)])
        return z.to(device=device, dtype=dtype), "prior"

    def start(self, z: torch.Tensor, u: torch.Tensor, g: torch.Tensor) -> None:
        pot, device = self.pot, self.pot.x.device
        self.z, self.u, self.g = z, u.to(torch.float64), g
        self.minv = torch.ones(pot.dim, dtype=z.dtype, device=device)
        eps0 = self.step_size
        if eps0 is None:
            eps0 = find_shared_step_size(pot, z, self.u, g, self.minv, 1.0, self.gen)
        self.ad = chees_adaptation(
            target_accept=self.target_accept,
            max_leapfrog=self.max_leapfrog,
            learning_rate=self.learning_rate,
            adam_restart=self.adam_restart,
            beta1=0.0 if self.chains > 1 else BETA1_ONE_CHAIN,
        )
        self.state = self.ad.init(eps0, self.trajectory_length)
        self.schedule = build_schedule(self.num_warmup) if self.num_warmup > 0 else ()
        self.window = 0
        self.welford = welford_init((pot.dim,), device=device)
        self.centre = None
        if self.chains == 1:
            zero = torch.zeros((), dtype=torch.float64, device=device)
            self.centre = (z[0].to(torch.float64), zero)

    def reposition(self, z: torch.Tensor, u: torch.Tensor, g: torch.Tensor) -> None:
        """Go on from ``z`` (potentials ``u``, gradients ``g``): a move between transitions."""
        self.z, self.u, self.g = z, u.to(torch.float64), g

    def _transition(self, jitter: float, log_traj: float, log_eps: float, eps: float):
        z = self.z
        n = num_steps(jitter, log_traj, log_eps, self.max_leapfrog)
        floor = getattr(self, "min_trajectory", None)
        if floor is not None:
            metric = BatchMetric(self.minv.unsqueeze(0))
            time = floor_time(floor, self.pot, metric, 1)
            n = max(n, min(min_leapfrog_steps(time, torch.tensor([eps])), self.max_leapfrog))
        noise = torch.randn(z.shape, generator=self.gen, dtype=z.dtype, device=z.device)
        logu = torch.rand(
            self.chains, generator=self.gen, dtype=torch.float64, device=z.device
        ).log()
        self.z, self.u, self.g, info = chees_transition(
            self.pot, z, self.u, self.g, eps, self.minv, n, noise, logu
        )
        return n, info

    def warmup(self, t: int) -> Step:
        state, z0 = self.state, self.z
        eps_t = math.exp(state.log_step_size)
        n, info = self._transition(
            halton(t), state.log_trajectory_length, state.log_step_size, eps_t
        )
        z = self.z
        if self.centre is not None:  # one chain: running mean and spread of its states
            wt = 1.0 / min(t + 2, CENTRE_WINDOW)
            mean = self.centre[0] + wt * (z[0].to(torch.float64) - self.centre[0])
            dev = z[0].to(torch.float64) - mean
            self.centre = (mean, self.centre[1] + wt * ((dev * dev).sum() - self.centre[1]))
        hm, grad, nd = chees_statistics(z0, info, n * eps_t, self.centre).tolist()
        state = self.ad.update(state, hm, grad)
        while self.window < len(self.schedule) and self.schedule[self.window].end < t:
            self.window += 1
        w = self.schedule[self.window]
        if self.adapt_mass_matrix and w.kind == "slow":
            self.welford = chan_merge(self.welford, z.to(torch.float64))
            if t == w.end:
                self.minv = regularized_variance(self.welford).to(z.dtype)
                self.welford = welford_init((self.pot.dim,), device=z.device)
                eps = find_shared_step_size(
                    self.pot, z, self.u, self.g, self.minv, math.exp(state.log_step_size), self.gen
                )
                state = self.ad.restart(state, eps)
        self.state = state
        return Step(z, n, int(nd), dict)

    def adapted(self) -> Adapted:
        eps, traj = self.ad.final(self.state)
        self.eps, self.traj = eps, traj  # the loop checks eps before the first draw
        minv = self.minv.to("cpu", torch.float64).numpy()
        return Adapted(np.full(self.chains, eps), minv, traj, np.full(self.chains, traj / eps))

    def draw(self, j: int) -> Step:
        if j == 0:
            self.log_eps, self.log_traj = math.log(self.eps), math.log(self.traj)
        n, info = self._transition(
            halton(self.num_warmup + j), self.log_traj, self.log_eps, self.eps
        )
        u, c = self.u, self.chains

        def stats() -> dict[str, np.ndarray]:
            st = (
                torch.stack(
                    [-u, info.energy, info.acceptance_rate, info.diverging.to(torch.float64)]
                )
                .cpu()
                .numpy()
            )
            return {
                "lp": st[0].copy(),
                "step_size": np.full(c, self.eps),
                "n_steps": np.full(c, n, dtype=np.int64),
                "diverging": st[3] > 0,
                "energy": st[1].copy(),
                "acceptance_rate": st[2].copy(),
            }

        return Step(
            self.z, n, info.diverging.sum(), stats, self.chains if n >= self.max_leapfrog else 0
        )
