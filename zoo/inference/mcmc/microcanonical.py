"""MCLMC and MAMS as programs of :func:`zoo.inference.mcmc.loop.sample`.

:class:`MCLMCProgram` runs the kernel of :mod:`~zoo.inference.mcmc.mclmc` under the tuning of
:mod:`~zoo.inference.mcmc.mclmc_adaptation`; :class:`MAMSProgram` the kernel of
:mod:`~zoo.inference.mcmc.mams` under :mod:`~zoo.inference.mcmc.mams_adaptation`. Each chain
has its own step size, length L and diagonal preconditioner, tuned on its own as a
``jax.vmap`` over chains of BlackJAX's ``mclmc_find_L_and_step_size`` and
``adjusted_mclmc_find_L_and_step_size`` would; all chains run as one batch.

Randomness: one ``torch.Generator`` on the potential's device, seeded from ``seed``, draws
every chain's momenta, refresh noise and Metropolis uniforms; a CPU generator from ``seed``
draws the prior starts and then (MAMS) the trajectories' numbers of steps. Chains are thus
not seeded one by one (as ChEES's). The MCLMC warm-up reads one count per transition (the
undone steps) back to the host; MAMS reads the chains' acceptance after each warm-up
transition and the numbers of steps are host arrays.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import torch

from zoo.inference.mcmc.dual_averaging import dual_averaging
from zoo.inference.mcmc.ess import moment_variances
from zoo.inference.mcmc.loop import Step, given_starts
from zoo.inference.mcmc.mams import MAMSInfo, mams_transition, steps_mean_rescale
from zoo.inference.mcmc.mams_adaptation import (
    INITIAL_STEP,
    clamped_dual_average,
    mams_windows,
    moments_rescale,
)
from zoo.inference.mcmc.mams_adaptation import length_from_ess as mams_length_from_ess
from zoo.inference.mcmc.mclmc import (
    GRADS_PER_STEP,
    IsokineticState,
    mclmc_transition,
    unit_vectors,
)
from zoo.inference.mcmc.mclmc_adaptation import (
    length_from_ess,
    mclmc_windows,
    predictor_init,
    predictor_update,
)
from zoo.inference.mcmc.potential import FlatPotential
from zoo.inference.mcmc.result import Adapted

__all__ = ["MAMSProgram", "MCLMCProgram", "device_generators"]


def device_generators(seed: int, device: torch.device) -> tuple[torch.Generator, torch.Generator]:
    """The device generator (momenta, noise) and the CPU one (prior starts) of ``seed``."""
    s = np.random.SeedSequence([seed]).generate_state(2, np.uint64) >> np.uint64(1)
    return (
        torch.Generator(device=device).manual_seed(int(s[0])),
        torch.Generator().manual_seed(int(s[1])),
    )


class MCLMCProgram:
    """MCLMC with BlackJAX's tuning for :func:`~zoo.inference.mcmc.loop.sample` (module
    docstring and :mod:`~zoo.inference.mcmc.mclmc_adaptation`).

    Parameters
    ----------
    seed : int
        Seeds the device generator (momenta, noise) and the CPU one (prior starts).
    warmup : int
        Tuning iterations, split into the windows of :func:`mclmc_windows`.
    step_size : float, optional
        Initial step size; None: BlackJAX's :math:`\\sqrt d / 4`.
    adapt_mass_matrix : bool
        Estimate each chain's diagonal preconditioner in the moments window.
    desired_energy_var : float
        Target energy error variance per dimension (the step size's criterion).
    """

    label = "mclmc"
    #: One integration step per draw: no trajectory to cap.
    trajectory_cap = None
    #: Not saved by a checkpoint: the potential and the schedule made from ``warmup``.
    not_state = ("pot", "windows")

    def __init__(
        self,
        *,
        seed: int,
        warmup: int,
        step_size: float | None,
        adapt_mass_matrix: bool,
        desired_energy_var: float,
    ) -> None:
        if step_size is not None and not (math.isfinite(step_size) and step_size > 0):
            raise ValueError(f"mclmc: step_size must be a positive number, got {step_size}")
        if not (math.isfinite(desired_energy_var) and desired_energy_var > 0):
            raise ValueError(
                f"mclmc: desired_energy_var must be a positive number, got {desired_energy_var}"
            )
        self.seed, self.step_size, self.desired = seed, step_size, desired_energy_var
        self.precondition = adapt_mass_matrix
        self.windows = mclmc_windows(warmup, adapt_mass_matrix)

    def starts(
        self, pot: FlatPotential, init: Mapping[str, torch.Tensor] | None, chains: int
    ) -> tuple[torch.Tensor, str]:
        self.pot, self.chains = pot, chains
        self.gen, cpu = device_generators(self.seed, pot.x.device)
        if init is not None:
            return given_starts(pot, init, chains)
        z = torch.stack([pot.prior_draw(cpu) for _ in range(chains)])
        return z.to(device=pot.x.device, dtype=pot.x.dtype), "prior"

    def _noise(self) -> torch.Tensor:
        z = self.state.z
        return torch.randn(z.shape, generator=self.gen, dtype=z.dtype, device=z.device)

    def start(self, z: torch.Tensor, u: torch.Tensor, g: torch.Tensor) -> None:
        c, d = z.shape
        f64 = dict(dtype=torch.float64, device=z.device)
        self.state = IsokineticState(z, None, u.to(torch.float64), g)
        self.state = self.state._replace(u=unit_vectors(self._noise()))
        eps0 = 0.25 * math.sqrt(d) if self.step_size is None else self.step_size
        self.eps = torch.full((c,), float(eps0), **f64)
        self.length = torch.full((c,), math.sqrt(d), **f64)
        self.minv = torch.ones(c, d, dtype=z.dtype, device=z.device)
        self.sqrt_minv = self.minv
        self._reset_predictor()
        self.sums = (torch.zeros(c, 1, **f64), torch.zeros(c, d, **f64), torch.zeros(c, d, **f64))
        self.trace: list[torch.Tensor] = []

    def reposition(self, z: torch.Tensor, u: torch.Tensor, g: torch.Tensor) -> None:
        """Go on from ``z`` (potentials ``u``, gradients ``g``) with the momenta as they are:
        a move of the position between transitions."""
        self.state = self.state._replace(z=z, potential=u.to(torch.float64), g=g)

    def _reset_predictor(self) -> None:
        self.predictor = predictor_init(self.eps.shape[0], self.eps.device)

    def _transition(self):
        noise = (self._noise(), self._noise())
        self.state, info = mclmc_transition(
            self.pot, self.state, self.eps, self.length, self.sqrt_minv, noise
        )
        return info

    def _predict(self, info) -> None:
        self.predictor, self.eps = predictor_update(
            self.predictor,
            self.eps,
            info.energy_change,
            info.ok,
            self.state.z.shape[1],
            self.desired,
        )

    def _end_moments(self) -> None:
        d = self.state.z.shape[1]
        var = moment_variances(*self.sums, self.minv.to(torch.float64))
        if self.precondition:
            self.minv = var.to(self.state.z.dtype)
            self.sqrt_minv = self.minv.sqrt()
            self.length = torch.full_like(self.length, math.sqrt(d))
            self._reset_predictor()
        else:
            self.length = var.sum(1).sqrt()

    def _end_length(self) -> None:
        draws = torch.stack(self.trace, 1)
        self.trace = []
        self.length = length_from_ess(draws, self.eps, self.length)

    def warmup(self, t: int) -> Step:
        n1, n2, nr, n3 = self.windows
        info = self._transition()
        if t < n1 + n2 + nr:
            self._predict(info)
        if n1 <= t < n1 + n2 and n2 > 1:
            z = self.state.z.to(torch.float64)
            w = (info.ok * self.eps).unsqueeze(1)
            s0, s1, s2 = self.sums
            self.sums = (s0 + w, s1 + w * z, s2 + w * z * z)
            if t == n1 + n2 - 1:
                self._end_moments()
        if t >= n1 + n2 + nr and n3 >= 2:
            self.trace.append(self.state.z)
            if t == n1 + n2 + nr + n3 - 1:
                self._end_length()
        return Step(self.state.z, GRADS_PER_STEP, (~info.ok).sum(), dict)

    def adapted(self) -> Adapted:
        self.eps_host = self.eps.cpu().numpy().copy()
        self.length_host = self.length.cpu().numpy().copy()
        return Adapted(self.eps_host, self.minv.to("cpu", torch.float64).numpy())

    def draw(self, j: int) -> Step:
        info = self._transition()
        potential, c = self.state.potential, self.chains

        def stats() -> dict[str, np.ndarray]:
            st = torch.stack([-potential, info.energy_change, (~info.ok).to(torch.float64)])
            st = st.cpu().numpy()
            return {
                "lp": st[0].copy(),
                "step_size": self.eps_host,
                "n_steps": np.full(c, GRADS_PER_STEP, dtype=np.int64),
                "diverging": st[2] > 0,
                "energy_change": st[1].copy(),
                "decoherence_length": self.length_host,
            }

        return Step(self.state.z, GRADS_PER_STEP, (~info.ok).sum(), stats)


class MAMSProgram:
    """MAMS with the adaptation of BlackJAX for :func:`~zoo.inference.mcmc.loop.sample`
    (module docstring and :mod:`~zoo.inference.mcmc.mams_adaptation`).

    Parameters
    ----------
    seed : int
    warmup : int
        Tuning iterations, five windows.
    target_accept : float
        Dual averaging's target for each chain's acceptance rate.
    step_size : float, optional
        Initial step size; None: BlackJAX's :math:`0.2\\sqrt d` (with :math:`L = \\sqrt d`).
    adapt_mass_matrix : bool
        Estimate each chain's diagonal preconditioner in window 2.
    max_steps : int
        Most integration steps of one trajectory.
    """

    label = "mams"
    #: Not saved by a checkpoint: the potential, the schedule and dual averaging's functions.
    not_state = ("pot", "windows", "da")

    def __init__(
        self,
        *,
        seed: int,
        warmup: int,
        target_accept: float,
        step_size: float | None,
        adapt_mass_matrix: bool,
        max_steps: int,
    ) -> None:
        if step_size is not None and not (math.isfinite(step_size) and step_size > 0):
            raise ValueError(f"mams: step_size must be a positive number, got {step_size}")
        if max_steps < 1:
            raise ValueError(f"mams: need max_steps >= 1, got {max_steps}")
        self.seed, self.target, self.step_size = seed, target_accept, step_size
        self.precondition, self.max_steps = adapt_mass_matrix, max_steps
        self.windows = mams_windows(warmup)
        self.da = dual_averaging()

    def starts(
        self, pot: FlatPotential, init: Mapping[str, torch.Tensor] | None, chains: int
    ) -> tuple[torch.Tensor, str]:
        self.pot, self.chains = pot, chains
        self.gen, self.cpu = device_generators(self.seed, pot.x.device)
        if init is not None:
            return given_starts(pot, init, chains)
        z = torch.stack([pot.prior_draw(self.cpu) for _ in range(chains)])
        return z.to(device=pot.x.device, dtype=pot.x.dtype), "prior"

    def start(self, z: torch.Tensor, u: torch.Tensor, g: torch.Tensor) -> None:
        c, d = z.shape
        self.state = IsokineticState(z, z, u.to(torch.float64), g)
        eps0 = INITIAL_STEP * math.sqrt(d) if self.step_size is None else self.step_size
        host = dict(dtype=torch.float64, device="cpu")  # read on the host every draw
        self.eps = torch.full((c,), float(eps0), **host)
        self.length = torch.full((c,), math.sqrt(d), **host)
        self.minv = torch.ones(c, d, dtype=z.dtype, device=z.device)
        self.sqrt_minv = self.minv
        self.da_state = self.da.init(torch.log(10 * self.eps), torch.log(self.eps))
        f64 = dict(dtype=torch.float64, device=z.device)
        self.sums = (torch.zeros(c, 1, **f64), torch.zeros(c, d, **f64), torch.zeros(c, d, **f64))
        self.trace: list[torch.Tensor] = []

    def reposition(self, z: torch.Tensor, u: torch.Tensor, g: torch.Tensor) -> None:
        """Go on from ``z`` (potentials ``u``, gradients ``g``): a move between transitions."""
        self.state = self.state._replace(z=z, potential=u.to(torch.float64), g=g)

    def _transition(self) -> tuple[np.ndarray, MAMSInfo]:
        z = self.state.z
        mean = (self.length / self.eps).numpy()
        v = torch.rand(self.chains, generator=self.cpu, dtype=torch.float64, device="cpu").numpy()
        n = np.clip(np.ceil(v * steps_mean_rescale(mean)), 1, self.max_steps).astype(np.int64)
        noise = torch.randn(z.shape, generator=self.gen, dtype=z.dtype, device=z.device)
        logu = torch.rand(self.chains, generator=self.gen, dtype=torch.float64, device=z.device)
        eps = self.eps.to(z.device)
        self.state, info = mams_transition(
            self.pot, self.state, eps, n, self.sqrt_minv, noise, logu.log()
        )
        return n, info

    def _dual_average(self, acc: torch.Tensor, fix_length: bool) -> None:
        """One dual-averaging update of every chain's step size (windows 1, 3, 5)."""
        self.da_state, eps = clamped_dual_average(
            self.da, self.da_state, acc, self.target, self.length
        )
        if not fix_length:
            self.length = self.length * eps / self.eps
        self.eps = eps

    def _restart(self, eps: torch.Tensor) -> None:
        self.eps = eps
        self.da_state = self.da.init(torch.log(10 * eps), torch.log(eps))

    def _end_moments(self) -> None:
        eps = torch.exp(self.da.final(self.da_state))
        var = moment_variances(*self.sums, self.minv.to(torch.float64))
        change = moments_rescale(var.cpu(), self.length)
        self.length = self.length * change
        if self.precondition:
            self.minv = var.to(self.state.z.dtype)
            self.sqrt_minv = self.minv.sqrt()
        self._restart(eps * change)

    def _end_length(self) -> None:
        draws = torch.stack(self.trace, 1)
        self.trace = []
        self.length = mams_length_from_ess(draws, self.length)

    def warmup(self, t: int) -> Step:
        e1, e2, e3, e4, _ = self.windows
        n, info = self._transition()
        if e1 <= t < e2:  # window 2: moments at a fixed step size
            z = self.state.z.to(torch.float64)
            w = self.eps.to(z.device).unsqueeze(1)
            s0, s1, s2 = self.sums
            self.sums = (s0 + w, s1 + w * z, s2 + w * z * z)
            if t == e2 - 1:
                self._end_moments()
        elif e3 <= t < e4:  # window 4: L from the autocorrelations
            self.trace.append(self.state.z)
            if t == e4 - 1:
                if len(self.trace) >= 2:
                    self._end_length()
                self._restart(self.eps)
        else:
            self._dual_average(info.acceptance_rate.cpu(), fix_length=t >= e4)
            if t == e3 - 1:  # window 1 ends in window 2's (its last iterate goes on there)
                self._restart(torch.exp(self.da.final(self.da_state)))
        return Step(self.state.z, float(GRADS_PER_STEP * n.mean()), info.diverging.sum(), dict)

    def adapted(self) -> Adapted:
        if self.da_state.step > 0:
            self.eps = torch.exp(self.da.final(self.da_state))
        self.eps_host = self.eps.numpy().copy()
        self.length_host = self.length.numpy().copy()
        minv = self.minv.to("cpu", torch.float64).numpy()
        return Adapted(self.eps_host, minv, None, self.length_host / self.eps_host)

    @property
    def trajectory_cap(self) -> int:
        """``max_steps``: a trajectory of that many steps was cut by it."""
        return self.max_steps

    def draw(self, j: int) -> Step:
        n, info = self._transition()
        potential = self.state.potential

        def stats() -> dict[str, np.ndarray]:
            st = torch.stack(
                [-potential, info.acceptance_rate, info.diverging.to(torch.float64)]
            ).cpu()
            st = st.numpy()
            return {
                "lp": st[0].copy(),
                "step_size": self.eps_host,
                "n_steps": GRADS_PER_STEP * n,
                "diverging": st[2] > 0,
                "acceptance_rate": st[1].copy(),
                "trajectory_length": self.length_host,
            }

        at_cap = int(np.count_nonzero(n >= self.max_steps))
        return Step(
            self.state.z, float(GRADS_PER_STEP * n.mean()), info.diverging.sum(), stats, at_cap
        )
