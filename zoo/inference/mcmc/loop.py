"""The one warm-up/draw loop of the batched samplers, and their typed result.

A sampler is a :class:`Program`: a kernel and its adaptation, run for ``C`` chains as one
batch (BlackJAX's shape: the kernel and the adaptation know nothing of the loop, the loop
nothing of them). :func:`sample` owns what every sampler shares:

- the arguments' checks, torch's threads (through :meth:`zoo.runtime.Runtime.threads_scope`)
  and one progress bar for all chains;
- the start: the program's starts, then one batched evaluation of the potential, and a
  message naming the sites when a chain starts at a non-finite point;
- ``warmup`` iterations of :meth:`Program.warmup`, then :meth:`Program.adapted` and the
  collapse check (an adapted step size that is not a finite number above 1e-8 raises);
- the draws of :meth:`Program.draw`, each passed to ``on_draw`` (e.g. streaming moments)
  and kept or not by the thinning (:class:`Thinned`: at most ``keep`` per chain, evenly over
  the whole stream);
- one stopping protocol: after ``draws`` draws per chain and then every
  :data:`EXTEND_EVERY`, ``until(drawn, kept)`` is asked (``drawn`` draws per chain so far,
  ``kept`` the flat kept draws ``(C, k, D)`` as a NumPy view); sampling stops when it
  returns true or at ``max_draws``;
- with a ``move`` (e.g. :class:`~zoo.inference.mcmc.symmetry.SymmetryMove`), a Gibbs step
  in the position after every transition, warm-up included: the moved chains, their
  potential and gradient evaluated once more, go back to the program
  (``program.reposition(z, u, g)``), whose momentum and adaptation it does not touch;
- the result, :class:`MCMCResult`, with what the run adapted as :class:`Adapted` and the
  program's own ``facts()`` where it has them;
- the loop's own state, one typed object (:class:`LoopState`: where the chains are, the
  counters, the seconds);
- with a :class:`~zoo.inference.checkpoint.CheckpointChannel`, the whole state (the
  program's attributes but its ``not_state``, those of the ``carry`` objects such as the
  streamed moments, the kept draws and the :class:`LoopState`) every ``every_s`` seconds, and the
  resume from a saved state of the same call (:func:`fingerprint`): the chains go on from
  the saved iteration, bitwise as if never stopped on the same machine and threads.

The one-chain Pyro reference path (:mod:`zoo.inference.mcmc.sequential`) has its own loop
per chain (Pyro's adapter drives it) and returns the same result type.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple, Protocol

import numpy as np
import torch

from zoo.inference.checkpoint import CheckpointChannel, decode, to_bytes
from zoo.inference.mcmc.potential import FlatPotential
from zoo.inference.mcmc.result import Adapted, MCMCResult, result
from zoo.inference.mcmc.resume import LoopState, fingerprint, read_saved, restore, saved_tree
from zoo.inference.mcmc.thinning import Thinned
from zoo.inference.progress import progress_bar
from zoo.runtime import Runtime

__all__ = [
    "EXTEND_EVERY",
    "LoopState",
    "MOVE_KEY",
    "Move",
    "Program",
    "Step",
    "Thinned",
    "Until",
    "chain_rngs",
    "fingerprint",
    "check_arguments",
    "check_init",
    "check_start",
    "check_step_sizes",
    "given_starts",
    "sample",
]

#: With ``until``, the stopping rule is asked after every this many draws past ``draws``.
EXTEND_EVERY = 25

#: ``until(drawn, kept) -> stop``: draws per chain so far, flat kept draws ``(C, k, D)``.
Until = Callable[[int, np.ndarray], bool]


class Step(NamedTuple):
    """What one transition of the chains tells the loop."""

    z: torch.Tensor
    """(C, D) the chains' new states (on the potential's device; not to be modified)."""
    n_steps: float
    """Leapfrog steps of the transition (mean over chains), for the bar and the mean."""
    divergences: Any
    """Divergent chains: an int or a 0-d tensor (summed on the device, read once)."""
    stats: Callable[[], dict[str, np.ndarray]]
    """The per-chain statistics of the transition, ``(C,)`` each, built only when kept."""
    at_cap: Any = 0
    """Chains whose trajectory was cut at the program's ``trajectory_cap`` (an int or a 0-d
    tensor, summed on the device); 0 where the kernel has no cap."""


class Program(Protocol):
    """A kernel and its adaptation for ``C`` chains, as :func:`sample` drives them."""

    label: str
    """The bar's and the messages' name (``"nuts"``, ``"chees"``, ...)."""

    trajectory_cap: int | None
    """The cap on one trajectory in the kernel's own unit (NUTS's tree depth, ChEES's
    leapfrog steps, MAMS's integration steps), which :attr:`Step.at_cap` counts; None: none."""

    def starts(
        self, pot: FlatPotential, init: Mapping[str, torch.Tensor] | None, chains: int
    ) -> tuple[torch.Tensor, str]:
        """The chains' first states ``(C, D)`` and how they were made (see MCMCResult.init)."""

    def start(self, z: torch.Tensor, u: torch.Tensor, g: torch.Tensor) -> None:
        """Set up the adaptation at the checked starts (potentials ``u``, gradients ``g``)."""

    def warmup(self, t: int) -> Step:
        """Warm-up transition ``t`` (from 0) and the adaptation's update."""

    def adapted(self) -> Adapted:
        """End the warm-up: what the draws will use."""

    def draw(self, j: int) -> Step:
        """Post-warm-up transition ``j`` (from 0) with the adapted parameters."""

    # A program that can take a move between its transitions (``sample(move=...)``) also has
    # ``reposition(z, u, g)``: go on from the chains ``z`` (C, D), potentials ``u`` (C,)
    # and gradients ``g`` (C, D) instead of where its last transition left them.
    # A program that a checkpoint can save also has ``not_state``: the names of its
    # attributes that are not state (the potential, functions, data made from arguments);
    # every other attribute is saved and restored as it is, and then its ``restored()``,
    # where it has one, rebuilds what it derives from them.


