r"""ChEES-HMC: jittered HMC whose trajectory length is adapted jointly across many chains.

Batched NUTS waits, every transition, for the longest tree of any chain. ChEES-HMC (Hoffman,
Radul & Sountsov, "An Adaptive-MCMC Scheme for Setting Trajectory Lengths in Hamiltonian
Monte Carlo", AISTATS 2021) gives all chains one step size :math:`\epsilon`, one diagonal
inverse mass matrix :math:`M^{-1}` and one trajectory length :math:`T`; transition :math:`t`
draws a jitter :math:`u_t \in (0, 1)` shared by the chains and runs

.. math:: n_t = \min\bigl(\max(\lceil u_t T / \epsilon \rceil, 1), L_{\max}\bigr)

leapfrog steps for every chain (:func:`chees_transition`), so the batch of ``C`` chains is
one computation of ``n_t`` batched gradients and never waits. The jitter is the base-2 Halton
(van der Corput) sequence, :math:`u_t = \mathrm{radical\ inverse}(t + 1)` (:func:`halton`),
as in BlackJAX and TensorFlow Probability.

Warm-up (:func:`chees_adaptation`), after BlackJAX's ``adaptation/chees_adaptation.py`` and
TFP's ``GradientBasedTrajectoryLengthAdaptation`` (the paper's reference code):

- Step size: dual averaging (Hoffman & Gelman 2014; :math:`\gamma = 0.05`, :math:`t_0 = 10`,
  :math:`\mu = \log 10\epsilon_0`) of :math:`\delta - \bar\alpha_t` with :math:`\delta = 0.651`
  and :math:`\bar\alpha_t` the *harmonic* mean of the acceptance probabilities of the chains
  whose transition did not diverge (0 when none is left), which keeps the worst chains moving.
- Trajectory length: gradient ascent on :math:`\log T` of the ChEES criterion
  :math:`\tfrac14 \mathbb E[(\lVert x' - \mathbb E x\rVert^2 - \lVert x - \mathbb E x\rVert^2)^2]`
  (change in the estimator of the expected square). With :math:`x_c` chain :math:`c`'s state
  before the transition, :math:`x'_c` its proposal (before the Metropolis test),
  :math:`v_c = M^{-1} r'_c` the proposal's velocity, :math:`a_c` its acceptance probability
  and :math:`\tau_t = n_t \epsilon_t` the integration time of the transition,

  .. math::

      g_t = \frac{\sum_c a_c\, \tau_t\,
            (\lVert x'_c - \bar x'\rVert^2 - \lVert x_c - \bar x\rVert^2)\,
            (x'_c - \bar x')^\top v_c}{s_t^2 \sum_c a_c},

  summed over the chains that did not diverge, :math:`\bar x'` the :math:`a`-weighted mean of
  the proposals and :math:`\bar x` the mean of the states (the cross-chain stand-ins for
  :math:`\mathbb E x`). :math:`\tau\,dx'/d\tau = \tau v` makes :math:`g_t` the derivative of
  the criterion with respect to the log of the time actually integrated (BlackJAX writes
  :math:`u_t T`, the same up to the rounding of :math:`n_t`, but not when :math:`u_t T <
  \epsilon`: :math:`n_t = 1` then, and a factor :math:`u_t T` would silence the gradient that
  should lengthen :math:`T`). The velocity (not the momentum) carries the diagonal mass
  matrix; BlackJAX and TFP assume the identity, where the two coincide. :math:`\log T` moves
  by Adam (TFP's, with learning rate 0.05 for TFP's 0.025 (measured in :func:`run_chees`),
  :math:`\beta_2 = 0.95`, bias-corrected, no momentum
  :math:`\beta_1 = 0`, except :math:`\beta_1 = 0.9` for one chain), each update clipped to
  :math:`\pm 0.35`; the iterate is capped at :math:`L_{\max} e^{\mu} = 10 L_{\max}\epsilon_0`
  (:math:`\epsilon_0` the last searched step size; the adapted :math:`T` is clipped to
  :math:`L_{\max}\epsilon` at the end) and floored at :math:`\epsilon` only when the step size
  is searched (start and restarts). TFP caps the iterate at :math:`L_{\max}\epsilon_k`, the
  current dual-averaging iterate; on the two-moons networks (see :func:`run_chees`) that
  iterate swings between 0.003 and 0.2 from one iteration to the next, most of all right
  after a restart, and that cap cut a grown :math:`T` by a factor of 2 to 4 (2.3 to 0.8 at the
  last restart, with 50 iterations left to regrow at the learning rate). A floor at every
  dual-averaging iterate (BlackJAX) drags :math:`T` up with dual averaging's first steps after
  a restart (towards :math:`10\epsilon_0`), past the first maximum of the criterion, where it
  stays (see below). :math:`T` starts at :math:`\epsilon` unless ``trajectory_length`` is
  given.

  Two additions to BlackJAX and TFP, both measured on the conjugate regression of the tests:
  :math:`s_t` (the mean of the states' and the proposals' mean squared distances to their
  centres) scales the criterion by a constant that does not depend on :math:`T` once the
  chains are stationary, but keeps Adam's normalization meaningful while overdispersed
  chains contract (unscaled, the first gradients were :math:`10^3` to :math:`10^4` times the
  later ones and froze :math:`T` for hundreds of iterations); and Adam's moments restart with
  each new mass matrix and again at the 30th dual-averaging iteration after every start and
  restart (``adam_restart``): the first gradients after a start come while dual averaging
  still searches (harmonic-mean acceptance 0 or 1) and are 10 to 1000 times the later ones;
  with :math:`\beta_2 = 0.95` they held :math:`T` at :math:`\epsilon` for the first 100
  iterations on the two-moons networks.

  One chain has no cross-chain mean (TFP refuses one chain; in BlackJAX its gradient is 0 and
  :math:`T` never moves): running estimates of the chain's mean and spread (weights
  :math:`1/\min(t + 2, 100)`) stand in, and Adam's :math:`\beta_1 = 0.9` averages the
  one-sample gradients over about ten iterations. It works but is noisy: on the tests'
  regression one chain settles anywhere in :math:`T \approx 2` to 11 where 64 chains agree
  on 2.7 to 3.1, and it needs a longer warm-up (600 iterations rather than 300).

  With a well-adapted metric the jittered criterion has ripples of constant height in
  :math:`\log T` (for :math:`\mathcal N(0, I)`, :math:`\mathbb E_u\,\mathrm{ChEES}(uT) \propto
  \tfrac12 - \sin(2T)/4T`, maximal at :math:`T \approx 2.25` and with local maxima near
  :math:`2.25 + k\pi`): ascent from a short :math:`T` stops at the first maximum, the one
  wanted, but a :math:`T` pushed past it stays at a later one.
- The adapted values are averages of the iterates in log space with weights
  :math:`k^{-1/2}` (BlackJAX's ``decay_rate = 0.5``; :math:`k` counts the iterations since the
  last restart): :math:`\epsilon = e^{\overline{\log\epsilon}}` and
  :math:`T = e^{\overline{\log T}}` clipped to :math:`[\epsilon, L_{\max}\epsilon]`. Unlike
  BlackJAX (which feeds the averaged :math:`T` back into Adam, decaying its learning rate as
  :math:`k^{-1/2}`), the warm-up runs on the Adam iterate and the average is used for sampling
  only, as in TFP.
- Diagonal inverse mass matrix (not in BlackJAX's ChEES): Stan's windows
  (:func:`~zoo.inference.mcmc.adaptation.build_schedule`: identity during the initial buffer,
  then slow windows of 25, 50, 100, ... iterations, then a final buffer). Inside a slow
  window the states of *all chains at all its iterations* feed one pooled Welford estimate
  (:class:`PooledWelford`: float64, on the device, Chan's batch update), i.e. a windowed
  across-chains estimate; with one chain it is Stan's within-chain windowed estimate. At the
  window's end :math:`M^{-1} = \frac{n}{n+5}\hat\sigma^2 + 10^{-3}\frac{5}{n+5}` (Stan's
  regularization, :math:`n` the chain-draws pooled); then the step size is searched again at
  the new metric (:func:`find_shared_step_size`), dual averaging, Adam's moments and the
  averages restart, and :math:`T` carries over (floored at the new step size, capped at
  :math:`10 L_{\max}` times it). (Rescaling
  :math:`T` to keep the trajectories' reach under the new metric was tried and changed
  nothing measurable on the tests' Gaussian and regression.) Chains started at one shared
  point spread during the initial buffer, before any estimate is taken.

Sampling: :math:`\epsilon`, :math:`M^{-1}` and :math:`T` are fixed; the Halton index goes
on from the warm-up. Divergence: an energy error above 1000 (or a non-finite one) marks the
chain's transition divergent and rejects it; the chain stays where it was.

Randomness: one ``torch.Generator`` on the potential's device, seeded from ``seed``, draws
the momenta and Metropolis uniforms of all chains as ``(C, D)`` and ``(C,)`` tensors, and one
CPU generator seeded from ``seed`` draws the prior starts (``init=None``). Chains are thus not
seeded one by one (chain ``c`` of a run with ``C`` chains is not chain ``c`` of another
``C``); the kernel is row-independent given its noise (``tests/zoo/inference/test_chees.py``).
No host synchronization happens inside a transition's leapfrog loop; the warm-up reads two
statistics per transition back to the host, the sampling phase only the kept draws.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from typing import NamedTuple

import numpy as np
import torch

from zoo.inference.mcmc.adaptation import GAMMA, T0, build_schedule
from zoo.inference.mcmc.kernel import MAX_ENERGY_ERROR
from zoo.inference.mcmc.potential import FlatPotential
from zoo.inference.mcmc.result import EXTEND_EVERY, MCMCResult, check_init, progress_bar, result

__all__ = [
    "ADAM_RESTART",
    "TARGET_ACCEPT",
    "ChEESAdaptation",
    "ChEESInfo",
    "ChEESState",
    "PooledWelford",
    "chees_adaptation",
    "chees_transition",
    "find_shared_step_size",
    "halton",
    "num_steps",
    "run_chees",
]

#: Optimal acceptance rate of HMC (Beskos et al. 2013), the dual-averaging target.
TARGET_ACCEPT = 0.651
#: Adam on log T (TFP's GradientBasedTrajectoryLengthAdaptation, whose rate is 0.025): rate,
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


# --- kernel -------------------------------------------------------------------------------


class ChEESInfo(NamedTuple):
    """What one :func:`chees_transition` of ``C`` chains did."""

    proposal: torch.Tensor
    """(C, D): the end of each trajectory, before the Metropolis test."""
    velocity: torch.Tensor
    """(C, D): :math:`M^{-1} r` at the end of each trajectory (what ChEES differentiates)."""
    acceptance_rate: torch.Tensor
    """(C,) float64: :math:`\\min(1, e^{-\\Delta H})`, 0 where :math:`\\Delta H` is not finite."""
    accepted: torch.Tensor
    """(C,) bool: the proposal became the new state."""
    diverging: torch.Tensor
    """(C,) bool: :math:`\\Delta H > 1000` or not finite (always rejected)."""
    energy: torch.Tensor
    """(C,) float64: the Hamiltonian of the returned state with its momentum."""
    n_steps: int
    """Leapfrog steps of every chain."""


def _kinetic(r: torch.Tensor, minv: torch.Tensor) -> torch.Tensor:
    return 0.5 * (r * r * minv).sum(1).to(torch.float64)


def chees_transition(
    pot: FlatPotential,
    z: torch.Tensor,
    u: torch.Tensor,
    g: torch.Tensor,
    eps: float,
    minv: torch.Tensor,
    n_steps: int,
    noise: torch.Tensor,
    log_uniform: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, ChEESInfo]:
    """One HMC transition of ``n_steps`` leapfrog steps for each of ``C`` chains.

    Momenta :math:`r = M^{1/2}\\xi` from ``noise`` :math:`\\xi`; velocity Verlet with step
    ``eps``; the proposal is accepted where ``log_uniform`` :math:`< -\\Delta H` and the
    transition did not diverge. Rows do not interact: each chain's result depends only on its
    rows of ``z``, ``u``, ``g``, ``noise`` and ``log_uniform``. The leapfrog loop makes no host
    synchronization (a diverging chain runs on and is rejected at the end).

    Parameters
    ----------
    pot : FlatPotential
        Anything with ``value_and_grad_batch(z (C, D)) -> (U (C,) float64, grad (C, D))``.
    z, u, g : Tensor
        The chains' states ``(C, D)``, potentials ``(C,)`` (float64) and gradients ``(C, D)``.
    eps : float
        Step size, shared by the chains.
    minv : Tensor
        Diagonal inverse mass matrix, ``(D,)`` (shared) or ``(C, D)``.
    n_steps : int
        Leapfrog steps, at least 1.
    noise : Tensor
        ``(C, D)`` standard normal draws (the momenta before scaling).
    log_uniform : Tensor
        ``(C,)`` logarithms of uniform draws (the Metropolis tests).

    Returns
    -------
    z, u, g : Tensor
        The new states, potentials (float64) and gradients.
    info : ChEESInfo
    """
    if n_steps < 1:
        raise ValueError(f"n_steps={n_steps} must be >= 1")
    eps = float(eps)
    minv = minv.to(z.dtype)
    r = noise.to(z.dtype) * minv.rsqrt()
    h0 = u.to(torch.float64) + _kinetic(r, minv)
    half = 0.5 * eps
    step = eps * minv
    z1, u1, g1 = z, u, g
    r1 = torch.add(r, g, alpha=-half)
    for s in range(n_steps):
        z1 = torch.addcmul(z1, step, r1)
        u1, g1 = pot.value_and_grad_batch(z1)
        r1 = torch.add(r1, g1, alpha=-(eps if s < n_steps - 1 else half))
    u1 = u1.to(torch.float64)
    v1 = minv * r1
    h1 = u1 + 0.5 * (r1 * v1).sum(1).to(torch.float64)
    dh = h1 - h0
    finite = torch.isfinite(dh)
    diverging = ~finite | (dh > MAX_ENERGY_ERROR)
    acc = torch.where(finite, torch.exp(torch.clamp(-dh, max=0.0)), 0.0)
    accept = (log_uniform.to(torch.float64) < -dh) & ~diverging
    a2 = accept.unsqueeze(1)
    info = ChEESInfo(z1, v1, acc, accept, diverging, torch.where(accept, h1, h0), n_steps)
    return (
        torch.where(a2, z1, z),
        torch.where(accept, u1, u.to(torch.float64)),
        torch.where(a2, g1, g),
        info,
    )


def halton(i: int) -> float:
    """Element ``i + 1`` of the base-2 Halton (van der Corput) sequence, in ``(0, 1)``.

    The radical inverse of ``i + 1``: 0.5, 0.25, 0.75, 0.125, ... (BlackJAX's
    ``halton_sequence(i)`` without its bit limit).
    """
    n, f, x = i + 1, 0.5, 0.0
    while n:
        x += f * (n & 1)
        n >>= 1
        f *= 0.5
    return x


def num_steps(
    jitter: float, log_trajectory_length: float, log_step_size: float, max_leapfrog: int
) -> int:
    """:math:`\\min(\\max(\\lceil u T / \\epsilon \\rceil, 1), L_{\\max})` from logs (no 0/0)."""
    ratio = math.exp(min(log_trajectory_length - log_step_size, math.log(max_leapfrog)))
    return min(max(math.ceil(jitter * ratio), 1), max_leapfrog)


# --- adaptation ---------------------------------------------------------------------------


class ChEESState(NamedTuple):
    """Warm-up state of ChEES-HMC: Python floats (float64), one value for all chains."""

    log_step_size: float
    """:math:`\\log\\epsilon` in use (the dual-averaging iterate, or a restart's value)."""
    log_trajectory_length: float
    """:math:`\\log T` in use (the Adam iterate, at most :math:`L\\epsilon`)."""
    mu: float
    """:math:`\\log 10\\epsilon_0`, what dual averaging shrinks towards."""
    gradient_avg: float
    """:math:`\\bar H_k`, the average of target minus harmonic-mean acceptance."""
    da_step: int
    """Dual-averaging iterations since the last restart."""
    grad_avg: float
    """Adam's moving average of the ChEES gradient (its first moment; 0 when beta_1 = 0)."""
    sq_grad_avg: float
    """Adam's moving average of the squared ChEES gradient."""
    adam_step: int
    """Adam iterations (bias correction)."""
    log_step_size_avg: float
    """Weighted average of :math:`\\log\\epsilon` since the last restart."""
    log_trajectory_length_avg: float
    """Weighted average of :math:`\\log T` since the last restart."""
    avg_step: int
    """Iterates in the averages (0 right after a restart)."""


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

    def cap(log_t: float, log_eps: float) -> float:  # T <= L eps (TFP clips the iterate so)
        return min(log_t, log_eps + log_max)

    def clip(log_t: float, log_eps: float) -> float:  # and T >= eps: at searches and the end
        return max(cap(log_t, log_eps), log_eps)

    def init(step_size: float, trajectory_length: float | None = None) -> ChEESState:
        le = math.log(step_size)
        lt = le if trajectory_length is None else clip(math.log(trajectory_length), le)
        return ChEESState(le, lt, le + math.log(10), 0.0, 0, 0.0, 0.0, 0, le, lt, 0)

    def update(state: ChEESState, harmonic_mean: float, gradient: float) -> ChEESState:
        if not math.isfinite(harmonic_mean):
            harmonic_mean = 0.0
        k = state.da_step + 1
        h = target_accept - harmonic_mean
        g_avg = (1 - 1 / (k + T0)) * state.gradient_avg + h / (k + T0)
        le = state.mu - math.sqrt(k) / GAMMA * g_avg
        if not math.isfinite(le):
            le = state.log_step_size
        lt, m, v, a = (
            state.log_trajectory_length,
            state.grad_avg,
            state.sq_grad_avg,
            state.adam_step,
        )
        if k == adam_restart:  # dual averaging has settled: forget the start-up gradients
            m, v, a = 0.0, 0.0, 0
        if math.isfinite(gradient):
            a += 1
            m = beta1 * m + (1 - beta1) * gradient
            v = BETA2 * v + (1 - BETA2) * gradient**2
            step = learning_rate * m / (1 - beta1**a) / math.sqrt(v / (1 - BETA2**a) + _TINY)
            lt += min(max(step, -LOG_UPDATE_CLIP), LOG_UPDATE_CLIP)
        lt = min(lt, state.mu + log_max)  # T <= L 10 eps0, not L eps_k (see the module docstring)
        n = state.avg_step + 1
        w = n**-DECAY
        return ChEESState(
            le,
            lt,
            state.mu,
            g_avg,
            k,
            m,
            v,
            a,
            (1 - w) * state.log_step_size_avg + w * le,
            (1 - w) * state.log_trajectory_length_avg + w * lt,
            n,
        )

    def restart(state: ChEESState, step_size: float) -> ChEESState:
        le = math.log(step_size)
        lt = max(min(state.log_trajectory_length, le + math.log(10) + log_max), le)
        return state._replace(
            log_step_size=le,
            log_trajectory_length=lt,
            mu=le + math.log(10),
            gradient_avg=0.0,
            da_step=0,
            grad_avg=0.0,
            sq_grad_avg=0.0,
            adam_step=0,
            log_step_size_avg=le,
            log_trajectory_length_avg=lt,
            avg_step=0,
        )

    def final(state: ChEESState) -> tuple[float, float]:
        le, lt = state.log_step_size_avg, state.log_trajectory_length_avg
        if state.avg_step == 0:
            le, lt = state.log_step_size, state.log_trajectory_length
        return math.exp(le), math.exp(clip(lt, le))

    return ChEESAdaptation(init, update, restart, final)


def chees_statistics(
    z0: torch.Tensor,
    info: ChEESInfo,
    duration: float,
    centre: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> torch.Tensor:
    """``[harmonic-mean acceptance, scaled ChEES gradient wrt log T, divergent chains]`` as one
    float64 tensor of 3 on the device (read back with one synchronization); ``duration`` is
    the transition's integration time ``n_steps * eps``.

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


class PooledWelford:
    """Running mean and sum of squared deviations of all rows of ``(C, D)`` batches, float64.

    Chan et al.'s batch update: a batch of ``C`` rows with mean :math:`m_b` and sum of squared
    deviations :math:`S_b` joins :math:`(n, m, S)` as
    :math:`m \\leftarrow m + \\delta C / (n + C)`,
    :math:`S \\leftarrow S + S_b + \\delta^2 n C / (n + C)`, :math:`\\delta = m_b - m`. With one
    chain this is Welford's algorithm.
    """

    def __init__(self, dim: int, device: torch.device | str | None = None) -> None:
        self.n = 0
        self.mean = torch.zeros(dim, dtype=torch.float64, device=device)
        self.m2 = torch.zeros(dim, dtype=torch.float64, device=device)

    def update(self, z: torch.Tensor) -> None:
        """Add the rows of ``z`` (C, D)."""
        zb = z.to(torch.float64)
        c = zb.shape[0]
        mb = zb.mean(0)
        db = zb - mb
        n = self.n + c
        delta = mb - self.mean
        self.mean = self.mean + delta * (c / n)
        self.m2 = self.m2 + (db * db).sum(0) + delta * delta * (self.n * c / n)
        self.n = n

    def regularized_variance(self) -> torch.Tensor:
        """Stan's :math:`\\frac{n}{n+5}\\hat\\sigma^2 + 10^{-3}\\frac{5}{n+5}` (float64)."""
        n = self.n
        if n < 2:
            raise RuntimeError("PooledWelford needs at least 2 rows to estimate a variance")
        return (n / (n + 5.0)) * (self.m2 / (n - 1)) + 1e-3 * (5.0 / (n + 5.0))


def find_shared_step_size(
    pot: FlatPotential,
    z: torch.Tensor,
    u: torch.Tensor,
    g: torch.Tensor,
    minv: torch.Tensor,
    step_size: float,
    gen: torch.Generator,
    threshold: float = 0.8,
) -> float:
    """One step size for all chains: Hoffman & Gelman (2014), Algorithm 4, on the chains' mean.

    From ``step_size``, fresh momenta for all chains and one leapfrog step; the mean over
    chains of :math:`\\min(1, e^{-\\Delta H})` (0 where not finite) compared with
    ``threshold`` fixes a direction; the step size doubles (or halves) with fresh momenta
    until the comparison flips or it leaves :math:`(10^{-10}, 10^{10})`; that step size is
    returned (as Pyro's ``_find_reasonable_step_size`` returns it), clamped to the range.
    """
    c, d = z.shape
    eps, direction = float(step_size), 0
    zeros = torch.zeros(c, dtype=torch.float64, device=z.device)
    while 1e-10 < eps < 1e10:
        noise = torch.randn(c, d, generator=gen, dtype=z.dtype, device=z.device)
        info = chees_transition(pot, z, u, g, eps, minv, 1, noise, zeros)[3]
        new = 1 if float(info.acceptance_rate.mean()) > threshold else -1
        if direction == 0:
            direction = new
        elif new != direction:
            break
        eps *= 2.0**direction
    return min(max(eps, 1e-10), 1e10)


# --- driver -------------------------------------------------------------------------------


def _seeds(seed: int) -> tuple[int, int]:
    s = np.random.SeedSequence([seed]).generate_state(2, np.uint64) >> np.uint64(1)
    return int(s[0]), int(s[1])


def _start(
    pot: FlatPotential,
    init: Mapping[str, torch.Tensor] | None,
    chains: int,
    gen: torch.Generator,
    device: torch.device,
    dtype: torch.dtype,
) -> tuple[torch.Tensor, str]:
    """Initial unconstrained points ``(C, D)`` and how they were made."""
    if init is None:
        z = torch.stack([pot.prior_draw(gen) for _ in range(chains)])
        return z.to(device=device, dtype=dtype), "prior"
    z = pot.ravel(init).detach().to(device=device, dtype=dtype)
    if z.dim() == 1:
        return z.expand(chains, -1).clone(), "shared"
    if z.dim() == 2 and z.shape[0] == chains:
        return z.clone(), "per chain"
    raise ValueError(
        f"init has batch shape {tuple(z.shape[:-1])}; give each site its own shape (one start "
        f"shared by all chains) or a leading dimension of chains={chains} (one start per chain)"
    )


def _check_start(
    pot: FlatPotential, z: torch.Tensor, u: torch.Tensor, g: torch.Tensor, where: str
) -> None:
    bad = ~(torch.isfinite(u) & torch.isfinite(g).all(1))
    if not bool(bad.any()):
        return
    c = int(bad.nonzero()[0, 0])
    check_init(pot, z[c], f"{where}, chain {c}")  # raises, naming the sites
    raise FloatingPointError(
        f"the potential at the initial point ({where}, chain {c}) is {float(u[c])} in the "
        "batched evaluation; pass init= a finite point (e.g. the MF-VI posterior mean)"
    )


class _Thinned:
    """At most ``capacity`` draws of a stream, evenly thinned over all of it.

    Draw ``j`` (from 0) is kept when ``j`` is a multiple of the stride ``k`` (initially
    ``ceil(expected / capacity)``). When a draw is due and the buffer is full, ``k`` doubles
    and every other kept draw is dropped (those at odd multiples of the old ``k``), so the
    kept draws are always draws ``0, k, 2k, ...``: between half of ``capacity`` and
    ``capacity`` of them once the buffer has filled, whatever the stream's final length.
    Buffers live on the CPU (one copy of the draw and its statistics per kept draw).
    """

    def __init__(
        self, chains: int, dim: int, capacity: int, expected: int, dtype: torch.dtype
    ) -> None:
        self.z = torch.empty(chains, capacity, dim, dtype=dtype, device="cpu")
        self.stats = torch.empty(chains, capacity, 4, dtype=torch.float64, device="cpu")
        self.n_steps: list[int] = []
        self.index: list[int] = []
        self.stride = max(1, math.ceil(expected / capacity))

    def due(self, j: int) -> bool:
        if j % self.stride:
            return False
        m = len(self.index)
        if m == self.z.shape[1]:
            self.stride *= 2
            half = (m + 1) // 2
            self.z[:, :half] = self.z[:, 0:m:2].clone()
            self.stats[:, :half] = self.stats[:, 0:m:2].clone()
            self.index, self.n_steps = self.index[::2], self.n_steps[::2]
        return j % self.stride == 0

    def add(self, j: int, z: torch.Tensor, stats: torch.Tensor, n_steps: int) -> None:
        m = len(self.index)
        self.z[:, m] = z.to("cpu")
        self.stats[:, m] = stats.to("cpu").T
        self.index.append(j)
        self.n_steps.append(n_steps)


def run_chees(
    potential: FlatPotential,
    *,
    seed: int,
    warmup: int,
    draws: int,
    chains: int,
    target_accept: float = TARGET_ACCEPT,
    step_size: float | None = None,
    init: Mapping[str, torch.Tensor] | None = None,
    progress: bool = False,
    threads: int | None = 1,
    keep: int | None = None,
    on_draw: Callable[[torch.Tensor], None] | None = None,
    until: Callable[[int], bool] | None = None,
    max_draws: int | None = None,
    max_leapfrog: int = 1024,
    adapt_mass_matrix: bool = True,
    trajectory_length: float | None = None,
    learning_rate: float = LEARNING_RATE,
    adam_restart: int | None = ADAM_RESTART,
) -> MCMCResult:
    """Sample ``potential`` with ChEES-HMC: ``chains`` chains as one batch (module docstring).

    Parameters
    ----------
    potential : FlatPotential
        Its device and dtype (those of ``potential.x``) are the sampler's.
    seed : int
        Seeds the device generator (momenta, Metropolis tests) and the CPU generator of the
        prior starts; chains are not seeded one by one.
    warmup, draws, chains : int
        Warm-up iterations (discarded), post-warm-up draws per chain (the minimum with
        ``until``), number of chains. The adaptation is meant for many chains; one chain
        works with running estimates in place of the cross-chain ones, noisier, and needs a
        longer warm-up (module docstring).

        How many chains (measured, issue 17). The update of :math:`\\log T` has no
        small-:math:`C` bias of its own: on a stationary :math:`\\mathcal N(0,
        \\mathrm{diag}(s^2))`, :math:`D = 100`, :math:`s` from 0.1 to 10, metric
        :math:`M^{-1} = s^2`, 400 iterations from :math:`T = \\epsilon`, 5 seeds, the adapted
        :math:`T` has median 1.82, 1.87, 1.90, 1.86, 1.85, 1.86 at :math:`C` = 2, 4, 8, 16,
        64, 256 (the discretized optimum; 2.25 in continuous time), and the same within
        :math:`\\pm 0.2` with BlackJAX's/TFP's update (:math:`u_t T` for :math:`n_t\\epsilon`,
        no division by :math:`s_t^2`); the full driver (windowed mass matrix) gives 1.6 to
        2.3 at every :math:`C \\ge 4`. What few chains break is the step size, on a
        posterior with stuck or multimodal chains: on the depth-2 two-moons network
        (:math:`D = 954`, :math:`N = 1000`, one shared MLE start, 500 warm-up iterations)
        the harmonic-mean acceptance of 8 chains swings between 0 and 1 from one
        iteration to the next (one chain at a bad point sets it), the step size between
        0.003 and 0.18, and the iterations with near-zero acceptance give large negative
        ChEES gradients that dominate Adam's normalization: :math:`T` falls from 0.15 to
        0.03 before the last window and is 0.08 adapted (1.3 leapfrog steps per draw, max
        R-hat 5.3), as it does with BlackJAX's/TFP's update (0.07, R-hat 5.7); 16 chains
        gave :math:`T` = 0.19 (ours) or 2.1 (TFP's update, R-hat 1.16, one seed each):
        chance, not a rule. With MF-VI starts on the 93-parameter
        network of ``specs/two_moons_depth_gpu_cpu.yaml`` (depth 2, 300 warm-up iterations)
        :math:`T` grows (16 chains: 2.5, 37 leapfrog steps per draw; 64: 2.9, 66 steps) and
        is still growing at the end of the warm-up (gradient positive in 92 to 95 % of the
        last 150 iterations), yet max R-hat is 1.74 (16) and 1.45 (64) where batched NUTS
        from the same 16 starts reaches 1.16 (252 steps per draw). Use per-chain starts
        (MF-VI draws), at least 64 chains on a network (the paper uses 128 and more) and
        check R-hat: 8 to 16 chains are not enough there.

        Trajectory length at depth 2 and 3 (measured, issue 17; ReLU networks of
        ``specs/two_moons_depth_gpu_cpu.yaml``, :math:`D` = 85 and 81, 64 chains from its
        MF-VI draws, 300 warm-up iterations, 400 draws, ``max_leapfrog=256``, sampler seeds
        0 to 2, rank R-hat and bulk ESS of ``arviz_stats`` over all draws of the
        unconstrained vector). Before the Adam restart at iteration 30 and the cap
        at :math:`10 L_{\\max}\\epsilon_0` (module docstring), :math:`T` was 1.4 to 2.2 at
        depth 2 and 1.1 to 1.2 at depth 3 (13 to 35 leapfrog steps per draw), max R-hat
        1.53 to 1.59 and 1.68 to 1.92, minimum ESS 91 to 118. The chains are not stuck: the
        log density mixes (R-hat 1.01, ESS over 4000), the slowest coordinates are the
        first layer's weights and biases, whose chain means spread evenly (not in clusters)
        over the posterior, and R-hat falls with more draws (1500 per chain: 1.21 and 1.33,
        minimum ESS 218 and 156). :math:`T` is too short for them: held fixed at 3
        (``learning_rate=0``) the same warm-up gives max R-hat 1.03 and 1.05 (169 and 266
        steps per draw, minimum ESS 1496 and 914; at depth 2 :math:`T` = 6 gives 1.01,
        ESS 4959, 385 steps). With the two changes :math:`T` is 3.2 to 3.4 and 2.9 to 3.4
        (79 to 117 steps), max R-hat 1.13 to 1.19 and 1.19 to 1.35, minimum ESS 251 to 344
        and 153 to 245 and median ESS 3781 to 6113 and 1239 to 3533 (from 489 to 790 and
        160 to 318); minimum ESS per 1000 gradients of a chain's sampling phase stays
        about the same (0.12 to 0.15 at depth 2, 0.07 to 0.09 at depth 3 from 0.12 to
        0.28), the median rises from 0.6 to 0.9 to 1.9 to 2.8 at depth 2. Either change
        alone helps less (Adam restart: R-hat 1.25 to 1.40 and 1.48 to 1.61; the cap: it
        binds in one run of three at depth 2). At depth 1 (:math:`D` = 97) both agree within
        the seeds' spread: R-hat 1.06 to 1.09 (1.04 to 1.08 before), minimum ESS 494 to
        871 (568 to 1145), :math:`T` 2.4 to 2.7 (2.1 to 2.5). The harmonic-mean
        acceptance is 0 or above 0.9 in 90 % of the warm-up iterations at every depth (one
        chain at a time sets it), so dual averaging's iterate swings by a factor of 50 and
        the step size is the worst chain's (mean acceptance 0.93 to 0.95 when sampling).
        The numbers above are at TFP's learning rate 0.025, where :math:`T` is still growing
        at the end of the warm-up (gradient positive in 86 to 100 % of the last 50
        iterations) and the chains, started from MF-VI's underdispersed posterior, have not
        spread when the windows estimate the metric (first-layer inverse mass 0.5 where the
        posterior variance is about 2.4). At 0.05 (the default since) depth 2 reaches max
        R-hat 1.04 to 1.06 (seeds 0 to 2; minimum ESS 770 to 1369, 0.23 to 0.42 per 1000
        gradients), depth 3 1.12 to 1.20 (232 to 393; 0.07 to 0.12), depth 1 1.01 and
        1.03 (seeds 0, 1; 5784 and 1719; 3.0 and 1.4, from 0.4 and 0.7), at about twice the
        warm-up's gradients (9000 to 18000 per chain). The step size falls (0.005 to 0.014) and
        :math:`T/\\epsilon` reaches ``max_leapfrog=256`` at depths 2 and 3: raise it there.
        A 600-iteration warm-up at 0.025 gives the same (depth 2: R-hat 1.04, ESS 1039;
        depth 3: 1.17, ESS 281; seed 0) at 29000 to 38000 warm-up gradients per chain.
    target_accept : float
        Target of dual averaging for the harmonic mean of the chains' acceptance probabilities.
    step_size : float, optional
        Initial step size; ``None`` searches one (:func:`find_shared_step_size` from 1).
    init : dict, optional
        Constrained values per site (``noise`` as sigma), with a leading dimension of
        ``chains`` (one start per chain) or with the site's shape (all chains start there;
        nothing is added: the mass matrix stays the identity during the initial buffer, while
        the chains spread); ``None``: each chain starts at its own prior draw.
    progress : bool
        One bar for all chains.
    threads : int, optional
        torch intra-op threads while sampling (restored afterwards); ``None`` keeps torch's.
    keep : int, optional
        Keep at most this many draws per chain in the result, thinned evenly over the whole
        post-warm-up stream: every ``k``-th draw from draw 0, ``k = ceil(draws / keep)`` at
        first, doubled (dropping every other kept draw) whenever the buffer is full, so
        between ``keep / 2`` and ``keep`` are kept once it has filled;
        ``settings["kept_index"]`` lists the post-warm-up indices kept. ``None``: keep all.
    on_draw : callable, optional
        ``on_draw(z)`` with every post-warm-up draw ``z`` of shape ``(chains, D)`` on the
        device, before thinning (e.g. a streaming moment estimate); the sampler goes on from
        that tensor, so ``on_draw`` must not modify it in place.
    until, max_draws : optional
        Stopping rule: after ``draws`` draws per chain, and then every :data:`EXTEND_EVERY`,
        ``until(n)`` is asked with ``n`` the draws per chain so far; sampling stops when it
        returns true or at ``max_draws`` (required, ``>= draws``). ``settings["draws"]`` is
        the number drawn.
    max_leapfrog : int
        :math:`L_{\\max}`, at most this many leapfrog steps per transition.
    adapt_mass_matrix : bool
        Estimate the diagonal inverse mass matrix in Stan's windows (pooled across chains);
        otherwise it stays the identity.
    trajectory_length : float, optional
        Initial :math:`T`; ``None`` starts at the step size (one leapfrog step), as BlackJAX.
    learning_rate : float
        Adam's rate on :math:`\\log T` (TFP's is 0.025; measured above).
    adam_restart : int, optional
        Restart Adam's moments at this dual-averaging iteration after the start and after
        each restart (module docstring); None: only at the restarts.

    Returns
    -------
    MCMCResult
        ``draws``: the kept draws, ``(chain, kept, *site_shape)``; ``sample_stats`` (``lp``,
        ``step_size``, ``n_steps``, ``diverging``, ``energy``, ``acceptance_rate``) of the kept
        draws; ``settings`` with ``step_size``, ``trajectory_length``, ``n_steps_mean`` (over
        all post-warm-up transitions), ``draws`` (drawn per chain), ``kept``, ``kept_index``,
        ``thin`` (the final stride), ``divergences`` (over all post-warm-up transitions and
        chains) and ``warmup_divergences``, ``inverse_mass_matrix`` (the ``D`` diagonal
        entries, one vector for all chains) and ``inverse_mass_min`` / ``_median`` / ``_max``,
        ``init`` (``"per chain"``, ``"shared"`` or ``"prior"``); with ``until`` also
        ``min_draws`` and ``max_draws``.

    Raises
    ------
    FloatingPointError
        A chain's start has a non-finite potential or gradient (the sites are named), or the
        adapted step size collapsed.
    """
    if warmup < 0 or draws < 1 or chains < 1 or not 0 < target_accept < 1:
        raise ValueError(
            "chees: need warmup >= 0, draws >= 1, chains >= 1 and 0 < target_accept < 1; "
            f"got {warmup}, {draws}, {chains}, {target_accept}"
        )
    if max_leapfrog < 1 or (keep is not None and keep < 1):
        raise ValueError(f"chees: need max_leapfrog >= 1 and keep >= 1; got {max_leapfrog}, {keep}")
    if step_size is not None and not (math.isfinite(step_size) and step_size > 0):
        raise ValueError(f"chees: step_size must be a positive number, got {step_size}")
    if until is not None and (max_draws is None or max_draws < draws):
        raise ValueError(
            f"chees: with a stopping rule max_draws must be >= draws ({draws}), got {max_draws}"
        )
    pot = potential
    device, dtype = pot.x.device, pot.x.dtype
    cap = draws if until is None else int(max_draws)
    s_dev, s_cpu = _seeds(seed)
    gen = torch.Generator(device=device).manual_seed(s_dev)
    t0 = time.perf_counter()
    z, how = _start(pot, init, chains, torch.Generator().manual_seed(s_cpu), device, dtype)
    u, g = pot.value_and_grad_batch(z)
    u = u.to(torch.float64)
    _check_start(pot, z, u, g, "a prior draw (init=None)" if init is None else "init")
    minv = torch.ones(pot.dim, dtype=dtype, device=device)
    eps0 = step_size
    if eps0 is None:
        eps0 = find_shared_step_size(pot, z, u, g, minv, 1.0, gen)
    ad = chees_adaptation(
        target_accept=target_accept,
        max_leapfrog=max_leapfrog,
        learning_rate=learning_rate,
        adam_restart=adam_restart,
        beta1=0.0 if chains > 1 else BETA1_ONE_CHAIN,
    )
    state = ad.init(eps0, trajectory_length)
    schedule = build_schedule(warmup) if warmup > 0 else ()
    welford = PooledWelford(pot.dim, device)
    centre = None
    if chains == 1:
        centre = (z[0].to(torch.float64), torch.zeros((), dtype=torch.float64, device=device))
    buf = _Thinned(chains, pot.dim, cap if keep is None else min(keep, cap), draws, dtype)
    bar = progress_bar(warmup + cap, f"chees {chains} chains", warmup) if progress else None
    saved = torch.get_num_threads()
    threads = saved if threads is None else threads
    warm_div, div_total, steps_total, drawn, window = 0, None, 0, 0, 0
    try:
        torch.set_num_threads(threads)
        for t in range(warmup):
            jitter = halton(t)
            n = num_steps(jitter, state.log_trajectory_length, state.log_step_size, max_leapfrog)
            noise = torch.randn(z.shape, generator=gen, dtype=dtype, device=device)
            logu = torch.rand(chains, generator=gen, dtype=torch.float64, device=device).log()
            z0, eps_t = z, math.exp(state.log_step_size)
            z, u, g, info = chees_transition(pot, z, u, g, eps_t, minv, n, noise, logu)
            if centre is not None:  # one chain: running mean and spread of its states
                wt = 1.0 / min(t + 2, CENTRE_WINDOW)
                mean = centre[0] + wt * (z[0].to(torch.float64) - centre[0])
                dev = z[0].to(torch.float64) - mean
                centre = (mean, centre[1] + wt * ((dev * dev).sum() - centre[1]))
            hm, grad, nd = chees_statistics(z0, info, n * eps_t, centre).tolist()
            warm_div += int(nd)
            state = ad.update(state, hm, grad)
            while window < len(schedule) and schedule[window].end < t:
                window += 1
            w = schedule[window]
            if adapt_mass_matrix and w.kind == "slow":
                welford.update(z)
                if t == w.end:
                    minv = welford.regularized_variance().to(dtype)
                    welford = PooledWelford(pot.dim, device)
                    eps = find_shared_step_size(
                        pot, z, u, g, minv, math.exp(state.log_step_size), gen
                    )
                    state = ad.restart(state, eps)
            if bar is not None:
                bar.update(1)
                if t % 10 == 0:
                    bar.set_postfix(eps=f"{math.exp(state.log_step_size):.2e}", n_steps=n)
        eps, traj = ad.final(state)
        t_warm = time.perf_counter() - t0
        if not (math.isfinite(eps) and eps > 1e-8):
            raise FloatingPointError(
                f"chees: the adapted step size (shared by all {chains} chains) collapsed to "
                f"{eps:.3g} (target_accept={target_accept}, diagonal mass matrix, warmup="
                f"{warmup}); start from a better point (init= the MF-VI posterior mean), warm "
                "up longer or lower target_accept"
            )
        log_eps, log_traj = math.log(eps), math.log(traj)
        for j in range(cap):
            jitter = halton(warmup + j)
            n = num_steps(jitter, log_traj, log_eps, max_leapfrog)
            noise = torch.randn(z.shape, generator=gen, dtype=dtype, device=device)
            logu = torch.rand(chains, generator=gen, dtype=torch.float64, device=device).log()
            z, u, g, info = chees_transition(pot, z, u, g, eps, minv, n, noise, logu)
            if on_draw is not None:
                on_draw(z)
            nd = info.diverging.sum()
            div_total = nd if div_total is None else div_total + nd
            steps_total += n
            if buf.due(j):
                st = torch.stack(
                    [-u, info.energy, info.acceptance_rate, info.diverging.to(torch.float64)]
                )
                buf.add(j, z, st, n)
            if bar is not None:
                bar.update(1)
            drawn = j + 1
            if until is not None and drawn >= draws and (drawn - draws) % EXTEND_EVERY == 0:
                if drawn == cap or until(drawn):
                    break
    finally:
        torch.set_num_threads(saved)
        if bar is not None:
            bar.close()
    kept = len(buf.index)
    flat = buf.z[:, :kept].clone()
    st = buf.stats[:, :kept].numpy()
    stats = {
        "lp": st[..., 0].copy(),
        "step_size": np.full((chains, kept), eps),
        "n_steps": np.broadcast_to(np.array(buf.n_steps, dtype=np.int64), (chains, kept)).copy(),
        "diverging": st[..., 3] > 0,
        "energy": st[..., 1].copy(),
        "acceptance_rate": st[..., 2].copy(),
    }
    mv = minv.to("cpu", torch.float64)
    settings = {
        "method": "chees",
        "seed": seed,
        "warmup": warmup,
        "draws": drawn,
        "kept": kept,
        "chains": chains,
        "target_accept": target_accept,
        "initial_step_size": step_size,
        "step_size": eps,
        "trajectory_length": traj,
        "n_steps_mean": steps_total / drawn,
        "max_leapfrog": max_leapfrog,
        "kept_index": list(buf.index),
        "thin": buf.stride,
        "divergences": int(div_total),
        "warmup_divergences": warm_div,
        "mass_matrix": "diag",
        "adapt_mass_matrix": adapt_mass_matrix,
        "mass_estimate": "pooled across chains, Stan windows" if adapt_mass_matrix else "identity",
        "inverse_mass_matrix": mv.tolist(),
        "inverse_mass_min": float(mv.min()),
        "inverse_mass_median": float(mv.median()),
        "inverse_mass_max": float(mv.max()),
        "init": how,
        "threads": threads,
        "learning_rate": learning_rate,
        "adam_restart": adam_restart,
    }
    if until is not None:
        settings.update(min_draws=draws, max_draws=cap)
    seconds = time.perf_counter() - t0
    return result(pot, flat, stats, settings, seconds, t_warm)
