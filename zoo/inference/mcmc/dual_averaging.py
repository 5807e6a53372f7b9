r"""Dual averaging of a log step size, as pure ``(init, update, final)`` over a NamedTuple.

Nesterov's primal-dual averaging (2009) in the form Hoffman & Gelman give it for the step
size of HMC (2014, section 3.2, their equation 6): with :math:`h_t = \delta - \alpha_t`
the gap between the target :math:`\delta` and the acceptance statistic of transition
:math:`t` (what :func:`DualAveraging.update` is given), :math:`\mu` the prox centre
(usually :math:`\log 10\,\epsilon_0`) and :math:`t` counted from the last restart,

.. math::

    \bar H_t = \Bigl(1 - \frac{1}{t + t_0}\Bigr) \bar H_{t-1} + \frac{h_t}{t + t_0}, \qquad
    x_t = \mu - \frac{\sqrt t}{\gamma} \bar H_t, \qquad
    \bar x_t = t^{-\kappa} x_t + (1 - t^{-\kappa}) \bar x_{t-1}.

The step size is :math:`e^{x_t}` while adapting and :math:`e^{\bar x_t}` after. The same
functions serve Python floats (one step size for all chains: ChEES) and float64 tensors of
shape ``(C,)`` (one per chain: the window adaptation): the step counter is one Python int and
every coefficient (:math:`1/(t + t_0)`, :math:`\sqrt t/\gamma` as ``t ** 0.5 / gamma``,
:math:`t^{-\kappa}`) one Python float, so each update is the same IEEE arithmetic, in the
same order, as Pyro's :class:`~pyro.ops.dual_averaging.DualAveraging` applied chain by chain
(``tests/zoo/inference/mcmc/test_window_adaptation.py`` checks it bit for bit).
:func:`exp` and :func:`log` take libm's exponential and logarithm element by element, as
Pyro's ``math.exp`` does (torch's vectorized ``exp``/``log`` may differ in the last bit).

The same shape as BlackJAX's ``optimizers/dual_averaging.py`` and NumPyro's
``infer/hmc_util.py::dual_averaging``; the prox centre is the caller's (the window
adaptation takes ``log(10 eps)``, ChEES ``log(eps) + log(10)``, as each always has).

References
----------
Nesterov, Y. (2009). Primal-dual subgradient methods for convex problems. Mathematical
Programming 120, 221-259.

Hoffman, M. D. and Gelman, A. (2014). The No-U-Turn Sampler: adaptively setting path lengths
in Hamiltonian Monte Carlo. JMLR 15, 1593-1623.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple, TypeVar

import torch

__all__ = [
    "GAMMA",
    "KAPPA",
    "T0",
    "DualAveraging",
    "DualAveragingState",
    "dual_averaging",
    "exp",
    "log",
]

#: Hoffman & Gelman's constants (Pyro's, Stan's, BlackJAX's defaults).
T0, KAPPA, GAMMA = 10, 0.75, 0.05

X = TypeVar("X", float, torch.Tensor)


class DualAveragingState(NamedTuple):
    """Dual-averaging state: floats (one for all chains) or float64 tensors ``(C,)``."""

    x: float | torch.Tensor
    """:math:`x_t`, the last iterate (the log step size while adapting)."""
    x_avg: float | torch.Tensor
    """:math:`\\bar x_t`, the weighted average of the iterates (the adapted log step size)."""
    gradient_avg: float | torch.Tensor
    """:math:`\\bar H_t`, the running average of :math:`h_t`."""
    mu: float | torch.Tensor
    """:math:`\\mu`, the prox centre the iterates shrink towards."""
    step: int
    """:math:`t`, updates since the last :func:`DualAveraging.init`; one for all chains."""


class DualAveraging(NamedTuple):
    """The pure functions of :func:`dual_averaging`."""

    init: Callable[..., DualAveragingState]
    """``init(mu, x=0.0, x_avg=0.0)``: a (re)started state around the prox centre ``mu``
    (:math:`t = 0`, :math:`\\bar H = 0`)."""
    update: Callable[[DualAveragingState, object], DualAveragingState]
    """``update(state, h)``: one iteration with :math:`h_t = \\delta - \\alpha_t`."""
    final: Callable[[DualAveragingState], object]
    """``final(state)``: :math:`\\bar x_t` (the iterate :math:`x` before any update)."""


def dual_averaging(
    *, t0: float = T0, kappa: float = KAPPA, gamma: float = GAMMA, keep_finite: bool = False
) -> DualAveraging:
    """Dual averaging with Hoffman & Gelman's ``t0``, ``kappa`` and ``gamma`` (module docstring).

    Parameters
    ----------
    t0, kappa, gamma : float
        :math:`t_0` (damps the first iterations), :math:`\\kappa` (the averaging weights'
        decay :math:`t^{-\\kappa}`) and :math:`\\gamma` (the shrinkage towards :math:`\\mu`).
    keep_finite : bool
        Floats only: an iterate that is not finite (an acceptance statistic that was not a
        number) is replaced by the previous one before it enters the average.

    Returns
    -------
    DualAveraging
    """

    def init(mu: X, x: X = 0.0, x_avg: X = 0.0) -> DualAveragingState:
        g0 = torch.zeros_like(mu) if isinstance(mu, torch.Tensor) else 0.0
        return DualAveragingState(x, x_avg, g0, mu, 0)

    def update(state: DualAveragingState, h: X) -> DualAveragingState:
        k = state.step + 1
        g_avg = (1 - 1 / (k + t0)) * state.gradient_avg + h / (k + t0)
        x = state.mu - (k**0.5) / gamma * g_avg
        if keep_finite and not math.isfinite(x):
            x = state.x
        w = k ** (-kappa)
        x_avg = (1 - w) * state.x_avg + w * x
        return DualAveragingState(x, x_avg, g_avg, state.mu, k)

    def final(state: DualAveragingState) -> X:
        return state.x_avg if state.step > 0 else state.x

    return DualAveraging(init, update, final)


def _exp1(v: float) -> float:
    try:
        return math.exp(v)
    except OverflowError:  # where Pyro would stop: inf, which the collapse check reports
        return math.inf


def exp(x: X) -> X:
    """libm's :math:`e^x` of a float, or of each element of a tensor (see module docstring)."""
    if isinstance(x, torch.Tensor):
        return x.new_tensor([_exp1(v) for v in x.tolist()])
    return _exp1(x)


def log(x: X) -> X:
    """libm's :math:`\\log x` of a float, or of each element of a tensor."""
    if isinstance(x, torch.Tensor):
        return x.new_tensor([math.log(v) for v in x.tolist()])
    return math.log(x)