def chain_rngs(seed: int, chain: int) -> tuple[np.random.Generator, torch.Generator]:
    """Chain ``chain``'s generators when chains are seeded one by one (the one-chain path and
    the batched NUTS/HMC): NumPy (tree directions, coins) and torch (momenta, prior start),
    both from ``SeedSequence([seed, chain])``."""
    ss = np.random.SeedSequence([seed, chain])
    gen = torch.Generator().manual_seed(int(ss.generate_state(1, np.uint64)[0] >> 1))
    return np.random.default_rng(ss), gen


def given_starts(
    pot: FlatPotential, init: Mapping[str, torch.Tensor], chains: int
) -> tuple[torch.Tensor, str]:
    """The chains' starts ``(C, D)`` from constrained values per site, and how they were made:
    each site with its own shape (``"shared"``: every chain starts there) or with a leading
    dimension of ``chains`` (``"per chain"``)."""
    z = pot.ravel(init).detach().to(device=pot.x.device, dtype=pot.x.dtype)
    if z.dim() == 1:
        return z.expand(chains, -1).clone(), "shared"
    if z.dim() == 2 and z.shape[0] == chains:
        return z.clone(), "per chain"
    raise ValueError(
        f"init has batch shape {tuple(z.shape[:-1])}; give each site its own shape (one start "
        f"shared by all chains) or a leading dimension of chains={chains} (one start per chain)"
    )


def check_arguments(label: str, warmup: int, draws: int, chains: int, target_accept: float) -> None:
    """Raise ValueError unless ``warmup >= 0``, ``draws >= 1``, ``chains >= 1`` and
    ``0 < target_accept < 1``."""
    if warmup < 0 or draws < 1 or chains < 1 or not 0 < target_accept < 1:
        raise ValueError(
            f"{label}: need warmup >= 0, draws >= 1, chains >= 1 and 0 < target_accept < 1; "
            f"got {warmup}, {draws}, {chains}, {target_accept}"
        )


