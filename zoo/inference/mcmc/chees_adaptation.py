r"""ChEES's adaptation of one step size and one trajectory length for C chains, as pure functions.

After BlackJAX's ``adaptation/chees_adaptation.py`` and TFP's
``GradientBasedTrajectoryLengthAdaptation`` (the reference code of Hoffman, Radul & Sountsov,
AISTATS 2021). It reads what a transition did (proposals, velocities, acceptance
probabilities, divergences: :func:`chees_statistics`) and never imports the kernel
(:mod:`zoo.inference.mcmc.chees`); :mod:`zoo.inference.mcmc.chees_hmc` plugs the two into
:mod:`zoo.inference.mcmc.loop`.

- Step size: dual averaging (:mod:`~zoo.inference.mcmc.dual_averaging`; :math:`\gamma =
  0.05`, :math:`t_0 = 10`, :math:`\mu = \log 10\epsilon_0`, averaging weights
  :math:`k^{-1/2}`, BlackJAX's ``decay_rate = 0.5``) of :math:`\delta - \bar\alpha_t`,
  :math:`\delta = 0.651` and :math:`\bar\alpha_t` the *harmonic* mean of the acceptance
  probabilities of the chains whose transition did not diverge (0 when none is left),
  which keeps the worst chains moving.
- Trajectory length: gradient ascent on :math:`\log T` of the ChEES criterion
  :math:`\tfrac14 \mathbb E[(\lVert x' - \mathbb E x\rVert^2 - \lVert x - \mathbb E
  x\rVert^2)^2]`. With :math:`x_c` chain :math:`c`'s state before the transition,
  :math:`x'_c` its proposal, :math:`v_c = M^{-1} r'_c` the proposal's velocity, :math:`a_c`
  its acceptance probability and :math:`\tau_t = n_t \epsilon_t` the integration time,

  .. math::

      g_t = \frac{\sum_c a_c\, \tau_t\,
            (\lVert x'_c - \bar x'\rVert^2 - \lVert x_c - \bar x\rVert^2)\,
            (x'_c - \bar x')^\top v_c}{s_t^2 \sum_c a_c},

  over the chains that did not diverge, :math:`\bar x'` the :math:`a`-weighted mean of the
  proposals, :math:`\bar x` the mean of the states and :math:`s_t` the mean of their mean
  squared distances to these centres (a scale that keeps Adam's normalization meaningful
  while overdispersed chains contract). :math:`\tau\,dx'/d\tau = \tau v` makes
  :math:`g_t` the derivative with respect to the log of the time actually integrated; the
  velocity carries the diagonal mass matrix. :math:`\log T` moves by Adam (rate 0.05,
  :math:`\beta_2 = 0.95`, bias-corrected, :math:`\beta_1 = 0`, or 0.9 for one chain), each
  update clipped to :math:`\pm 0.35`; Adam's moments restart at the 30th dual-averaging
  iteration after every start and restart (``adam_restart``), once the step size has
  settled. The iterate is capped at :math:`L_{\max} e^{\mu} = 10 L_{\max}\epsilon_0` and
  floored at :math:`\epsilon` only when the step size is searched. :math:`T` starts at
  :math:`\epsilon` unless given.
- One chain: running estimates of the chain's mean and spread (weights
  :math:`1/\min(t + 2, 100)`) stand in for the cross-chain ones.
- The adapted values are the averages (weights :math:`k^{-1/2}`) of the iterates in log
  space since the last restart: :math:`\epsilon = e^{\overline{\log\epsilon}}` and
  :math:`T = e^{\overline{\log T}}` clipped to :math:`[\epsilon, L_{\max}\epsilon]`.
- Diagonal inverse mass matrix: Stan's windows (:func:`~zoo.inference.mcmc.window_adaptation.build_schedule`);
  inside a slow window the states of all chains at all its iterations feed one pooled
  estimate (:func:`~zoo.inference.mcmc.welford.chan_merge`, float64); at the window's end
  Stan's regularized variance (:func:`~zoo.inference.mcmc.welford.regularized_variance`),
  then the step size is searched again and :func:`ChEESAdaptation.restart` restarts dual
  averaging, Adam and the averages; :math:`T` carries over.

Why these choices (and the measurements behind them): ``docs/notes/samplers.md``.

References
----------
Hoffman, M. D., Radul, A. and Sountsov, P. (2021). An adaptive-MCMC scheme for setting
trajectory lengths in Hamiltonian Monte Carlo. AISTATS.

Hoffman, M. D. and Gelman, A. (2014). The No-U-Turn Sampler. JMLR 15, 1593-1623.

Beskos, A., Pillai, N., Roberts, G., Sanz-Serna, J. and Stuart, A. (2013). Optimal tuning of
the hybrid Monte Carlo algorithm. Bernoulli 19, 1501-1534.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import torch

from zoo.inference.mcmc.dual_averaging import DualAveragingState, dual_averaging

__all__ = [
    "ADAM_RESTART",
    "BETA1_ONE_CHAIN",
    "CENTRE_WINDOW",
    "TARGET_ACCEPT",
    "ChEESAdaptation",
    "ChEESState",
    "chees_adaptation",
    "chees_statistics",
]

#: Optimal acceptance rate of HMC (Beskos et al. 2013), the dual-averaging target.
TARGET_ACCEPT = 0.651
#: Adam on log T (TFP's GradientBasedTrajectoryLengthAdaptation; TFP's rate is 0.025): rate,
#: beta_2, update clip.
LEARNING_RATE, BETA2, LOG_UPDATE_CLIP = 0.05, 0.95, 0.35
#: Adam's moments restart at this dual-averaging iteration after each start and restart.
ADAM_RESTART = 30
#: Adam's beta_1 for one chain (TFP's 0 for more: their mean over chains is the averaging).
BETA1_ONE_CHAIN = 0.9
#: Weight k^-DECAY of the k-th iterate in the averaged log step size and log T (BlackJAX).
DECAY = 0.5
#: One chain: its running mean and spread (ChEES's centre) weigh state t by 1 / min(t + 2, this).
CENTRE_WINDOW = 100
_TINY = 1e-20


class ChEESState(NamedTuple):
    """Warm-up state of ChEES-HMC: Python floats (float64), one value for all chains."""

    da: DualAveragingState
    """Dual averaging of :math:`\\log\\epsilon` (floats; its ``step`` :math:`k` counts the
    iterations since the last start or restart and weighs both averages)."""
    log_trajectory_length: float
    """:math:`\\log T` in use (the Adam iterate)."""
    log_trajectory_length_avg: float
    """Weighted average of :math:`\\log T` since the last restart (weights :math:`k^{-1/2}`)."""
    grad_avg: float
    """Adam's moving average of the ChEES gradient (its first moment; 0 when beta_1 = 0)."""
    sq_grad_avg: float
    """Adam's moving average of the squared ChEES gradient."""
    adam_step: int
    """Adam iterations (bias correction)."""

    @property
    def log_step_size(self) -> float:
        """:math:`\\log\\epsilon` in use (the dual-averaging iterate, or a restart's value)."""
        return self.da.x

    @property
    def da_step(self) -> int:
        """Dual-averaging iterations since the last restart."""
        return self.da.step


