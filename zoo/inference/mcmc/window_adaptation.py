"""Warm-up adaptation of step size and diagonal mass matrix for C chains as pure functions.

Stan's windowed adaptation as Pyro's :class:`~pyro.infer.mcmc.adaptation.WarmupAdapter`
runs it, written the way BlackJAX's ``adaptation/window_adaptation.py`` and NumPyro's
``infer/hmc_util.py`` write it: a factory :func:`window_adaptation` returns pure functions
``init``, ``update``, ``restart`` and ``final`` over one :class:`AdaptationState` whose
tensors carry the chains as their leading dimension, and the schedule is data (a tuple of
:class:`Window`, computed once from the warm-up length by :func:`build_schedule`).

Step size: dual averaging (Nesterov 2009; Hoffman & Gelman 2014, section 3.2). With
:math:`\\alpha_t` the acceptance statistic of transition :math:`t`, :math:`\\delta` its
target and :math:`\\mu = \\log(10\\,\\epsilon_0)`,

.. math::

    \\bar H_t = \\Bigl(1 - \\frac{1}{t + t_0}\\Bigr) \\bar H_{t-1}
                + \\frac{\\delta - \\alpha_t}{t + t_0}, \\qquad
    x_t = \\mu - \\frac{\\sqrt t}{\\gamma} \\bar H_t, \\qquad
    \\bar x_t = t^{-\\kappa} x_t + (1 - t^{-\\kappa}) \\bar x_{t-1},

the step size is :math:`\\epsilon_t = e^{x_t}` during warm-up and :math:`e^{\\bar x_T}`
after it (:math:`\\gamma = 0.05`, :math:`t_0 = 10`, :math:`\\kappa = 0.75`, Pyro's
:class:`~pyro.ops.dual_averaging.DualAveraging`). At the start and after every mass-matrix
window the scheme restarts (:math:`t = 0`, :math:`\\bar H = \\bar x = 0`) around a step size
:math:`\\epsilon_0` found by :func:`~zoo.inference.mcmc.step_size.find_reasonable_step_size` (Hoffman & Gelman 2014,
Algorithm 4, as Pyro's ``HMC._find_reasonable_step_size``).

Mass matrix: inside each slow window the draws :math:`z_1, \\dots, z_n` feed Welford's
running mean and sum of squared deviations; at the window's end the inverse mass matrix
becomes Stan's regularized variance
:math:`\\frac{n}{n + 5}\\,\\hat\\sigma^2 + 10^{-3} \\frac{5}{n + 5}` with
:math:`\\hat\\sigma^2 = M_2 / (n - 1)`, and the estimator starts afresh.

Chains share the schedule, hence every counter (dual-averaging step, Welford count, window
index) is one Python int for all chains, and every coefficient (:math:`1/(t + t_0)`,
:math:`\\sqrt t / \\gamma`, :math:`t^{-\\kappa}`, :math:`n/(n + 5)`) is one Python float
computed as Pyro computes it; the per-chain quantities are float64 tensors of shape
``(C,)`` (dual averaging, like Pyro's Python floats) and tensors of shape ``(C, D)`` in the
dtype of the draws (Welford, like Pyro's tensors). Every update is then the same IEEE
arithmetic, in the same order, as Pyro's per-chain objects, and the step sizes and inverse
mass matrices agree with theirs bit for bit (``tests/zoo/inference/mcmc/test_window_adaptation.py``).
Exponentials and logarithms are the one exception to "one tensor operation": they are taken
with libm element by element (:func:`~zoo.inference.mcmc.dual_averaging.exp`), as Pyro takes
them, because torch's vectorized ``exp`` and ``log`` may differ from libm in the last bit.

References
----------
Hoffman, M. D. and Gelman, A. (2014). The No-U-Turn Sampler: adaptively setting path lengths
in Hamiltonian Monte Carlo. JMLR 15, 1593-1623.

Nesterov, Y. (2009). Primal-dual subgradient methods for convex problems. Mathematical
Programming 120, 221-259.

Stan Development Team. Stan Reference Manual, "MCMC Sampling: Hamiltonian Monte Carlo /
Automatic parameter tuning" (adaptation windows: initial buffer 75, base window 25 doubling,
term buffer 50).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import NamedTuple

import torch

from zoo.inference.mcmc.dual_averaging import DualAveragingState, dual_averaging, exp, log
from zoo.inference.mcmc.welford import Welford, regularized_variance, welford_init, welford_update

__all__ = [
    "AdaptationState",
    "Window",
    "WindowAdaptation",
    "build_schedule",
    "window_adaptation",
]

#: Stan's windows: initial fast buffer, final fast buffer, first slow window.
INITIAL_BUFFER, FINAL_BUFFER, BASE_WINDOW = 75, 50, 25


class Window(NamedTuple):
    """Warm-up iterations ``start`` to ``end`` (both included) and what happens in them.

    ``kind`` is ``"initial"`` (fast buffer: step size only), ``"slow"`` (the mass matrix is
    estimated too, and set at the window's end) or ``"final"`` (fast buffer; at its end the
    step size becomes the averaged one).
    """

    start: int
    end: int
    kind: str


def build_schedule(num_warmup: int) -> tuple[Window, ...]:
    """Stan's adaptation windows for ``num_warmup`` iterations, as Pyro builds them.

    An initial buffer of 75 iterations, slow windows of 25, 50, 100, ... iterations (when
    three times a window's size no longer fits before the final buffer, that window stretches
    to reach it and is the last slow one), and a final buffer of 50. When the three do not fit (``num_warmup < 150``) the
    buffers are 15% and 10% of the warm-up and one slow window takes the rest; below 20
    iterations there is a single window, which only adapts the step size (Pyro's
    ``WarmupAdapter._build_adaptation_schedule``; ``num_warmup = 0`` gives the empty window
    ``(0, -1)`` as there).

    Parameters
    ----------
    num_warmup : int

    Returns
    -------
    tuple of Window
    """
    if num_warmup < 20:
        return (Window(0, num_warmup - 1, "final"),)
    start, end, first = INITIAL_BUFFER, FINAL_BUFFER, BASE_WINDOW
    if start + end + first > num_warmup:
        start, end = int(0.15 * num_warmup), int(0.1 * num_warmup)
        first = num_warmup - start - end
    windows = [Window(0, start - 1, "initial")]
    end_start = num_warmup - end
    size, nxt = first, start
    while nxt < end_start:
        cur, cur_size = nxt, size
        if 3 * cur_size <= end_start - cur:
            size = 2 * cur_size
        else:
            cur_size = end_start - cur
        nxt = cur + cur_size
        windows.append(Window(cur, nxt - 1, "slow"))
    windows.append(Window(end_start, num_warmup - 1, "final"))
    return tuple(windows)


class AdaptationState(NamedTuple):
    """Warm-up state of C chains (tensors have the chains as leading dimension)."""

    step_size: torch.Tensor
    """(C,) float64: the step size of the next transition: :math:`e^{x_t}` during warm-up,
    the searched :math:`\\epsilon_0` right after a restart, :math:`e^{\\bar x_T}` after it."""
    inverse_mass_matrix: torch.Tensor
    """(C, D), dtype of the draws: the diagonal inverse mass matrix in use."""
    da: DualAveragingState
    """Dual averaging of the log step sizes, (C,) float64 tensors (its ``x`` is stale right
    after init or a restart, as in Pyro: :attr:`step_size` is then the restart value)."""
    welford: Welford
    """Per-chain Welford estimate, (C, D), of the draws of the current slow window."""
    window: int
    """Index into the schedule of the current window (its length once warm-up is over)."""
    needs_search: bool
    """True when the driver must call :func:`~zoo.inference.mcmc.step_size.find_reasonable_step_size` at the current draws
    with the current inverse mass matrix, starting from :attr:`step_size`, and pass the result
    to ``restart``: after ``init`` (unless told not to) and after each slow window."""

    @property
    def log_step_size_avg(self) -> torch.Tensor:
        """(C,) :math:`\\bar x_t`, the averaged log step size."""
        return self.da.x_avg

    @property
    def gradient_avg(self) -> torch.Tensor:
        """(C,) :math:`\\bar H_t`."""
        return self.da.gradient_avg

    @property
    def da_step(self) -> int:
        """Dual-averaging iterations since the last restart."""
        return self.da.step


class WindowAdaptation(NamedTuple):
    """The pure functions of :func:`window_adaptation` and the schedule they follow."""

    init: Callable[..., AdaptationState]
    """``init(z, step_size=1.0, search=True)``: the state before warm-up for draws ``z`` of
    shape (C, D); unit inverse mass matrix; dual averaging set around ``step_size`` (a float
    or a (C,) tensor); ``needs_search`` as ``search``."""
    update: Callable[[AdaptationState, int, torch.Tensor, torch.Tensor], AdaptationState]
    """``update(state, t, z, accept_prob)``: one warm-up iteration ``t`` (from 0), with the
    chains' new draws ``z`` (C, D) and acceptance statistics (C,); Pyro's
    ``WarmupAdapter.step``. A no-op for ``t >= num_warmup``."""
    restart: Callable[[AdaptationState, torch.Tensor], AdaptationState]
    """``restart(state, step_size)``: dual averaging restarted around ``step_size`` (C,);
    Pyro's ``reset_step_size_adaptation`` after its step-size search."""
    final: Callable[[AdaptationState], tuple[torch.Tensor, torch.Tensor]]
    """``final(state)``: the adapted ``(step_size, inverse_mass_matrix)``."""
    schedule: tuple[Window, ...]
    """The windows, from :func:`build_schedule`."""


