r"""MCLMC as a program of :func:`zoo.inference.mcmc.loop.sample`: its kernel and its tuning.

The kernel is :func:`~zoo.inference.mcmc.mclmc.mclmc_transition`; the tuning ports
BlackJAX 1.7.1's ``adaptation/mclmc_adaptation.py::mclmc_find_L_and_step_size``
(Robnik, De Luca, Silverstein & Seljak 2023, section on the step size and :math:`L`), chain
by chain (as ``jax.vmap`` of it over chains would):

1. **Step size** (``make_L_step_size_adaptation``'s predictor). MCLMC has no Metropolis
   test; its bias is set by the energy error per dimension. After each step with energy
   change :math:`\Delta E`, :math:`\xi = \Delta E^2 / (d\,\mathrm{Var}^*) + 10^{-8}` with
   the desired energy variance per dimension :math:`\mathrm{Var}^* = 5\cdot 10^{-4}`; since
   :math:`\mathrm{Var}[E] \propto \epsilon^6` (Bou-Rabee & Sanz-Serna 2018), the step size
   is :math:`\epsilon = (\bar x / \bar t)^{-1/6}` with the exponentially decaying, weighted
   averages :math:`\bar x \leftarrow r \bar x + w\xi/\epsilon^6`,
   :math:`\bar t \leftarrow r \bar t + w`, :math:`r = (n_{\rm eff} - 1)/(n_{\rm eff} + 1)`,
   :math:`n_{\rm eff} = 150`, and the weight :math:`w = \exp(-\tfrac12(\log\xi /
   (6 \cdot 1.5))^2)` that trusts estimates near the target. A non-finite step caps the
   step size at 0.8 times the current one (BlackJAX's ``handle_nans``).
2. **Size of the posterior and preconditioner.** In the second window the states'
   first and second moments are averaged with weights :math:`\epsilon`; their variances
   give :math:`L = \sqrt{\sum_i \sigma_i^2}`, or with ``adapt_mass_matrix`` the diagonal
   inverse mass matrix :math:`M^{-1} = \mathrm{diag}(\sigma^2)`, :math:`L = \sqrt d`, and
   a third of the window more of step-size tuning in the new metric.
3. **L from the autocorrelations** (``make_adaptation_L``): the last window's draws give
   each coordinate's effective sample size; :math:`L = 0.4\,\epsilon\,\overline{n/
   \mathrm{ESS}}` (the mean integrated autocorrelation time in steps, times the step
   size, times ``l_factor``).

BlackJAX counts the windows as fractions (0.1, 0.1, 0.1) of the number of draws that will
follow; here the zoo's ``warmup`` is given, so its iterations are split in BlackJAX's
proportions: 3 : 3 : 1 : 3 (step size, moments, re-tuning, :math:`L`) with the
preconditioner, 1 : 1 : 1 without. BlackJAX's start is kept: :math:`L = \sqrt d`,
:math:`\epsilon = \sqrt d / 4` (or the spec's ``step_size``), :math:`M^{-1} = I`.

Randomness: one ``torch.Generator`` on the potential's device, seeded from ``seed``, draws
every chain's momenta and refresh noise; a CPU generator from ``seed`` draws the prior
starts. The warm-up reads one count per transition (the non-finite steps) back to the host.

References
----------
Robnik, J., De Luca, G. B., Silverstein, E. and Seljak, U. (2023). Microcanonical
Hamiltonian Monte Carlo. JMLR 24(311).

Bou-Rabee, N. and Sanz-Serna, J. M. (2018). Geometric integrators and the Hamiltonian Monte
Carlo method. Acta Numerica 27.

Geyer, C. J. (1992). Practical Markov chain Monte Carlo. Statistical Science 7(4).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import torch

from zoo.inference.mcmc.loop import Step, given_starts
from zoo.inference.mcmc.mclmc import (
    GRADS_PER_STEP,
    IsokineticState,
    mclmc_transition,
    unit_vectors,
)
from zoo.inference.mcmc.potential import FlatPotential
from zoo.inference.mcmc.result import Adapted

__all__ = [
    "DESIRED_ENERGY_VAR",
    "MCLMCProgram",
    "device_generators",
    "ess_per_chain",
    "mclmc_windows",
    "moment_variances",
]

#: BlackJAX's ``desired_energy_var``: the target energy error variance per dimension.
DESIRED_ENERGY_VAR = 5e-4
#: BlackJAX's ``trust_in_estimate``, ``num_effective_samples`` and ``l_factor``.
TRUST_IN_ESTIMATE, NUM_EFFECTIVE_SAMPLES, L_FACTOR = 1.5, 150, 0.4


def device_generators(seed: int, device: torch.device) -> tuple[torch.Generator, torch.Generator]:
    """The device generator (momenta, noise) and the CPU one (prior starts) of ``seed``."""
    s = np.random.SeedSequence([seed]).generate_state(2, np.uint64) >> np.uint64(1)
    return (
        torch.Generator(device=device).manual_seed(int(s[0])),
        torch.Generator().manual_seed(int(s[1])),
    )


def mclmc_windows(warmup: int, precondition: bool) -> tuple[int, int, int, int]:
    """The warm-up's windows ``(step size, moments, re-tuning, L)`` (module docstring)."""
    if precondition:
        n1 = n2 = round(0.3 * warmup)
        nr = round(n2 / 3)
    else:
        n1 = n2 = round(warmup / 3)
        nr = 0
    return n1, n2, nr, warmup - n1 - n2 - nr


