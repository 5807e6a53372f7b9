r"""The tuning of MCLMC's step size, momentum decoherence length L and preconditioner.

The kernel is :func:`~zoo.inference.mcmc.mclmc.mclmc_transition`, the program that runs the
two :class:`~zoo.inference.mcmc.microcanonical.MCLMCProgram`; the tuning ports
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
from typing import NamedTuple

import torch

from zoo.inference.mcmc.ess import ess_per_chain

__all__ = [
    "L_FACTOR",
    "Predictor",
    "length_from_ess",
    "mclmc_windows",
    "predictor_init",
    "predictor_update",
]

#: BlackJAX's ``trust_in_estimate``, ``num_effective_samples`` and ``l_factor``.
TRUST_IN_ESTIMATE, NUM_EFFECTIVE_SAMPLES, L_FACTOR = 1.5, 150, 0.4


def mclmc_windows(warmup: int, precondition: bool) -> tuple[int, int, int, int]:
    """The warm-up's windows ``(step size, moments, re-tuning, L)`` (module docstring)."""
    if precondition:
        n1 = n2 = round(0.3 * warmup)
        nr = round(n2 / 3)
    else:
        n1 = n2 = round(warmup / 3)
        nr = 0
    return n1, n2, nr, warmup - n1 - n2 - nr


class Predictor(NamedTuple):
    """The step-size predictor's state, ``(C,)`` float64 each (BlackJAX's
    ``(time, x_average, step_size_max)``)."""

    time: torch.Tensor
    x_avg: torch.Tensor
    eps_max: torch.Tensor


def predictor_init(chains: int, device: torch.device) -> Predictor:
    """A fresh predictor: no weight yet, no cap."""
    zero = torch.zeros(chains, dtype=torch.float64, device=device)
    return Predictor(zero, zero, torch.full_like(zero, math.inf))


def predictor_update(
    state: Predictor,
    eps: torch.Tensor,
    energy_change: torch.Tensor,
    ok: torch.Tensor,
    dim: int,
    desired_energy_var: float,
) -> tuple[Predictor, torch.Tensor]:
    """BlackJAX's predictor after one step (module docstring, 1): the new state and step
    sizes ``(C,)`` from the step's energy change (0 where the step was undone, ``ok`` false:
    there the cap becomes 0.8 times the step size)."""
    eps_max = torch.where(ok, state.eps_max, 0.8 * eps)
    xi = energy_change**2 / (dim * desired_energy_var) + 1e-8
    w = torch.exp(-0.5 * (torch.log(xi) / (6.0 * TRUST_IN_ESTIMATE)) ** 2)
    decay = (NUM_EFFECTIVE_SAMPLES - 1.0) / (NUM_EFFECTIVE_SAMPLES + 1.0)
    x_avg = decay * state.x_avg + w * (xi / eps**6)
    time = decay * state.time + w
    new = torch.minimum((x_avg / time) ** (-1.0 / 6.0), eps_max)
    return Predictor(time, x_avg, eps_max), new


def length_from_ess(draws: torch.Tensor, eps: torch.Tensor, length: torch.Tensor) -> torch.Tensor:
    """:math:`L = 0.4\\,\\epsilon\\,\\overline{n/\\mathrm{ESS}}` per chain from ``(C, n, D)``
    draws (the mean over the coordinates that moved; ``length`` where none did)."""
    tau = draws.shape[1] / ess_per_chain(draws)
    finite = torch.isfinite(tau)
    mean_tau = torch.where(finite, tau, 0).sum(1) / finite.sum(1).clamp(min=1)
    return torch.where(finite.any(1), L_FACTOR * eps * mean_tau, length)
