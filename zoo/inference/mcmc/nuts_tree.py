"""The merges of a NUTS subtree, level by level, for C chains at once.

:func:`zoo.inference.mcmc.batched.nuts_step_batch` builds a subtree of ``2**depth`` leaves
in two passes: its leapfrog steps, the points stacked ``(leaves, C, ...)``, then the
merges of the recursive one-chain kernel (:mod:`zoo.inference.mcmc.kernel`), which this
module does level by level (:func:`merge_levels`): level ``l`` merges blocks ``2j`` and
``2j + 1`` of ``2**(l - 1)`` leaves each, one operation per quantity for all its merges.
Each merge's arithmetic is the recursion's (the weight by ``logaddexp``, the multinomial
coin, the momentum sum left + right, Pyro's U-turn criterion at the merged block's ends), so
the bits are those of merging one pair at a time. Which chains were still live at each leaf
and merge follows from the cumulative count of the recursion's stopping events (a leaf that
diverged, a merge that turned) in its order (:func:`live_after`), since nothing a chain
computes depends on whether it is live. History and measurements: ``docs/notes/samplers.md``
("A subtree in two passes").
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import torch

__all__ = ["Blocks", "cat", "halves", "layout", "live_after", "merge_levels", "pick", "turning"]


def turning(v1, r1, v2, r2, r_sum) -> torch.Tensor:
    """Pyro's U-turn criterion per chain (symmetric in the two ends), a ``(C,)`` mask; the
    one-chain kernel's operations (``r_sum - (r1 + r2) / 2`` and two dot products)."""
    rho = torch.add(r_sum, r1 + r2, alpha=-0.5)
    # vecdot is (v * rho).sum(-1) in one call: the same product and sum, the same bits
    return torch.minimum(torch.linalg.vecdot(v1, rho), torch.linalg.vecdot(v2, rho)) <= 0


class Blocks(NamedTuple):
    """The blocks of one level of a subtree stacked along dim 0 (block ``j`` of level ``l``
    holds leaves ``j 2^l`` to ``(j + 1) 2^l - 1``): its first leaf's r and v, its last leaf's
    r and v, its momentum sum, its log weight and its proposal (a leaf index, or points)."""

    r0: torch.Tensor
    v0: torch.Tensor
    r1: torch.Tensor
    v1: torch.Tensor
    r_sum: torch.Tensor
    log_w: torch.Tensor
    proposal: tuple | torch.Tensor  # leaf indices, or a NamedTuple of stacked tensors


@functools.lru_cache(maxsize=64)
def layout(depth: int, device: torch.device) -> tuple[torch.Tensor, ...]:
    """The merges of a subtree of ``2**depth`` leaves in level order (level 1 left to right,
    then level 2, ...): their numbers in the recursion's (post-)order, the permutation that
    puts level order into that order, and where the leaves and the merges fall in the
    recursion's sequence of events (leaf ``k``, then its merges at the levels of the trailing
    one bits of ``k``)."""
    number, merge_at = [], []
    for lev in range(1, depth + 1):
        for j in range(2 ** (depth - lev)):
            k = (j + 1) * 2**lev - 1  # the merge follows leaf k
            number.append(k - k.bit_count() + lev - 1)
            merge_at.append(2 * k - k.bit_count() + lev)
    leaf_at = [2 * k - k.bit_count() for k in range(2**depth)]
    long = functools.partial(torch.tensor, dtype=torch.long, device=device)
    number = long(number)
    return number, torch.argsort(number), long(leaf_at), long(merge_at)


def pick(take: torch.Tensor, right, left):
    """``right`` where ``take``, else ``left``: leaf indices, or points (a tuple or
    NamedTuple of tensors, each of the mask's shape or with the mask's dimensions followed
    by one more, after any leading ones)."""
    if isinstance(right, torch.Tensor):
        return torch.where(take, right, left)
    m = take.unsqueeze(-1)
    fields = (
        torch.where(m if a.dim() > take.dim() else take, a, b)
        for a, b in zip(right, left, strict=True)
    )
    return tuple(fields) if type(right) is tuple else type(right)(*fields)


