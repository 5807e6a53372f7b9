"""The host's side of a batched NUTS transition (:func:`zoo.inference.mcmc.batched.nuts_step_batch`).

Each chain's uniforms are drawn ahead as a block (:class:`Coins`) and consumed on the device
in the order in which the recursive one-chain kernel (:mod:`zoo.inference.mcmc.kernel`) draws
them; at the end of the transition the record of its tree (every leaf's log weight, which
chains built it, every merge's U-turn criterion) comes back in one copy, and
:func:`transition_stats` computes from it what the one-chain kernel computes as it goes, in
its Python floats and order of sums: the acceptance statistic, the steps, the tree depth, the
divergence flag and the coins the recursion draws on its way up out of a subtree that
stopped (they decide nothing, so only their count matters); then it advances each
generator by the uniforms its chain used.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import numpy as np
import torch

from zoo.inference.mcmc.nuts_tree import layout

__all__ = ["Coins", "coins_after_stop", "coins_on_the_way_up", "transition_stats"]

#: Bit generators whose ``advance`` jumps (modulo the period 2^128).
_PCG = (np.random.PCG64, np.random.PCG64DXSM)
#: Uniforms a transition draws at first (a tree of depth 5 uses at most 36); more as its tree
#: grows (:meth:`Coins.reserve`).
FIRST = 36


class Coins:
    """Each chain's uniforms of one transition, drawn ahead on the host as a ``(C, M)`` block
    (grown as the tree grows).

    ``numpy.random.Generator.random`` takes one 64-bit output of the bit generator per
    double, so the ``k``-th uniform a chain uses is entry ``k`` of its row, whatever the
    masks decided on the device. :meth:`settle` puts each generator where ``k`` calls of
    ``random()`` would have left it (``PCG64.advance``; other bit generators redraw).
    """

    def __init__(self, rngs: Sequence[np.random.Generator], width: int, device) -> None:
        self.rngs, self.width, self.drawn = rngs, width + 1, 0  # + 1: a column never used
        self.rewind = all(isinstance(g.bit_generator, _PCG) for g in rngs)
        self.states = None if self.rewind else [g.bit_generator.state for g in rngs]
        self.u = self.log_u = torch.empty(len(rngs), 0, dtype=torch.float64, device=device)
        self.used = torch.zeros(len(rngs), 1, dtype=torch.long, device=device)
        self.reserve(FIRST)

    def reserve(self, n: int) -> None:
        """Columns ``0 .. n`` drawn (at most the transition's ``width``): the ``k``-th uniform
        of a chain is entry ``k`` of its row however many blocks it was drawn in."""
        if n < self.drawn:
            return
        k = min(max(n + 1, 4 * self.drawn), self.width) - self.drawn
        block = np.empty((len(self.rngs), k))
        for g, row in zip(self.rngs, block, strict=True):
            g.random(out=row)
        block = torch.from_numpy(block).to(self.u.device)
        self.u, self.log_u = torch.cat([self.u, block], 1), torch.cat([self.log_u, block.log()], 1)
        self.drawn += k

    def draw(self, mask: torch.Tensor, log: bool = True) -> torch.Tensor:
        """The next uniform (or its log) of every chain; the chains in ``mask`` consume it."""
        x = (self.log_u if log else self.u).gather(1, self.used).squeeze(1)
        self.used = self.used + mask.unsqueeze(1)
        return x

    def take(self, columns: torch.Tensor) -> torch.Tensor:
        """The log-uniforms at offsets ``columns`` from every chain's next, ``(C, M)``, not
        consumed: a chain that draws at every merge of a subtree uses offset ``m`` at merge
        ``m`` (in the recursion's order)."""
        return self.log_u.gather(1, self.used + columns)

    def settle(self, used: Sequence[int]) -> None:
        """Each generator where ``used[i]`` calls of ``random()`` would have left it. A PCG
        generator goes back by the block's unused draws (``advance`` is modulo its period
        2^128, and resets the cached 32-bit half as restoring and advancing would); others
        get their saved state back and redraw."""
        if self.rewind:
            for g, k in zip(self.rngs, used, strict=True):
                g.bit_generator.advance(2**128 - (self.drawn - k))
            return
        for g, state, k in zip(self.rngs, self.states, used, strict=True):
            g.bit_generator.state = state
            g.random(k)


def coins_on_the_way_up(lw: list[float], k: int, level: int, depth: int) -> int:
    """Coins the recursive kernel draws above a subtree of ``depth`` levels that stopped at
    leaf ``k``, at ``level`` (0: the leaf diverged; leaf log weights ``lw``): one per merge
    with a pending left half (the one bits of ``k`` from ``level`` up) whose merged weight is
    not ``-inf``, i.e. once a leaf of the merged leaves has a finite weight."""
    finite = any(w > -math.inf for w in lw[k - 2**level + 1 : k + 1])
    n = 0
    for j in range(level, depth):
        if k >> j & 1:
            base = ((k >> j) - 1) << j  # the pending left half: leaves base .. base + 2^j - 1
            finite = finite or any(w > -math.inf for w in lw[base : base + 2**j])
            n += finite
    return n


def coins_after_stop(sub: list[float], turn: list[float], d: int, k: int, diverged: bool) -> int:
    """The coins the recursion draws on its way up out of doubling ``d``'s subtree (leaves'
    log weights ``sub``, merges' U-turn criteria ``turn`` in the recursion's order), which a
    chain left at leaf ``k``: there if ``diverged``, else at the first merge after leaf ``k``
    that turned, if any."""
    if diverged:
        return coins_on_the_way_up(sub, k, 0, d)
    first = k - k.bit_count()  # the merges after leaves 0 .. k-1
    for lev in range((~k & (k + 1)).bit_length() - 1):  # after leaf k: its trailing one bits
        if turn[first + lev]:
            return coins_on_the_way_up(sub, k, lev + 1, d)
    return 0


@functools.lru_cache(maxsize=64)
def _order(depth: int) -> np.ndarray:
    """The permutation from level order to the recursion's of a subtree's merges."""
    return layout(depth, torch.device("cpu"))[1].numpy()


def transition_stats(
    coins: Coins, lw_of: list, live_of: list, turn_of: list, doublings: int, max_energy_error: float
) -> dict:
    """The chains' statistics of one transition from its record (per doubling, each leaf's
    log weight and which chains built it, each merge's U-turn criterion in level order),
    read to the host in one copy; each generator advanced by the uniforms its chain used.

    A chain builds a prefix of each subtree, and its last subtree is the one it stopped in
    (or the last). So its steps are the leaves it built, its tree depth the doublings it
    built in, and it diverged if the last leaf it built did. The acceptance statistic is the
    one-chain kernel's: per subtree, ``exp(min(log w, 0))`` (``math.exp``) summed leaf by leaf,
    then the subtrees' sums added in order; a running sum (``np.add.accumulate``) adds in that
    order, and the leaves a chain did not build add exact zeros.
    """
    lw, live = torch.cat(lw_of).T, torch.cat(live_of).T.double()
    host = (
        torch.cat([coins.used.double(), lw, live, torch.cat(turn_of).T.double()], 1).cpu().numpy()
    )
    c, n = lw.shape
    lw = np.where(np.isnan(host[:, 1 : 1 + n]), -math.inf, host[:, 1 : 1 + n])  # NaN: energy inf
    live = host[:, 1 + n : 1 + 2 * n]
    starts = 2 ** np.arange(doublings) - 1
    n_live = np.add.reduceat(live, starts, axis=1).astype(int)
    # exp(min(log w, 0)) of the leaves built, by math.exp where log w < 0 (1 at or above)
    exps, below = live.copy(), (live > 0) & (lw < 0)
    exps[below] = np.fromiter(map(math.exp, lw[below].tolist()), float, int(below.sum()))
    acc = np.zeros(c)
    for d, start in enumerate(starts):
        acc = acc + np.add.accumulate(exps[:, start : start + 2**d], axis=1)[:, -1]
    steps, depth = n_live.sum(1), (n_live > 0).sum(1)
    rows, last = np.arange(c), depth - 1
    k = n_live[rows, last] - 1
    diverging = ~(lw[rows, starts[last] + k] >= -max_energy_error)
    up, turn = np.zeros(c, dtype=int), host[:, 1 + 2 * n :]
    for i in np.flatnonzero(last > 0).tolist():  # a subtree of one leaf draws none
        d, m = int(last[i]), 2 ** int(last[i]) - 1 - int(last[i])  # merges before doubling d
        sub = lw[i, 2**d - 1 : 2 ** (d + 1) - 1].tolist()
        turns = turn[i, m : m + 2**d - 1][_order(d)]  # in the recursion's order
        up[i] = coins_after_stop(sub, turns.tolist(), d, int(k[i]), bool(diverging[i]))
    coins.settle((host[:, 0].astype(int) + up).tolist())
    return {
        "n_steps": steps,
        "tree_depth": depth,
        "diverging": diverging,
        "acceptance_rate": acc / steps,
    }
