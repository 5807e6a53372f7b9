"""Parallel tempering for the batched kernels under the window adaptation (NUTS, HMC).

Why: past depth 3 the posterior of a narrow ReLU network is multimodal in a way no
symmetry explains. The default's depth-4 chains settle in different arrangements of the
first layer's hyperplanes, of nearly the same log density, and cross between them too
rarely for any chain length on a CPU (``docs/notes/samplers.md``). A tempered posterior

.. math:: \\pi_\\beta(\\theta) \\propto p(y \\mid x, \\theta)^{\\beta}\\, p(\\theta),
          \\qquad 0 < \\beta \\le 1,

flattens the likelihood's barriers and keeps the prior: on that network at
:math:`\\beta = 0.1` the same sampler's chains pass silver's gates in 600 draws where at
:math:`\\beta = 1` they fail after 1500. Replica exchange (Swendsen & Wang 1986; Geyer
1991) runs a ladder :math:`1 = \\beta_0 > \\beta_1 > \\dots > \\beta_{K-1}` of chains and
proposes to swap the states of neighbouring rungs, accepted with probability

.. math:: \\min\\{1, \\exp[(\\beta_k - \\beta_{k+1})(\\ell_k - \\ell_{k+1})]\\},
          \\qquad \\ell = -\\log p(y \\mid x, \\theta),

which leaves the product of the rungs' targets invariant, so the :math:`\\beta = 1` rung's
draws are draws of the posterior. The swaps are the deterministic even-odd scheme of
non-reversible parallel tempering (Okabe et al. 2001; Syed, Bouchard-Côté, Deligiannidis &
Doucet 2022, JRSS-B): even pairs after even transitions, odd pairs after odd ones, which
carries a state from the hottest rung to the coldest in about :math:`K` swaps instead of
:math:`K^2`. The ladder is geometric, :math:`\\beta_k = \\beta_{\\min}^{k/(K-1)}`.

Layout: ``C`` ladders of ``K`` rungs are one batch of ``C K`` rows, rung-major (rows
``k C .. (k + 1) C - 1`` are rung ``k``), each row with its own seed, step size and diagonal
mass matrix from Stan's windows, adapted at its own temperature (a row is a rung: swaps move
states, not rows). The loop (:func:`~zoo.inference.mcmc.loop.sample`) sees only the ``C``
cold rows: their draws, statistics, divergences and cuts at the cap are the run's, so the
stopping rule, the thinning, the checkpoints and the grade read the posterior's chains
alone. Every transition costs ``K`` times the untempered one's gradients.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from zoo.inference.mcmc import replay
from zoo.inference.mcmc.loop import Step, chain_rngs
from zoo.inference.mcmc.potential import FlatPotential
from zoo.inference.mcmc.windowed import WindowedProgram
from zoo.seeds import Stream, seed_for

__all__ = ["TemperedPotential", "TemperedProgram", "ladder"]


def ladder(rungs: int, beta_min: float) -> np.ndarray:
    """The geometric ladder :math:`\\beta_k = \\beta_{\\min}^{k / (K - 1)}`, ``k < K``:
    ``(K,)`` float64 from 1 down to ``beta_min``."""
    if rungs < 2 or not 0 < beta_min < 1:
        raise ValueError(
            f"tempering needs rungs >= 2 and 0 < beta_min < 1; got {rungs}, {beta_min}"
        )
    return beta_min ** (np.arange(rungs) / (rungs - 1))


class TemperedPotential:
    """:math:`U_\\beta(z) = \\beta\\, U(z) + (1 - \\beta)\\, U_0(z)` per row, with ``U`` the
    posterior's potential and :math:`U_0 = -\\log p(z)` the prior's: the likelihood raised
    to each row's :math:`\\beta`, the prior kept. Everything else (the layout, the prior's
    scale, ``ravel``) is the wrapped :class:`~zoo.inference.mcmc.potential.FlatPotential`'s.

    Parameters
    ----------
    base : FlatPotential
        The posterior's potential (its ``_log_prior`` gives :math:`U_0`).
    betas : Tensor
        ``(R,)`` the rows' inverse temperatures, on the base's device.
    """

    def __init__(self, base: FlatPotential, betas: torch.Tensor) -> None:
        self.base = base
        self.betas = betas
        self._b64 = betas.double()
        self._b = betas.to(base.x.dtype).unsqueeze(1)
        self._1mb64, self._1mb = 1 - self._b64, 1 - self._b  # the prior's weights
        self._closed = not base.learned_noise and base._uniform_prec is not None
        # whether the base gives its U unfinished (then the rows' U are finished later too)
        self._later = getattr(base.value_and_grad_batch, "finishes_later", False)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.base, name)

    def _prior_raw(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """:math:`U_0(z)` before :meth:`_finish_prior` and its gradient (closed form for a
        Normal prior of one scale, autograd otherwise: learned noise, per-site scales)."""
        base = self.base
        if self._closed:
            d = z if base._zero_loc else z - base._loc
            return (0.5 * base._uniform_prec) * (d * d).sum(-1), d * base._uniform_prec
        z = z.detach().requires_grad_(True)
        u0 = -base._log_prior(z)
        (g,) = torch.autograd.grad(u0.sum(), z)
        return u0.detach(), g

    def _finish_prior(self, u0: torch.Tensor) -> torch.Tensor:
        return u0.double() - self.base._const if self._closed else u0.double()

    def prior_energy_and_grad(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """:math:`U_0(z)` ``(R,)`` float64 and its gradient ``(R, D)``: closed form for a
        Normal prior of one scale, autograd otherwise (learned noise, per-site scales)."""
        u0, g0 = self._prior_raw(z)
        return self._finish_prior(u0), g0

    def value_and_grad_batch(
        self, z: torch.Tensor, finish: bool = True, into: tuple | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(U_beta (R,) float64, its gradient (R, D))``.

        ``finish=False``: instead of :math:`U_\\beta`, the base's ``U`` and the prior's
        :math:`U_0` side by side, ``(R, 2)``, as far as the base takes them
        (:meth:`finish_batch` weighs them, elementwise: the same bits as at once), so that
        batched NUTS weighs a subtree's in one operation. ``into``: as
        :meth:`FlatPotential.value_and_grad_batch
        <zoo.inference.mcmc.potential.FlatPotential.value_and_grad_batch>`'s. Where the
        base's gradient is replayed (:mod:`~zoo.inference.mcmc.replay`) and the prior is
        closed, the prior's term of the base's ``U`` is :math:`U_0`'s (the same operations on
        the same operands), so it is not computed twice.
        """
        base, z = self.base, z.detach()
        if self._closed and replay.replays(base):
            kept: list = []
            u, g = replay.value_and_grad(base, z, prior=kept)
            u0, g0 = kept[0], (z if base._zero_loc else z - base._loc) * base._uniform_prec
        else:
            u, g = (
                base.value_and_grad_batch(z, False) if self._later else base.value_and_grad_batch(z)
            )
            u0, g0 = self._prior_raw(z)
            if not self._later:
                u0 = self._finish_prior(u0)
        u = torch.stack([u, u0], -1, out=None if into is None else into[0])
        g = torch.add(self._b * g, self._1mb * g0, out=None if into is None else into[1])
        return (self.finish_batch(u) if finish else u), g

    value_and_grad_batch.finishes_later = True
    value_and_grad_batch.writes_into = True

    def finish_batch(self, u: torch.Tensor) -> torch.Tensor:
        """:math:`U_\\beta` from :meth:`value_and_grad_batch`'s ``finish=False`` pairs, of
        any leading shape: :math:`\\beta\\, U + (1 - \\beta)\\, U_0`, float64."""
        ub, u0 = u.unbind(-1)
        if self._later:
            ub, u0 = self.base.finish_batch(ub), self._finish_prior(u0)
        return self._b64 * ub + self._1mb64 * u0

    def grad_batch(self, z: torch.Tensor) -> torch.Tensor:
        """The gradient of :meth:`value_and_grad_batch` alone."""
        g = self.base.grad_batch(z)
        g0 = self._prior_raw(z.detach())[1]
        return self._b * g + self._1mb * g0

    def likelihood_energy(self, z: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        """:math:`\\ell(z) = -\\log p(y \\mid x, z)` up to a constant, ``(R,)`` float64, from
        the rows' tempered potentials ``u``: :math:`(U_\\beta - U_0) / \\beta`."""
        u0 = self.prior_energy_and_grad(z.detach())[0]
        return (u - u0) / self._b64


class TemperedProgram(WindowedProgram):
    """A :class:`~zoo.inference.mcmc.windowed.WindowedProgram` over ``C`` ladders of ``K``
    rungs (module docstring) that shows the loop its ``C`` cold chains.

    Parameters
    ----------
    rungs, beta_min : int, float
        The ladder (:func:`ladder`).
    move : callable, optional
        An exact move along the units' symmetries
        (:class:`~zoo.inference.mcmc.symmetry.SymmetryMove`), applied to every row after
        every transition: it moves along orbits the likelihood is constant on, so it leaves
        every rung's target invariant.
    **kw
        :class:`~zoo.inference.mcmc.windowed.WindowedProgram`'s.
    """

    not_state = (*WindowedProgram.not_state, "base", "move")

    def __init__(self, *args: Any, rungs: int, beta_min: float, move=None, **kw: Any) -> None:
        super().__init__(*args, **kw)
        if getattr(self, "pooled", None) is not None:
            raise ValueError(
                f"tempering adapts each rung's own mass matrix; the pooled {self.pooled} "
                "metric mixes the rungs: use mass_matrix: diag"
            )
        self.rungs, self.beta_min, self.move = int(rungs), float(beta_min), move
        self.betas = ladder(self.rungs, self.beta_min)
        self.move_gen = None if move is None else move.gen
        ss = np.random.SeedSequence([seed_for(self.seed, Stream.TEMPERING)])
        self.swap_seed = int(ss.generate_state(1, np.uint64)[0] >> np.uint64(1))
        self.transitions = 0
        self.tried = np.zeros(self.rungs - 1, dtype=np.int64)
        self.taken = np.zeros(self.rungs - 1, dtype=np.int64)
        self.round_trips = 0

    def starts(
        self, pot: FlatPotential, init: Mapping[str, torch.Tensor] | None, chains: int
    ) -> tuple[torch.Tensor, str]:
        """The ``C`` cold chains' starts (every rung of a ladder starts where its cold chain
        does) and one seed per row: the cold rows' are those the untempered chains take."""
        z, how = super().starts(pot, init, chains)
        self.chains, rows = chains, chains * self.rungs
        for c in range(chains, rows):
            rng, gen = chain_rngs(self.seed, c)
            self.gens.append(gen)
            self.rngs.append(rng)
        self._bind(pot)
        return z, how

    def _bind(self, pot: FlatPotential) -> None:
        self.base = pot
        betas = torch.tensor(self.betas, device=pot.x.device)
        self.pot = TemperedPotential(pot, betas.repeat_interleave(self.chains))
        self.swap_gen = torch.Generator(device="cpu").manual_seed(self.swap_seed)

    def start(self, z: torch.Tensor, u: torch.Tensor, g: torch.Tensor) -> None:
        zk = z.repeat(self.rungs, 1)
        uk, gk = self.pot.value_and_grad_batch(zk)
        # replica r sits in row r; -1: not yet at an end of the ladder, 0: last at the cold
        # end, 1: last at the hot end (a round trip: hot end, then cold end)
        self.replica = torch.arange(zk.shape[0])
        self.last_end = torch.full((zk.shape[0],), -1, dtype=torch.int64)
        super().start(zk, uk, gk)

    def restored(self) -> None:
        """After a checkpoint's state was set: the metric, and the symmetry move's generator
        (saved as this program's ``move_gen``)."""
        super().restored()
        if self.move is not None:
            self.move.gen = self.move_gen

    def adapted(self):
        """The cold rows' step sizes and mass matrices (the draws' own)."""
        a = super().adapted()
        c = self.chains
        minv = a.inverse_mass_matrix
        return a._replace(
            step_size=a.step_size[:c], inverse_mass_matrix=None if minv is None else minv[:c]
        )

    def _swap(self) -> None:
        """One even-odd round of swaps between neighbouring rungs, then the symmetry move;
        the rows' potentials and gradients at their own temperature re-evaluated."""
        c, k = self.chains, self.rungs
        ell = self.pot.likelihood_energy(self.z, self.u).cpu().view(k, c)
        uniforms = torch.rand((k - 1, c), generator=self.swap_gen, dtype=torch.float64)
        betas = self.betas
        order = torch.arange(k * c)
        for r in range(self.transitions % 2, k - 1, 2):
            log_a = (betas[r] - betas[r + 1]) * (ell[r] - ell[r + 1])
            ok = uniforms[r].log() < log_a
            self.tried[r] += c
            self.taken[r] += int(ok.sum())
            lo, hi = order[r * c : (r + 1) * c].clone(), order[(r + 1) * c : (r + 2) * c].clone()
            order[r * c : (r + 1) * c] = torch.where(ok, hi, lo)
            order[(r + 1) * c : (r + 2) * c] = torch.where(ok, lo, hi)
        self.transitions += 1
        self.replica = self.replica[order]
        self._count_round_trips()
        z = self.z[order.to(self.z.device)]
        if self.move is not None:
            z = self.move(z)
        self.z = z
        self.u, self.g = self.pot.value_and_grad_batch(z)

    def _count_round_trips(self) -> None:
        c = self.chains
        cold, hot = self.replica[:c], self.replica[-c:]
        self.round_trips += int((self.last_end[cold] == 1).sum())
        self.last_end[cold] = 0
        self.last_end[hot] = 1

    def _cold(self, step: Step) -> Step:
        """The step as the loop sees it: the cold rows only."""
        c = self.chains
        # built now, every transition: the divergences and cuts are per row, and the cold
        # rows' log density is that after the swaps (the row's state), not the transition's
        held = {k: np.asarray(v)[:c] for k, v in step.stats().items()}
        held["lp"] = -self.u[:c].cpu().numpy()
        at_cap = int(np.count_nonzero(held["reached_max_treedepth"])) if self.trajectory_cap else 0
        return Step(
            self.z[:c],
            float(np.mean(held["n_steps"])),
            int(np.sum(held["diverging"])),
            lambda: held,
            at_cap,
        )

    def warmup(self, t: int) -> Step:
        step = super().warmup(t)
        self._swap()
        return self._cold(step)

    def draw(self, j: int) -> Step:
        step = super().draw(j)
        self._swap()
        return self._cold(step)

    def reposition(self, z: torch.Tensor, u: torch.Tensor, g: torch.Tensor) -> None:
        raise ValueError("a tempered program takes its symmetry moves itself (move=)")

    def facts(self) -> dict[str, Any]:
        """What a report needs of the ladder: its size and hottest rung, the lowest swap
        acceptance of a neighbouring pair (the ladder's bottleneck) and the replicas' round
        trips (hot end to cold end), over the warm-up and the draws."""
        return {
            "tempering_rungs": self.rungs,
            "tempering_beta_min": self.beta_min,
            "tempering_swap_rate_min": float(self.swap_rates().min()),
            "tempering_round_trips": int(self.round_trips),
        }

    def swap_rates(self) -> np.ndarray:
        """``(K - 1,)`` each neighbouring pair's swap acceptance so far."""
        return self.taken / np.maximum(self.tried, 1)