def halves(x):
    """Even and odd entries along dim 0: the left and right halves of the next level's blocks."""
    if not isinstance(x, torch.Tensor):
        return type(x)(*(f[0::2] for f in x)), type(x)(*(f[1::2] for f in x))
    return x[0::2], x[1::2]


def merge_levels(b: Blocks, coins: list, floor, level: int) -> tuple[Blocks, list]:
    """Merge the blocks in pairs, ``len(coins)`` levels up from ``level``, each level one
    operation per quantity on the stacked blocks. Each merge is the recursive kernel's
    arithmetic (the weight by ``logaddexp``, the coin ``log u < log w(right) - log w(merged)``,
    the momentum sum left + right, the U-turn criterion at the merged block's ends), so the
    bits are those of merging one pair at a time. ``coins[i]``: the log-uniforms of level
    ``level + i + 1``'s merges, ``(blocks, C)``; ``floor`` ``(C,)`` or None: a chain's blocks
    of fewer than ``2**floor`` leaves do not turn (``nuts_step_batch``'s ``min_depth``).
    Returns the merged blocks and each level's U-turn criterion."""
    turns = []
    for i, log_u in enumerate(coins):
        w_right = b.log_w[1::2]
        w = torch.logaddexp(b.log_w[0::2], w_right)
        take = log_u < w_right - w
        r_sum = b.r_sum[0::2] + b.r_sum[1::2]
        r0, v0, r1, v1 = b.r0[0::2], b.v0[0::2], b.r1[1::2], b.v1[1::2]  # the merged ends
        turn = turning(v0, r0, v1, r1, r_sum)
        if floor is not None:
            turn = turn & (floor <= level + i + 1)
        turns.append(turn)
        left, right = halves(b.proposal)
        b = Blocks(r0, v0, r1, v1, r_sum, w, pick(take, right, left))
    return b, turns


def live_after(live, ok, turns: list, depth: int, coins):
    """Which chains built each leaf of a subtree of ``2**depth`` leaves and which are live at
    its end, from the cumulative count of the stopping events (a leaf that diverged: not
    ``ok``, ``(leaves, C)``; a merge that turned: ``turns``, each level's in level order) in
    the recursion's order, for the chains ``live`` at its start; each chain consumes the
    coins (:class:`~zoo.inference.mcmc.nuts_record.Coins`) of the merges it was live at.
    Returns ``(live at each leaf, live at the end, the U-turn criteria in level order)``."""
    if not depth:
        return live[None], live & ok[0], ok[:0]
    _, _, leaf_at, merge_at = layout(depth, ok.device)
    stops = torch.cat([~ok, *turns])  # the leaves' events, then the merges' in level order
    # index_select gathers rows as indexing with a tensor does, for half its dispatch
    event = stops.long().index_select(0, _in_recursion_order(depth, ok.device))
    turn = stops[ok.shape[0] :]
    seen = event.cumsum(0)
    live_at = live & (seen == event)  # no stopping event before it
    coins.used = coins.used + live_at.index_select(0, merge_at).sum(0).unsqueeze(1)
    return live_at.index_select(0, leaf_at), live & (seen[-1] == 0), turn


@functools.lru_cache(maxsize=64)
def _in_recursion_order(depth: int, device: torch.device) -> torch.Tensor:
    """The permutation that puts the leaves' events and then the merges' (level order) in
    the recursion's order (:func:`layout`'s places)."""
    _, _, leaf_at, merge_at = layout(depth, device)
    return torch.argsort(torch.cat([leaf_at, merge_at]))


def cat(parts: list):
    """Concatenate tensors, or points field by field, along dim 0."""
    if isinstance(parts[0], torch.Tensor):
        return torch.cat(parts)
    return type(parts[0])(*map(torch.cat, zip(*parts, strict=True)))