def check_init(pot: FlatPotential, z: torch.Tensor, where: str) -> None:
    """Raise, naming the sites, when the potential at ``z`` (D,) or its gradient is not finite."""
    u, g = pot.value_and_grad(z)
    if math.isfinite(u) and bool(torch.isfinite(g).all()):
        return
    bad = [n for n, s in pot.site_slices.items() if not bool(torch.isfinite(z[s]).all())]
    bad_g = [n for n, s in pot.site_slices.items() if not bool(torch.isfinite(g[s]).all())]
    raise FloatingPointError(
        f"the potential at the initial point ({where}) is {u}; non-finite values in sites "
        f"{bad}, non-finite gradients in sites {bad_g}; pass init= a finite point (e.g. the "
        "MF-VI posterior mean, guide.median()) and check x and y for NaN or inf"
    )


def check_start(
    pot: FlatPotential, z: torch.Tensor, u: torch.Tensor, g: torch.Tensor, where: str
) -> None:
    """Raise when a chain's start (batched potential ``u``, gradient ``g``) is not finite."""
    bad = ~(torch.isfinite(u) & torch.isfinite(g).all(1))
    if not bool(bad.any()):
        return
    c = int(bad.nonzero()[0, 0])
    check_init(pot, z[c], f"{where}, chain {c}")  # raises, naming the sites
    raise FloatingPointError(
        f"the potential at the initial point ({where}, chain {c}) is {float(u[c])} in the "
        "batched evaluation; pass init= a finite point (e.g. the MF-VI posterior mean)"
    )


def check_step_sizes(label: str, eps: np.ndarray, target_accept: float, warmup: int) -> None:
    """Raise when an adapted step size is not a finite number above 1e-8."""
    for c, e in enumerate(np.asarray(eps, dtype=np.float64).reshape(-1).tolist()):
        if not (math.isfinite(e) and e > 1e-8):
            raise FloatingPointError(
                f"{label}: the adapted step size of chain {c} collapsed to {e:.3g} "
                f"(target_accept={target_accept}, diagonal mass matrix, warmup={warmup}); "
                "start from a better point (init= the MF-VI posterior mean), warm up longer "
                "or lower target_accept"
            )


class Move(Protocol):
    """A Gibbs step in the position of ``C`` chains that leaves the target invariant."""

    label: str
    """Its name (a checkpoint of another move does not resume)."""

    def __call__(self, z: torch.Tensor) -> torch.Tensor:
        """The moved chains, a new ``(C, D)`` tensor."""


#: The key of the move in a checkpoint's ``carry`` and fingerprint.
MOVE_KEY = "symmetry_moves"


def _carry_move(program: Any, move: Move | None, carry: dict, fp: dict) -> None:
    """Check that ``program`` can take ``move``; save the move's state with the loop's and
    name it in the fingerprint (nothing without a move)."""
    if move is None:
        return
    if not hasattr(program, "reposition"):
        raise ValueError(f"{program.label}: the program cannot take a move (no reposition)")
    carry[MOVE_KEY] = move
    fp[MOVE_KEY] = move.label


def _moved(program: Any, pot: FlatPotential, move: Move | None, st: Step) -> Step:
    """``move`` after the transition ``st`` (``st`` itself without one): the program goes on
    from the moved chains, at their potential and gradient; the step's position and ``lp``
    are the moved ones."""
    if move is None:
        return st
    z = move(st.z)
    u, g = pot.value_and_grad_batch(z)
    program.reposition(z, u, g)
    stats = st.stats

    def moved_stats() -> dict[str, np.ndarray]:
        return {**stats(), "lp": -u.cpu().numpy()}

    return st._replace(z=z, stats=moved_stats)


