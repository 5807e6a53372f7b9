r"""The tuning of MAMS (adjusted MCLMC): step size, trajectory length L, preconditioner.

This ports ``adaptation/adjusted_mclmc_adaptation.py::adjusted_mclmc_find_L_and_step_size``
of BlackJAX 1.7.1 chain by chain (the program that runs it:
:class:`~zoo.inference.mcmc.microcanonical.MAMSProgram`), with ``frac_tune3 = 0.1`` (the
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

References
----------
Robnik, J., Cohn-Gordon, R. and Seljak, U. (2025). Metropolis adjusted microcanonical
Hamiltonian Monte Carlo. arXiv:2503.01707.

Hoffman, M. D. and Gelman, A. (2014). The No-U-Turn Sampler. JMLR 15 (dual averaging).
"""

from __future__ import annotations

import math

import torch

from zoo.inference.mcmc.dual_averaging import DualAveraging, DualAveragingState
from zoo.inference.mcmc.ess import ess_per_chain

__all__ = [
    "INITIAL_STEP",
    "clamped_dual_average",
    "length_from_ess",
    "mams_windows",
    "moments_rescale",
]

#: BlackJAX's ``tuning_factor``, ``Lratio_upperbound``, ``_AVG_FLOOR`` and ``l_factor``.
TUNING_FACTOR, L_RATIO_MAX, AVG_FLOOR, L_FACTOR = 1.3, 2.0, 1.1, 0.5
#: BlackJAX's initial :math:`\epsilon = 0.2\sqrt d` (with :math:`L = \sqrt d`).
INITIAL_STEP = 0.2


def mams_windows(warmup: int) -> tuple[int, ...]:
    """The five windows' ends (module docstring): equal, the last takes the remainder."""
    n = warmup // 5
    return (n, 2 * n, 3 * n, 4 * n, warmup)


def clamped_dual_average(
    da: DualAveraging,
    state: DualAveragingState,
    acceptance: torch.Tensor,
    target: float,
    length: torch.Tensor,
) -> tuple[DualAveragingState, torch.Tensor]:
    """One dual-averaging update of each chain's log step size towards ``target``, the
    iterate and its average clamped to :math:`[10^{-5}, L/1.1]` (module docstring, 1); the
    new state and step sizes ``(C,)``."""
    st = da.update(state, target - acceptance)
    lo, hi = math.log(1e-5), torch.log(length / AVG_FLOOR)
    x = torch.minimum(st.x.clamp(min=lo), hi)
    x_avg = torch.minimum(st.x_avg.clamp(min=lo), hi)
    return st._replace(x=x, x_avg=x_avg), torch.exp(x)


def moments_rescale(variances: torch.Tensor, length: torch.Tensor) -> torch.Tensor:
    r""":math:`\min(1.3\sqrt{\sum_i\sigma_i^2}/L, 2)` per chain (module docstring, 2)."""
    return torch.clamp(TUNING_FACTOR * variances.sum(1).sqrt() / length, 0, L_RATIO_MAX)


def length_from_ess(draws: torch.Tensor, length: torch.Tensor) -> torch.Tensor:
    r""":math:`\min(0.5\,L / (\overline{\mathrm{ESS}}/n), 2L)` per chain from ``(C, n, D)``
    draws (the mean over the coordinates that moved; ``length`` where none did)."""
    ess = ess_per_chain(draws).to(length.device)
    moved = ess > 0
    per_draw = torch.where(moved, ess, 0).sum(1) / moved.sum(1).clamp(min=1) / draws.shape[1]
    new = torch.minimum(L_FACTOR * length / per_draw, L_RATIO_MAX * length)
    return torch.where(moved.any(1), new, length)
