r"""Adjusted MCLMC (MAMS): isokinetic trajectories with a Metropolis test, for C chains.

The Metropolis-adjusted microcanonical sampler (MAMS; Robnik, Cohn-Gordon & Seljak 2025)
draws a fresh unit momentum, follows the isokinetic dynamics of
:mod:`zoo.inference.mcmc.mclmc` for :math:`n` McLachlan steps of size :math:`\epsilon`
without noise, and accepts the end point with probability
:math:`\min(1, e^{-\Delta U - \Delta K})`, where :math:`\Delta K` is the kinetic energy
change the integrator accumulates: the chain is then exact for any step size, unlike
MCLMC. The number of steps is random, :math:`n = \max(\lceil v\, s(L/\epsilon)\rceil, 1)`
with :math:`v \sim U(0, 1)` and :math:`s` such that the mean is :math:`L/\epsilon`.

Ported from BlackJAX 1.7.1: :func:`mams_transition` is
``mcmc/adjusted_mclmc_dynamic.py::build_kernel`` (momentum ``generate_unit_vector``,
``L_proposal_factor`` infinite, so no refresh inside a trajectory) with
``mcmc/adjusted_mclmc.py::adjusted_mclmc_proposal`` (a non-finite energy error is a
rejection; above 1000 it is a divergence) and :func:`steps_mean_rescale` its ``rescale``
(``make_random_trajectory_length_fn(True)``). The chains of a batch have their own
:math:`n`: each step evaluates the gradient of the chains still moving only (the rows of
the batch), and the batch takes the longest chain's steps. Consecutive steps share the
momentum update between them (McLachlan's last :math:`b_1` and the next first :math:`b_1`
use the same gradient, and the exact momentum flow composes): three momentum updates per two
gradients become two, up to rounding the trajectory of BlackJAX's step repeated
(``tests/zoo/inference/mcmc/test_mclmc.py`` checks both). The zoo caps :math:`n` at
``max_steps``.

:class:`MAMSProgram` ports ``adaptation/adjusted_mclmc_adaptation.py::
adjusted_mclmc_find_L_and_step_size`` chain by chain, with ``frac_tune3 = 0.1`` (the
paper's tuning of :math:`L` from the autocorrelations; BlackJAX 1.7.1's default instead
pins :math:`L = 2\epsilon`, ``target_num_integration_steps``, which is not used here). The
warm-up is split into five equal windows, BlackJAX's fractions 0.1 each:

1. dual averaging of :math:`\log\epsilon` towards ``target_accept`` (0.9, the paper's),
   :math:`L` following :math:`\epsilon` so that :math:`L/\epsilon` stays 5, the step size
   clamped to :math:`[10^{-5}, L/1.1]` (the iterate, as BlackJAX, and here also the
   averaged iterate that becomes the step size: BlackJAX's can leave the bounds when the
   acceptance stays above the target at :math:`L/1.1`, and such chains then diverged on
   every draw);
2. :math:`\epsilon` fixed at window 1's last iterate, the states' moments weighted by
   :math:`\epsilon`; at the end :math:`M^{-1} = \mathrm{diag}(\sigma^2)` (with
   ``adapt_mass_matrix``) and :math:`L` and window 1's averaged :math:`\epsilon` both scaled by
   :math:`\min(1.3\sqrt{\sum\sigma^2}/L, 2)`;
3. dual averaging again (fresh), :math:`L` following :math:`\epsilon`;
4. :math:`L \leftarrow \min(0.5\, L / (\overline{\mathrm{ESS}}/n), 2L)` from the window's
   draws (mean effective sample size per draw over the coordinates);
5. dual averaging at fixed :math:`L`.

Randomness as :class:`~zoo.inference.mcmc.mclmc_adaptation.MCLMCProgram`'s, plus the CPU
generator (after the prior starts) that draws the trajectory lengths; the warm-up reads the
chains' acceptance back to the host after each transition.

References
----------
Robnik, J., Cohn-Gordon, R. and Seljak, U. (2025). Metropolis adjusted microcanonical
Hamiltonian Monte Carlo. arXiv:2503.01707.

Hoffman, M. D. and Gelman, A. (2014). The No-U-Turn Sampler. JMLR 15 (dual averaging).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import NamedTuple

import numpy as np
import torch

from zoo.inference.mcmc.dual_averaging import dual_averaging
from zoo.inference.mcmc.kernel import MAX_ENERGY_ERROR
from zoo.inference.mcmc.loop import Step, given_starts
from zoo.inference.mcmc.mclmc import (
    GRADS_PER_STEP,
    MCLACHLAN,
    IsokineticState,
    esh_momentum_update,
    unit_vectors,
)
from zoo.inference.mcmc.mclmc_adaptation import (
    device_generators,
    ess_per_chain,
    moment_variances,
)
from zoo.inference.mcmc.potential import FlatPotential
from zoo.inference.mcmc.result import Adapted

__all__ = [
    "MAMS_TARGET_ACCEPT",
    "MAX_STEPS",
    "MAMSInfo",
    "MAMSProgram",
    "mams_transition",
    "mams_windows",
    "steps_mean_rescale",
]

#: The paper's target acceptance rate for MAMS.
MAMS_TARGET_ACCEPT = 0.9
#: The zoo's cap on the integration steps of one trajectory.
MAX_STEPS = 1024
#: BlackJAX's ``tuning_factor``, ``Lratio_upperbound``, ``_AVG_FLOOR`` and ``l_factor``.
TUNING_FACTOR, L_RATIO_MAX, AVG_FLOOR, L_FACTOR = 1.3, 2.0, 1.1, 0.5
#: BlackJAX's initial :math:`\epsilon = 0.2\sqrt d` (with :math:`L = \sqrt d`).
INITIAL_STEP = 0.2


class MAMSInfo(NamedTuple):
    """What one :func:`mams_transition` of ``C`` chains did."""

    acceptance_rate: torch.Tensor
    """(C,) float64 :math:`\\min(1, e^{-\\Delta H})`, 0 where not finite."""
    accepted: torch.Tensor
    """(C,) bool."""
    diverging: torch.Tensor
    """(C,) bool: :math:`\\Delta H > 1000` or not finite."""


def steps_mean_rescale(mean: np.ndarray) -> np.ndarray:
    """BlackJAX's ``rescale``: ``s`` with :math:`E\\,\\mathrm{round}(U(0,1)s + 1/2) =`
    ``mean``."""
    k = np.floor(2 * mean - 1)
    return k + k * (mean - 0.5 * (k + 1)) / (k + 1 - mean)


def mams_transition(
    pot,
    state: IsokineticState,
    eps: torch.Tensor,
    n_steps: np.ndarray,
    sqrt_minv: torch.Tensor,
    noise: torch.Tensor,
    log_uniform: torch.Tensor,
) -> tuple[IsokineticState, MAMSInfo]:
    """One MAMS transition: chain ``c`` runs ``n_steps[c]`` McLachlan steps from a fresh unit
    momentum (``noise`` made unit) and is accepted where ``log_uniform`` :math:`< -\\Delta H`.

    Parameters
    ----------
    pot
        Anything with ``value_and_grad_batch`` (rows independent).
    state : IsokineticState
        The chains' states (the momentum is not used).
    eps : Tensor
        ``(C,)`` float64 step sizes.
    n_steps : np.ndarray
        ``(C,)`` integers >= 1.
    sqrt_minv : Tensor
        ``(D,)`` or ``(C, D)``.
    noise, log_uniform : Tensor
        ``(C, D)`` standard normal, ``(C,)`` logarithms of uniforms.
    """
    z, potential, g = state.z, state.potential, state.g
    e = eps.to(torch.float64).unsqueeze(1)
    b1, a, b2 = MCLACHLAN[:3]
    u, v, kinetic = esh_momentum_update(unit_vectors(noise), g, e * b1, sqrt_minv)
    steps = torch.as_tensor(n_steps, device=e.device)
    for s in range(int(n_steps.max())):
        active = n_steps > s
        idx = None if active.all() else torch.as_tensor(np.flatnonzero(active), device=e.device)
        ez, zs, vs, us, ns = (x if idx is None else x[idx] for x in (e, z, v, u, steps))
        sm = sqrt_minv[idx] if idx is not None and sqrt_minv.dim() == 2 else sqrt_minv
        # a McLachlan step whose last momentum update is fused with the next step's first
        # (the same gradient: the exact flow composes, b1 + b1), except on the last step
        zs = zs + (ez * a).to(zs.dtype) * vs
        _, gs = pot.value_and_grad_batch(zs)
        us, vs, dk1 = esh_momentum_update(us, gs, ez * b2, sm)
        zs = zs + (ez * a).to(zs.dtype) * vs
        us_pot, gs = pot.value_and_grad_batch(zs)
        last = (ns == s + 1).unsqueeze(1)
        us, vs, dk2 = esh_momentum_update(us, gs, torch.where(last, ez * b1, ez * (2 * b1)), sm)
        if idx is None:
            z, u, v, g, potential = zs, us, vs, gs, us_pot.to(torch.float64)
            kinetic = kinetic + dk1 + dk2
        else:
            z, u, v, g = (x.index_copy(0, idx, y) for x, y in ((z, zs), (u, us), (v, vs), (g, gs)))
            potential = potential.index_copy(0, idx, us_pot.to(torch.float64))
            kinetic = kinetic.index_add(0, idx, dk1 + dk2)
    cur = IsokineticState(z, u, potential, g)
    dh = cur.potential - state.potential + kinetic
    finite = torch.isfinite(dh)
    diverging = ~finite | (dh > MAX_ENERGY_ERROR)
    acc = torch.where(finite, torch.exp(torch.clamp(-dh, max=0.0)), 0.0)
    accept = (log_uniform.to(torch.float64) < -dh) & finite
    a = accept.unsqueeze(1)
    new = IsokineticState(
        torch.where(a, cur.z, state.z),
        cur.u,
        torch.where(accept, cur.potential, state.potential),
        torch.where(a, cur.g, state.g),
    )
    return new, MAMSInfo(acc, accept, diverging)


def mams_windows(warmup: int) -> tuple[int, ...]:
    """The five windows' ends (module docstring): equal, the last takes the remainder."""
    n = warmup // 5
    return (n, 2 * n, 3 * n, 4 * n, warmup)