def ess_per_chain(x: torch.Tensor) -> torch.Tensor:
    r"""Each chain's effective sample size of each coordinate, Geyer's initial monotone
    sequence (Stan's and BlackJAX's ``effective_sample_size`` on one chain).

    Parameters
    ----------
    x : Tensor
        ``(C, n, D)`` draws, ``n >= 2``.

    BlackJAX's ``diagnostics.py::effective_sample_size`` on one chain, term for term: the
    autocorrelations by FFT, the initial positive sequence of pair sums made monotone, the
    next even term where positive, :math:`\hat\tau \ge 1/\log_{10} n`.

    Returns
    -------
    Tensor
        ``(C, D)`` float64; 0 where a coordinate never moved (as BlackJAX since #1020).
    """
    x = x.to(torch.float64)
    c, n, d = x.shape
    xc = x - x.mean(1, keepdim=True)
    m = 1 << (2 * n - 1).bit_length()
    f = torch.fft.rfft(xc, n=m, dim=1)
    acov = torch.fft.irfft(f * f.conj(), n=m, dim=1)[:, :n] / n
    var0 = acov[:, 0] * n / (n - 1)
    moved = (x != x[:, :1]).any(1) & (var0 > 0)
    weighted = torch.where(moved, acov[:, 0], torch.ones_like(var0)).unsqueeze(1)
    ne = n - n % 2
    lagged = 1 - (var0.unsqueeze(1) - acov[:, 1:ne]) / weighted
    rho = torch.cat([torch.ones(c, 1, d, dtype=x.dtype, device=x.device), lagged], 1)
    even = rho[:, 0::2]
    pairs = even + rho[:, 1::2]
    m = pairs.shape[1]
    initial = torch.cumprod((pairs > 0).to(x.dtype), dim=1)
    # Stan's and BlackJAX's extra even term after the positive pairs, when positive
    first_bad = initial.sum(1).long().clamp(max=m - 1).unsqueeze(1)
    extra = even.gather(1, first_bad).squeeze(1)
    has_extra = (initial.sum(1) < m) & (extra > 0)
    seq = pairs * initial
    seq = seq.scatter(
        1, first_bad, torch.where(has_extra, extra, seq.gather(1, first_bad)[:, 0])[:, None]
    )
    monotone = torch.cummin(seq, dim=1).values
    last = monotone.gather(1, first_bad).squeeze(1)
    lowered = last < extra
    correction = torch.where(has_extra, torch.where(lowered, last / 2, extra), 0.0)
    tau = -1 + 2 * monotone.sum(1) - correction
    tau = torch.clamp(tau, min=1 / math.log10(n))
    return torch.where(moved, n / tau, torch.zeros_like(tau))


def moment_variances(
    s0: torch.Tensor, s1: torch.Tensor, s2: torch.Tensor, fallback: torch.Tensor
) -> torch.Tensor:
    """:math:`E_w[x^2] - E_w[x]^2` of weighted sums ``(C, 1)``, ``(C, D)``, ``(C, D)``;
    ``fallback`` where that is not a positive finite number (no kept step, a coordinate
    that never moved): a zero variance would freeze the coordinate."""
    w = torch.clamp(s0, min=1e-300)
    var = s2 / w - (s1 / w) ** 2
    ok = torch.isfinite(var) & (var > 0) & (s0 > 0)
    return torch.where(ok, var, fallback.to(var.dtype))


class MCLMCProgram:
    """MCLMC with BlackJAX's tuning for :func:`~zoo.inference.mcmc.loop.sample` (module
    docstring).

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

    def __init__(
        self,
        *,
        seed: int,
        warmup: int,
        step_size: float | None,
        adapt_mass_matrix: bool,
        desired_energy_var: float = DESIRED_ENERGY_VAR,
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

    def _reset_predictor(self) -> None:
        c, dev = self.eps.shape[0], self.eps.device
        self.time = torch.zeros(c, dtype=torch.float64, device=dev)
        self.x_avg = torch.zeros_like(self.time)
        self.eps_max = torch.full_like(self.time, math.inf)

    def _transition(self):
        noise = (self._noise(), self._noise())
        self.state, info = mclmc_transition(
            self.pot, self.state, self.eps, self.length, self.sqrt_minv, noise
        )
        return info

    def _predict(self, info) -> None:
        """BlackJAX's step-size predictor after a step (module docstring, 1)."""
        d = self.state.z.shape[1]
        eps = self.eps
        self.eps_max = torch.where(info.ok, self.eps_max, 0.8 * eps)
        xi = info.energy_change**2 / (d * self.desired) + 1e-8
        w = torch.exp(-0.5 * (torch.log(xi) / (6.0 * TRUST_IN_ESTIMATE)) ** 2)
        decay = (NUM_EFFECTIVE_SAMPLES - 1.0) / (NUM_EFFECTIVE_SAMPLES + 1.0)
        self.x_avg = decay * self.x_avg + w * (xi / eps**6)
        self.time = decay * self.time + w
        self.eps = torch.minimum((self.x_avg / self.time) ** (-1.0 / 6.0), self.eps_max)

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
        tau = draws.shape[1] / ess_per_chain(draws)
        finite = torch.isfinite(tau)
        mean_tau = torch.where(finite, tau, 0).sum(1) / finite.sum(1).clamp(min=1)
        self.length = torch.where(finite.any(1), L_FACTOR * self.eps * mean_tau, self.length)

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