def window_adaptation(
    num_warmup: int, *, target_accept: float = 0.8, adapt_mass_matrix: bool = True
) -> WindowAdaptation:
    """Stan's windowed warm-up for C chains at once: dual-averaging step size, diagonal mass.

    The functions reproduce, chain by chain, Pyro's ``WarmupAdapter(adapt_step_size=True,
    target_accept_prob=target_accept, adapt_mass_matrix=adapt_mass_matrix)`` configured with
    a diagonal mass matrix of one block (what :mod:`zoo.inference.mcmc.sequential` uses), step
    sizes and inverse mass matrices bit for bit.

    A driver runs::

        ad = window_adaptation(warmup, target_accept=0.8)
        state = ad.init(z, step_size)
        for t in range(warmup):
            if state.needs_search:
                eps = find_reasonable_step_size(..., z, state.step_size, state.inverse_mass_matrix, ...)
                state = ad.restart(state, eps)
            z, accept_prob = transition(z, state.step_size, state.inverse_mass_matrix)
            state = ad.update(state, t, z, accept_prob)
        step_size, inverse_mass_matrix = ad.final(state)

    (with ``warmup = 0`` the initial search still runs, as in Pyro).

    Parameters
    ----------
    num_warmup : int
        Warm-up iterations; fixes the schedule.
    target_accept : float
        :math:`\\delta`, the acceptance statistic dual averaging aims at.
    adapt_mass_matrix : bool
        Estimate the inverse mass matrix in the slow windows; if false it stays the identity
        and the step size is searched only once, at the start.

    Returns
    -------
    WindowAdaptation
        ``init``, ``update``, ``restart``, ``final`` and ``schedule``.
    """
    schedule = build_schedule(num_warmup)
    da = dual_averaging()

    def restart(state: AdaptationState, step_size: torch.Tensor) -> AdaptationState:
        eps = step_size.to(torch.float64)
        zeros = torch.zeros_like(eps)
        return state._replace(
            step_size=eps,
            da=da.init(log(10 * eps), state.da.x, zeros),
            needs_search=False,
        )

    def init(
        z: torch.Tensor, step_size: float | torch.Tensor = 1.0, search: bool = True
    ) -> AdaptationState:
        if z.dim() != 2:
            raise ValueError(f"z has shape {tuple(z.shape)}; expected (chains, D)")
        c = z.shape[0]
        eps = torch.as_tensor(step_size, dtype=torch.float64).expand(c).clone()
        zeros = torch.zeros(c, dtype=torch.float64)
        state = AdaptationState(
            step_size=eps,
            inverse_mass_matrix=torch.ones_like(z),
            da=da.init(zeros, zeros, zeros),
            welford=welford_init(tuple(z.shape), dtype=z.dtype, device=z.device),
            window=0,
            needs_search=search,
        )
        return restart(state, eps)._replace(needs_search=search)

    update = partial(_window_update, schedule, da, num_warmup, target_accept, adapt_mass_matrix)

    def final(state: AdaptationState) -> tuple[torch.Tensor, torch.Tensor]:
        return state.step_size, state.inverse_mass_matrix

    return WindowAdaptation(init, update, restart, final, schedule)