class ChEESAdaptation(NamedTuple):
    """The pure functions of :func:`chees_adaptation`."""

    init: Callable[[float, float | None], ChEESState]
    """``init(step_size, trajectory_length=None)``: the state before warm-up (``T = eps``
    when ``trajectory_length`` is None)."""
    update: Callable[[ChEESState, float, float], ChEESState]
    """``update(state, harmonic_mean_accept, chees_gradient)``: one warm-up iteration."""
    restart: Callable[[ChEESState, float], ChEESState]
    """``restart(state, step_size)``: dual averaging, Adam's moment and the averages restarted
    around a searched step size (after a new mass matrix); ``T`` carries over."""
    final: Callable[[ChEESState], tuple[float, float]]
    """``final(state)``: the adapted ``(step_size, trajectory_length)``."""


def chees_adaptation(
    *,
    target_accept: float = TARGET_ACCEPT,
    max_leapfrog: int = 1024,
    learning_rate: float = LEARNING_RATE,
    beta1: float = 0.0,
    adam_restart: int | None = ADAM_RESTART,
) -> ChEESAdaptation:
    """ChEES's step-size and trajectory-length adaptation as pure functions (module docstring).

    Parameters
    ----------
    target_accept : float
        :math:`\\delta`, the harmonic-mean acceptance probability dual averaging aims at.
    max_leapfrog : int
        :math:`L_{\\max}`: :math:`T \\le L_{\\max}\\epsilon`.
    learning_rate : float
        Adam's rate on :math:`\\log T`.
    beta1 : float
        Adam's first-moment decay (TFP's 0; :func:`run_chees` uses 0.9 for one chain).
    adam_restart : int, optional
        Restart Adam's moments (not :math:`T`) at this dual-averaging iteration after each
        start and restart, once the step size has settled; None: never.

    Returns
    -------
    ChEESAdaptation
    """
    log_max = math.log(max_leapfrog)
    da = dual_averaging(kappa=DECAY, keep_finite=True)

    def cap(log_t: float, log_eps: float) -> float:  # T <= L eps (TFP clips the iterate so)
        return min(log_t, log_eps + log_max)

    def clip(log_t: float, log_eps: float) -> float:  # and T >= eps: at searches and the end
        return max(cap(log_t, log_eps), log_eps)

    def init(step_size: float, trajectory_length: float | None = None) -> ChEESState:
        le = math.log(step_size)
        lt = le if trajectory_length is None else clip(math.log(trajectory_length), le)
        return ChEESState(da.init(le + math.log(10), le, le), lt, lt, 0.0, 0.0, 0)

    def update(state: ChEESState, harmonic_mean: float, gradient: float) -> ChEESState:
        if not math.isfinite(harmonic_mean):
            harmonic_mean = 0.0
        d = da.update(state.da, target_accept - harmonic_mean)
        lt, m, v, a = (
            state.log_trajectory_length,
            state.grad_avg,
            state.sq_grad_avg,
            state.adam_step,
        )
        if d.step == adam_restart:  # dual averaging has settled: forget the start-up gradients
            m, v, a = 0.0, 0.0, 0
        if math.isfinite(gradient):
            a += 1
            m = beta1 * m + (1 - beta1) * gradient
            v = BETA2 * v + (1 - BETA2) * gradient**2
            step = learning_rate * m / (1 - beta1**a) / math.sqrt(v / (1 - BETA2**a) + _TINY)
            lt += min(max(step, -LOG_UPDATE_CLIP), LOG_UPDATE_CLIP)
        lt = min(lt, d.mu + log_max)  # T <= L 10 eps0, not L eps_k
        w = d.step**-DECAY
        return ChEESState(d, lt, (1 - w) * state.log_trajectory_length_avg + w * lt, m, v, a)

    def restart(state: ChEESState, step_size: float) -> ChEESState:
        le = math.log(step_size)
        lt = max(min(state.log_trajectory_length, le + math.log(10) + log_max), le)
        return ChEESState(da.init(le + math.log(10), le, le), lt, lt, 0.0, 0.0, 0)

    def final(state: ChEESState) -> tuple[float, float]:
        le = da.final(state.da)
        lt = state.log_trajectory_length_avg if state.da.step > 0 else state.log_trajectory_length
        return math.exp(le), math.exp(clip(lt, le))

    return ChEESAdaptation(init, update, restart, final)