def sample(
    program: Program,
    pot: FlatPotential,
    *,
    warmup: int,
    draws: int,
    chains: int,
    target_accept: float,
    init: Mapping[str, torch.Tensor] | None = None,
    keep: int | None = None,
    on_draw: Callable[[torch.Tensor], None] | None = None,
    until: Until | None = None,
    max_draws: int | None = None,
    progress: bool = False,
    threads: int | None = None,
    checkpoint: CheckpointChannel | None = None,
    carry: Mapping[str, Any] | None = None,
    move: Move | None = None,
) -> MCMCResult:
    """Warm up ``chains`` chains of ``program`` on ``pot``, then draw (module docstring).

    Parameters
    ----------
    program : Program
    pot : FlatPotential
        Anything with ``value_and_grad_batch``, ``ravel``, ``unravel``, ``dim`` and ``x``.
    warmup, draws, chains : int
        Warm-up iterations, draws per chain (the minimum under ``until``), chains.
    target_accept : float
        Checked here (``0 < target_accept < 1``) and named in the collapse message.
    init : dict, optional
        Constrained starting values per site (see the program's ``starts``).
    keep : int, optional
        Hold at most this many draws per chain (:class:`Thinned`); None: all.
    on_draw : callable, optional
        ``on_draw(z)`` with every post-warm-up state ``(C, D)`` before thinning.
    until, max_draws : optional
        The stopping rule (module docstring); ``max_draws >= draws`` is required with it.
    progress : bool
        One bar for all chains.
    threads : int, optional
        torch's CPU threads while sampling (:meth:`Runtime.threads_scope`); None keeps them.
    checkpoint : CheckpointChannel, optional
        Save the state every ``checkpoint.every_s`` seconds and resume from a saved one
        (module docstring); the program must have ``not_state``.
    carry : dict, optional
        Objects whose state goes with the loop's (e.g. ``on_draw``'s streamed moments):
        their attributes are saved and restored with the program's.
    move : Move, optional
        A Gibbs step in the position after every transition (module docstring); saved with
        the state as a ``carry`` object. The program needs ``reposition``.
    """
    label = program.label
    check_arguments(label, warmup, draws, chains, target_accept)
    _check_stopping(label, keep, until, max_draws, draws)
    cap = draws if until is None else int(max_draws)
    buf = Thinned(chains, pot.dim, cap if keep is None else min(keep, cap), draws, pot.x.dtype)
    carry = dict(carry or {})
    fp = fingerprint(program, pot, chains, warmup, cap, buf.z.shape[1])
    _carry_move(program, move, carry, fp)
    saver = _Saver(checkpoint, program, fp, carry, buf)
    ls = LoopState()
    bar = _bar(progress, label, chains, warmup, cap)
    try:
        with Runtime(threads=threads).threads_scope():
            how = _start(program, pot, init, chains)
            saved, ls = _resume(program, carry, buf, checkpoint, fp, warmup, ls, bar)
            j_first = ls.draw_next
            _warm_up(program, pot, move, ls, warmup, bar, saver)
            saver.adapted = _adapted(program, saved, j_first)
            if j_first == 0:
                ls.t_warm = ls.seconds + saver.elapsed()
            check_step_sizes(label, saver.adapted.step_size, target_accept, warmup)
            loop = _DrawLoop(program, pot, move, on_draw, buf, until, draws, cap, bar)
            loop.run(ls, j_first, warmup, saver)
    finally:
        if bar is not None:
            bar.close()
    return _result(pot, program, buf, ls, ls.seconds + saver.elapsed(), saver.adapted, how)


def _bar(progress: bool, label: str, chains: int, warmup: int, cap: int):
    """One progress bar for all chains' warm-up and draws, or None."""
    if not progress:
        return None
    return progress_bar(warmup + cap, f"{label} {chains} chains", unit="draw", warmup=warmup)


def _resume(program, carry: dict, buf: Thinned, checkpoint, fp: dict, warmup: int, ls, bar):
    """``(saved, loop state)``: the saved state read and restored when the channel holds one
    of this run (the bar moved on to it), else ``(None, ls)``."""
    saved = None if checkpoint is None else read_saved(checkpoint, fp, program.label)
    if saved is None:
        return None, ls
    ls = restore(program, carry, buf, saved, checkpoint, program.label, warmup) or ls
    if bar is not None:
        bar.update(ls.warmup_next + ls.draw_next)
    return saved, ls


def _start(program, pot: FlatPotential, init: Mapping[str, torch.Tensor] | None, chains: int):
    """The chains' starts, checked, handed to the program; returns how they were made."""
    z, how = program.starts(pot, init, chains)
    u, g = pot.value_and_grad_batch(z)
    check_start(pot, z, u, g, "a prior draw (init=None)" if init is None else "init")
    program.start(z, u, g)
    return how