def _window_update(
    schedule,
    da,
    num_warmup: int,
    target_accept: float,
    adapt_mass_matrix: bool,
    state: AdaptationState,
    t: int,
    z: torch.Tensor,
    accept_prob: torch.Tensor,
) -> AdaptationState:
    """:func:`window_adaptation`'s ``update`` after transition ``t``: dual averaging every
    iteration, Welford in the slow windows, the inverse mass matrix at a slow window's end
    (and a new step-size search), the averaged step size at the final window's end."""
    if t >= num_warmup:
        return state
    i = state.window
    window = schedule[i]
    slow = adapt_mass_matrix and window.kind == "slow"
    # dual averaging, in Pyro's order of operations (its Python floats are float64)
    d = da.update(state.da, target_accept - accept_prob.to(torch.float64))
    state = state._replace(step_size=exp(d.x), da=d)
    if slow:  # Welford (Pyro's WelfordCovariance, diagonal)
        state = state._replace(welford=welford_update(state.welford, z))
    if t != window.end:
        return state
    if window.kind == "final":
        return state._replace(window=i + 1, step_size=exp(da.final(d)))
    if slow:
        state = state._replace(
            inverse_mass_matrix=regularized_variance(state.welford),
            welford=welford_init(tuple(z.shape), dtype=z.dtype, device=z.device),
            needs_search=True,
        )
    return state._replace(window=i + 1)