def chees_statistics(
    z0: torch.Tensor,
    info: Any,
    duration: float,
    centre: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> torch.Tensor:
    """``[harmonic-mean acceptance, scaled ChEES gradient wrt log T, divergent chains]`` as one
    float64 tensor of 3 on the device (read back with one synchronization); ``duration`` is
    the transition's integration time ``n_steps * eps``; ``info`` anything with the fields
    ``proposal``, ``velocity`` (C, D), ``acceptance_rate`` and ``diverging`` (C,) of
    :class:`~zoo.inference.mcmc.chees.ChEESInfo`.

    The gradient (module docstring) is divided by :math:`s^2`, :math:`s` the mean of the
    states' and the proposals' mean squared distances to their centres. ``centre``, for one
    chain: ``(mean (D,), spread ())`` running estimates replace the cross-chain means and
    :math:`s`. A gradient that cannot be formed (no spread yet) is NaN: the update skips it.
    """
    div = info.diverging
    acc = info.acceptance_rate
    ok = ~div
    inv = torch.where(ok, 1.0 / acc, 0.0)
    hm = ok.sum().to(torch.float64) / inv.sum()
    hm = torch.where(torch.isnan(hm), 0.0, hm)
    fin = torch.isfinite(info.proposal).all(1) & torch.isfinite(info.velocity).all(1)
    w = torch.where(ok & fin, acc, 0.0)
    wsum = w.sum() + _TINY
    xp = torch.where(fin.unsqueeze(1), info.proposal, 0.0).to(torch.float64)
    vp = torch.where(fin.unsqueeze(1), info.velocity, 0.0).to(torch.float64)
    x0 = z0.to(torch.float64)
    if centre is None:
        mp = (w.unsqueeze(1) * xp).sum(0) / wsum
        m0 = x0.mean(0)
    else:
        mp = m0 = centre[0]
    cp, c0 = xp - mp, x0 - m0
    sp, s0 = (cp * cp).sum(1), (c0 * c0).sum(1)
    per_chain = (sp - s0) * (cp * vp).sum(1)
    per_chain = torch.where(torch.isfinite(per_chain), per_chain, 0.0)
    grad = duration * (w * per_chain).sum() / wsum
    scale = 0.5 * (s0.mean() + (w * sp).sum() / wsum) if centre is None else centre[1]
    grad = torch.where(scale > 0, grad / (scale * scale), math.nan)
    return torch.stack([hm, grad, div.sum().to(torch.float64)])