def _result(pot, program, buf: Thinned, ls: LoopState, seconds: float, adapted, how):
    """The run's :class:`MCMCResult` from the held draws and the loop's counters."""
    return result(
        pot,
        buf.kept().clone(),
        buf.stacked(),
        seconds,
        ls.t_warm,
        adapted=adapted,
        drawn=ls.drawn,
        kept_index=tuple(buf.index),
        thin=buf.stride,
        divergences=int(ls.div_total),
        warmup_divergences=ls.warm_div,
        n_steps_mean=ls.steps_total / ls.drawn,
        init=how,
        trajectory_cap=program.trajectory_cap,
        saturated=int(ls.saturated),
        facts=program.facts() if hasattr(program, "facts") else {},
    )


def _check_stopping(
    label: str, keep: int | None, until: Until | None, max_draws: int | None, draws: int
) -> None:
    """``keep >= 1``, and with a stopping rule ``max_draws >= draws``."""
    if keep is not None and keep < 1:
        raise ValueError(f"{label}: need keep >= 1, got {keep}")
    if until is not None and (max_draws is None or max_draws < draws):
        raise ValueError(
            f"{label}: with a stopping rule max_draws must be >= draws ({draws}), got {max_draws}"
        )


class _Saver:
    """The loop's checkpoints: the state saved whole every ``checkpoint.every_s`` seconds
    (nothing without a channel), the seconds spent counted from this object's creation."""

    def __init__(self, checkpoint, program, fp: dict, carry: dict, buf: Thinned) -> None:
        self.checkpoint = checkpoint
        self.program = program
        self.fp = fp
        self.carry = carry
        self.buf = buf
        self.t0 = self.last = time.perf_counter()
        self.adapted: Adapted | None = None

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def due(self) -> bool:
        return (
            self.checkpoint is not None
            and time.perf_counter() - self.last >= self.checkpoint.every_s
        )

    def save(self, ls: LoopState, warmup_next: int, draw_next: int) -> None:
        ls.warmup_next, ls.draw_next = warmup_next, draw_next
        now = LoopState(**{**ls.__dict__, "seconds": ls.seconds + self.elapsed()})
        tree = saved_tree(self.program, self.fp, now, self.carry, self.buf, self.adapted)
        self.checkpoint.save(to_bytes(tree))
        self.last = time.perf_counter()


def _warm_up(program, pot, move, ls: LoopState, warmup: int, bar, saver: _Saver) -> None:
    """The warm-up transitions from where a saved state left them, saving when due."""
    for t in range(ls.warmup_next, warmup):
        st = _moved(program, pot, move, program.warmup(t))
        ls.warm_div += int(st.divergences)
        if bar is not None:
            bar.update(1)
        if saver.due():
            saver.save(ls, t + 1, 0)


def _adapted(program, saved, j_first: int) -> Adapted:
    """The warm-up's result: the program's, or the saved one when the warm-up ended before
    the save (its end is not run twice)."""
    was = None if saved is None else saved.tree.get("adapted")
    if j_first == 0 or was is None:  # (checkpoints written by the code of commit 8e7e53e)
        return program.adapted()
    return decode(was)


class _DrawLoop(NamedTuple):
    """The draws after the warm-up: each through ``on_draw`` and the thinned buffer, the
    stopping rule asked every :data:`EXTEND_EVERY` draws past ``draws``."""

    program: Any
    pot: FlatPotential
    move: Move | None
    on_draw: Callable[[torch.Tensor], None] | None
    buf: Thinned
    until: Until | None
    draws: int
    cap: int
    bar: Any

    def run(self, ls: LoopState, j_first: int, warmup: int, saver: _Saver) -> None:
        for j in range(j_first, self.cap):
            st = _moved(self.program, self.pot, self.move, self.program.draw(j))
            if self.on_draw is not None:
                self.on_draw(st.z)
            ls.div_total = ls.div_total + st.divergences
            ls.saturated = ls.saturated + st.at_cap
            ls.steps_total += st.n_steps
            if self.buf.due(j):
                self.buf.add(j, st.z, st.stats())
            if self.bar is not None:
                self.bar.update(1)
            ls.drawn = j + 1
            if self._stop(ls.drawn):
                break
            if saver.due() and ls.drawn < self.cap:
                saver.save(ls, warmup, ls.drawn)

    def _stop(self, drawn: int) -> bool:
        if self.until is None or drawn < self.draws or (drawn - self.draws) % EXTEND_EVERY:
            return False
        return drawn == self.cap or bool(self.until(drawn, self.buf.kept().numpy()))