class MAMSProgram:
    """MAMS with the adaptation of BlackJAX for :func:`~zoo.inference.mcmc.loop.sample`
    (module docstring).

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

    def __init__(
        self,
        *,
        seed: int,
        warmup: int,
        target_accept: float,
        step_size: float | None,
        adapt_mass_matrix: bool,
        max_steps: int = MAX_STEPS,
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
        self.eps = torch.full((c,), float(eps0), dtype=torch.float64)
        self.length = torch.full((c,), math.sqrt(d), dtype=torch.float64)
        self.minv = torch.ones(c, d, dtype=z.dtype, device=z.device)
        self.sqrt_minv = self.minv
        self.da_state = self.da.init(torch.log(10 * self.eps), torch.log(self.eps))
        f64 = dict(dtype=torch.float64, device=z.device)
        self.sums = (torch.zeros(c, 1, **f64), torch.zeros(c, d, **f64), torch.zeros(c, d, **f64))
        self.trace: list[torch.Tensor] = []

    def _transition(self) -> tuple[np.ndarray, MAMSInfo]:
        z = self.state.z
        mean = (self.length / self.eps).numpy()
        v = torch.rand(self.chains, generator=self.cpu, dtype=torch.float64).numpy()
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
        st = self.da.update(self.da_state, self.target - acc)
        lo, hi = math.log(1e-5), torch.log(self.length / AVG_FLOOR)
        x, x_avg = torch.minimum(st.x.clamp(min=lo), hi), torch.minimum(st.x_avg.clamp(min=lo), hi)
        self.da_state = st._replace(x=x, x_avg=x_avg)
        eps = torch.exp(x)
        if not fix_length:
            self.length = self.length * eps / self.eps
        self.eps = eps

    def _restart(self, eps: torch.Tensor) -> None:
        self.eps = eps
        self.da_state = self.da.init(torch.log(10 * eps), torch.log(eps))

    def _end_moments(self) -> None:
        eps = torch.exp(self.da.final(self.da_state))
        var = moment_variances(*self.sums, self.minv.to(torch.float64))
        change = torch.clamp(TUNING_FACTOR * var.sum(1).sqrt().cpu() / self.length, 0, L_RATIO_MAX)
        self.length = self.length * change
        if self.precondition:
            self.minv = var.to(self.state.z.dtype)
            self.sqrt_minv = self.minv.sqrt()
        self._restart(eps * change)

    def _end_length(self) -> None:
        draws = torch.stack(self.trace, 1)
        self.trace = []
        ess = ess_per_chain(draws).cpu()
        moved = ess > 0
        per_draw = torch.where(moved, ess, 0).sum(1) / moved.sum(1).clamp(min=1) / draws.shape[1]
        new = torch.minimum(L_FACTOR * self.length / per_draw, L_RATIO_MAX * self.length)
        self.length = torch.where(moved.any(1), new, self.length)

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
        return Adapted(self.eps_host, self.minv.to("cpu", torch.float64).numpy())

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

        return Step(self.state.z, float(GRADS_PER_STEP * n.mean()), info.diverging.sum(), stats)
