"""The functional core of :mod:`zoo.inference.mcmc.kernel`, batched over chains: C chains, one computation.

The same algorithms as :func:`zoo.inference.mcmc.kernel.nuts_step` and :func:`~zoo.inference.mcmc.kernel.hmc_step`
on a :class:`BatchPoint` of ``C`` chains (tensors ``(C, D)``, potential and energy ``(C,)``
float64) with a diagonal inverse mass matrix and a step size per chain. Every leapfrog step
of all chains is one :meth:`~zoo.inference.mcmc.potential.FlatPotential.value_and_grad_batch`.
The NUTS subtrees are built iteratively, leaf by leaf, with a stack of pending left halves
(one per level): all chains build subtrees of the same size at the same time, each in its
own random direction. The tree state is ``(C, ...)`` tensors and every decision a ``(C,)``
mask: a chain whose subtree turned or diverged leaves the live mask and its rows go on
unused. Nothing is read back inside a tree; the host reads one flag per doubling (to stop
when every chain is done) and the transition's record once at the end.

Each chain's uniforms come from its own ``numpy.random.Generator``, drawn ahead as a block
and consumed in the order in which the recursive one-chain kernel draws them (including the
merges on the way up out of a subtree that stopped early, counted on the host); momenta come
from its own ``torch.Generator`` as in :class:`~zoo.inference.mcmc.kernel.Metric`. So each
chain follows the trajectory it would follow alone (up to floating-point rounding of the
batched products); history and measurements: ``docs/notes/samplers.md``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import torch

from zoo.inference.mcmc.kernel import MAX_ENERGY_ERROR
from zoo.inference.mcmc.potential import FlatPotential

__all__ = [
    "BatchMetric",
    "BatchPoint",
    "hmc_step_batch",
    "leapfrog_batch",
    "new_point_batch",
    "nuts_step_batch",
]


class BatchPoint(NamedTuple):
    """Phase-space points of C chains: z, r, v = M^-1 r, grad U of shape (C, D); U, U + K (C,)."""

    z: torch.Tensor
    r: torch.Tensor
    v: torch.Tensor
    g: torch.Tensor
    potential: torch.Tensor
    energy: torch.Tensor

    def where(self, mask: torch.Tensor, other: BatchPoint) -> BatchPoint:
        """Rows of ``self`` where ``mask`` (shape ``(C,)``), else rows of ``other``."""
        m = mask.unsqueeze(1)
        return BatchPoint(
            *(
                torch.where(m if a.dim() == 2 else mask, a, b)
                for a, b in zip(self, other, strict=True)
            )
        )

    def row(self, c: int) -> tuple:
        """Chain ``c``: ``(z, r, v, g, potential, energy)`` with Python-float scalars."""
        return (
            self.z[c],
            self.r[c],
            self.v[c],
            self.g[c],
            float(self.potential[c]),
            float(self.energy[c]),
        )


class BatchMetric:
    """Diagonal inverse mass matrices of C chains, ``minv`` of shape (C, D).

    The kernels ask a metric only through :meth:`momentum`, :meth:`from_noise`,
    :meth:`velocity`, :meth:`scale` and :meth:`drift`, so a shared dense metric
    (:class:`zoo.inference.mcmc.metrics.DenseBatchMetric`) runs in the same kernels.
    """

    def __init__(self, minv: torch.Tensor) -> None:
        if minv.dim() != 2:
            raise ValueError(f"minv has shape {tuple(minv.shape)}; expected (chains, D) (diag)")
        self.minv = minv
        self.sqrt_m = minv.rsqrt()

    def momentum(self, gens: Sequence[torch.Generator], like: torch.Tensor) -> torch.Tensor:
        """One momentum per chain, each from its own generator (as ``Metric.momentum``)."""
        d = like.shape[1]
        eps = torch.stack([torch.randn(d, generator=g, dtype=like.dtype) for g in gens])
        return self.from_noise(eps)

    def from_noise(self, noise: torch.Tensor) -> torch.Tensor:
        """Momenta :math:`r \\sim N(0, M)` from standard normal ``noise`` ``(C, D)``."""
        return self.sqrt_m * noise

    def velocity(self, r: torch.Tensor) -> torch.Tensor:
        """:math:`M^{-1} r` of every chain."""
        return self.minv * r

    def scale(self, eps: torch.Tensor) -> torch.Tensor:
        """What :meth:`drift` takes for step sizes ``eps`` ``(C, 1)``: :math:`M^{-1}\\epsilon`."""
        return self.minv * eps

    def drift(self, z: torch.Tensor, scaled: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        """The position step :math:`z + \\epsilon M^{-1} r` (``scaled``: :meth:`scale`'s)."""
        return torch.addcmul(z, scaled, r)


def _kinetic(r: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return 0.5 * (r * v).sum(1).double()


def new_point_batch(metric: BatchMetric, z, u, g, gens) -> BatchPoint:
    """Points at ``z`` (potential ``u``, gradient ``g``) with fresh momenta."""
    r = metric.momentum(gens, z)
    v = metric.velocity(r)
    return BatchPoint(z, r, v, g, u, u + _kinetic(r, v))


def leapfrog_batch(
    pot: FlatPotential, metric: BatchMetric, p: BatchPoint, eps: torch.Tensor
) -> BatchPoint:
    """One leapfrog step of every chain; ``eps`` of shape (C, 1) (signed: the direction)."""
    return _leapfrog(pot, metric, p, metric.scale(eps), 0.5 * eps)


def _leapfrog(pot, metric, p: BatchPoint, minv_eps, half, finite: bool = True) -> BatchPoint:
    """:func:`leapfrog_batch` with ``M^-1 eps`` and ``eps / 2`` computed once per subtree;
    ``finite=False`` leaves a NaN energy as it is (the tree takes it for a divergence)."""
    r = torch.addcmul(p.r, p.g, half, value=-1)
    z = metric.drift(p.z, minv_eps, r)
    u, g = pot.value_and_grad_batch(z)
    r = torch.addcmul(r, g, half, value=-1)
    v = metric.velocity(r)
    # u + K with K's factor 1/2 in the add (exact: a power of two), one operation fewer
    energy = torch.add(u, (r * v).sum(1).double(), alpha=0.5)
    if finite:
        energy = torch.where(energy.isnan(), math.inf, energy)
    return BatchPoint(z, r, v, g, u, energy)


def _turning(v1, r1, v2, r2, r_sum) -> torch.Tensor:
    """Pyro's U-turn criterion per chain (symmetric in the two ends), a ``(C,)`` mask; the
    one-chain kernel's operations (``r_sum - (r1 + r2) / 2`` and two dot products)."""
    rho = torch.add(r_sum, r1 + r2, alpha=-0.5)
    return torch.minimum((v1 * rho).sum(1), (v2 * rho).sum(1)) <= 0


class _Coins:
    """Each chain's uniforms of one transition, drawn ahead on the host as a ``(C, M)`` block.

    ``numpy.random.Generator.random`` takes one 64-bit output of the bit generator per
    double, so the ``k``-th uniform a chain uses is entry ``k`` of its row, whatever the
    masks decided on the device. :meth:`settle` puts each generator where ``k`` calls of
    ``random()`` would have left it (``PCG64.advance``; other bit generators redraw).
    """

    def __init__(self, rngs: Sequence[np.random.Generator], width: int, device) -> None:
        self.rngs = rngs
        self.states = [g.bit_generator.state for g in rngs]
        block = np.stack([g.random(width + 1) for g in rngs])  # + 1: a column never used
        self.u = torch.from_numpy(block).to(device)
        self.log_u = self.u.log()
        self.used = torch.zeros(len(rngs), 1, dtype=torch.long, device=device)

    def draw(self, mask: torch.Tensor, log: bool = True) -> torch.Tensor:
        """The next uniform (or its log) of every chain; the chains in ``mask`` consume it."""
        x = (self.log_u if log else self.u).gather(1, self.used).squeeze(1)
        self.used = self.used + mask.unsqueeze(1)
        return x

    def block(self, n: int) -> torch.Tensor:
        """The next ``n`` log-uniforms of every chain, ``(C, n)``, not consumed: a chain
        that draws at every merge of a subtree uses column ``m`` at merge ``m``."""
        return self.log_u.gather(1, self.used + torch.arange(n, device=self.used.device))

    def consume(self, masks: list[torch.Tensor]) -> None:
        """Each chain consumes one uniform per mask (of ``masks``) that holds it."""
        if masks:
            self.used = self.used + torch.stack(masks, 1).sum(1, keepdim=True)

    def settle(self, used: Sequence[int]) -> None:
        for g, state, k in zip(self.rngs, self.states, used, strict=True):
            bg = g.bit_generator
            bg.state = state
            if isinstance(bg, np.random.PCG64 | np.random.PCG64DXSM):
                bg.advance(k)
            else:
                g.random(k)


class _Sub(NamedTuple):
    """A (sub)tree in build order: its first point's r, v; momentum sum; proposal (a point,
    or the index of a leaf); weight."""

    r0: torch.Tensor
    v0: torch.Tensor
    r_sum: torch.Tensor
    proposal: BatchPoint | torch.Tensor
    log_w: torch.Tensor


class _Built(NamedTuple):
    """A subtree of every chain and the record of its build (per leaf and per merge)."""

    last: BatchPoint  # the frontier (of chains still live at the end)
    tree: _Sub
    proposal: BatchPoint
    live: torch.Tensor  # neither turned nor diverged (and active)
    log_w: list  # per leaf: e0 - energy, (C,)
    live_at: list  # per leaf: the chains that built it
    turn: list  # per merge: the U-turn criterion, unmasked


#: Subtrees whose leaves take at most this many bytes keep them and track their proposals as
#: leaf indices (one gather at the end instead of a ``where`` per merge).
INDEX_BYTES = 2**26


def _build(pot, metric, start: BatchPoint, eps, depth: int, e0, live, coins, floor=None) -> _Built:
    """A subtree of ``2**depth`` leaves for every chain in ``live``, leaf by leaf, on the device.

    The recursive ``_build_tree`` of :mod:`zoo.inference.mcmc.kernel` in post-order: after leaf
    ``k`` the tree merges with the pending left halves at the levels of the trailing one bits
    of ``k``. A chain whose tree turns or diverges leaves ``live``: it draws no more coins
    and its rows go on unused (rows of a batch do not interact). The recursion would still
    merge its tree with the left halves at the higher one bits of ``k`` on the way up and draw
    those coins; they decide nothing, so :func:`nuts_step_batch` counts them on the host from
    the record. A live chain's merged weight is never ``-inf`` (its leaves have finite
    energy errors), so it always draws. Nothing is read back here. ``floor`` ``(C,)``: a
    chain's subtrees of fewer than ``2**floor`` leaves do not stop it by turning
    (:func:`nuts_step_batch`'s ``min_depth``).
    """
    c, dim = start.z.shape
    pending: list[_Sub | None] = [None] * depth
    by_index = depth >= 2 and 2**depth * c * dim * 4 * start.z.element_size() <= INDEX_BYTES
    leaves, lw_of, live_of, turn_of = [], [], [], []
    minv_eps, half = metric.scale(eps), 0.5 * eps
    if by_index:  # 0-d views made at once (not a select per leaf)
        index = torch.arange(2**depth, device=e0.device).unbind()
    log_u, drew = coins.block(2**depth - 1).unbind(1), []
    p = start
    for k in range(2**depth):
        p = _leapfrog(pot, metric, p, minv_eps, half, finite=False)
        lw = e0 - p.energy  # minus the energy error, exactly
        lw_of.append(lw)
        live_of.append(live)
        live = live & (lw >= -MAX_ENERGY_ERROR)  # NaN (infinite energy) diverges too
        if by_index:
            leaves.append(p)
        cur = _Sub(p.r, p.v, p.r, index[k] if by_index else p, lw)
        level = 0
        while level < depth and k >> level & 1:  # merge with the pending left half
            left = pending[level]
            w = torch.logaddexp(left.log_w, cur.log_w)
            drew.append(live)
            take = log_u[len(drew) - 1] < cur.log_w - w  # decides nothing unless live
            r_sum = left.r_sum + cur.r_sum
            turn = _turning(left.v0, left.r0, p.v, p.r, r_sum)
            if floor is not None:
                turn = turn & (floor <= level + 1)
            turn_of.append(turn)
            if by_index:
                prop = torch.where(take, cur.proposal, left.proposal)
            else:
                prop = cur.proposal.where(take, left.proposal)
            cur = _Sub(left.r0, left.v0, r_sum, prop, w)
            live = live > turn  # and not
            level += 1
        if level < depth:
            pending[level] = cur
    coins.consume(drew)
    proposal = cur.proposal
    if by_index:
        rows = torch.arange(c, device=e0.device)
        proposal = BatchPoint(*(torch.stack(f)[proposal, rows] for f in zip(*leaves, strict=True)))
    return _Built(p, cur, proposal, live, lw_of, live_of, turn_of)


def _coins_on_the_way_up(lw: list[float], k: int, level: int, depth: int) -> int:
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


def _chain_record(lw: list[float], live: list[float], turn: list[float], doublings: int):
    """One chain's statistics from the record of its transition, in the one-chain kernel's
    Python floats and order of sums: (acceptance sum, leapfrog steps, tree depth, diverged,
    coins drawn on the way up out of a subtree that stopped)."""
    lw = [x if x == x else -math.inf for x in lw]  # NaN: an infinite energy
    total, steps, off, moff = 0.0, 0, 0, 0
    for d in range(doublings):
        size = 2**d
        if not live[off]:  # inactive since the last doubling
            return total, steps, d, False, 0
        s, k = 0.0, 0
        for j in range(size):
            if not live[off + j]:
                break
            s += math.exp(min(lw[off + j], 0.0))
            steps, k = steps + 1, j
        total += s
        sub = lw[off : off + size]
        if not sub[k] >= -MAX_ENERGY_ERROR:  # diverged at leaf k
            return total, steps, d + 1, True, _coins_on_the_way_up(sub, k, 0, d)
        first = moff + k - k.bit_count()  # merges after leaves 0 .. k-1
        ones = (~k & (k + 1)).bit_length() - 1  # merges after leaf k: its trailing one bits
        for lev in range(ones):
            if turn[first + lev]:
                return total, steps, d + 1, False, _coins_on_the_way_up(sub, k, lev + 1, d)
        off, moff = off + size, moff + size - 1
    return total, steps, doublings, False, 0


def _transition_stats(coins: _Coins, lw_of: list, live_of: list, turn_of: list, doublings: int):
    """The chains' statistics of one transition from its record, read to the host in one
    copy (in Python floats, as the one-chain kernel computes them), each generator advanced
    by the uniforms its chain used."""
    record = [coins.used.double(), torch.stack(lw_of, 1), torch.stack(live_of, 1).double()]
    if turn_of:
        record.append(torch.stack(turn_of, 1).double())
    host = torch.cat(record, 1).cpu().numpy()
    n_leaves = len(lw_of)
    used, sum_acc, n, depth, diverging = [], [], [], [], []
    for row in host:
        lw, live = row[1 : 1 + n_leaves].tolist(), row[1 + n_leaves : 1 + 2 * n_leaves]
        acc, steps, dep, div, up = _chain_record(
            lw, live.tolist(), row[1 + 2 * n_leaves :].tolist(), doublings
        )
        used.append(int(row[0]) + up)
        sum_acc.append(acc)
        n.append(steps)
        depth.append(dep)
        diverging.append(div)
    coins.settle(used)
    return {
        "n_steps": np.array(n),
        "tree_depth": np.array(depth),
        "diverging": np.array(diverging),
        "acceptance_rate": np.array(sum_acc) / np.array(n),
    }


def nuts_step_batch(
    pot: FlatPotential,
    metric: BatchMetric,
    p: BatchPoint,
    eps: torch.Tensor,
    max_depth: int,
    rngs: Sequence[np.random.Generator],
    min_depth: torch.Tensor | None = None,
) -> tuple[BatchPoint, dict]:
    """One NUTS transition of every chain from ``p`` (with fresh momenta); Pyro's scheme.

    The tree state of all chains lives in ``(C, ...)`` tensors and every decision (direction,
    multinomial coin, U-turn, divergence) is a mask. The host reads one flag per doubling
    (whether any chain goes on, to stop early) and, at the end, the record of the transition
    in one copy: from it, it computes the statistics (in Python floats, as the one-chain
    kernel does) and advances each generator by the uniforms its chain used.

    Parameters
    ----------
    pot : FlatPotential
    metric : BatchMetric
    p : BatchPoint
        The chains' current points with their momenta.
    eps : Tensor
        Step size per chain, shape ``(C,)``.
    max_depth : int
        Maximum number of doublings.
    rngs : sequence of numpy.random.Generator
        One per chain (directions and multinomial coin flips).
    min_depth : Tensor, optional
        ``(C,)`` integers: a floor on each chain's tree depth. A (sub)tree of fewer than
        ``2**min_depth`` points is never taken to have turned, so the trajectory has at
        least ``2**min_depth - 1`` steps unless it diverges or hits ``max_depth``. Which
        subtrees are checked depends only on their size in the tree's binary
        decomposition, not on where the chain started in it, so the transition stays
        reversible (the stopping rule is a function of the final tree, as NUTS's is).
        None: no floor.

    Returns
    -------
    proposal : BatchPoint
    stats : dict of str to ndarray
        Per chain: ``n_steps`` (leapfrog steps the chain used), ``tree_depth``, ``diverging``,
        ``acceptance_rate``.
    """
    c = len(rngs)
    eps = eps.to(p.z.dtype).reshape(c, 1)
    # a doubling to depth d draws at most 2^d + 1 uniforms: its direction, one per merge
    # of its 2^d leaves and the progressive-sampling coin
    coins = _Coins(rngs, 2**max_depth - 1 + max_depth, p.z.device)
    left = right = proposal = p
    r_sum, e0 = p.r, p.energy
    log_w = torch.zeros_like(e0)
    active = torch.ones(c, dtype=torch.bool, device=e0.device)
    lw_of, live_of, turn_of = [], [], []
    for d in range(max_depth):
        fwd = (coins.draw(active, log=False) < 0.5) | ~active
        sign = torch.where(fwd, 1.0, -1.0).to(eps.dtype).unsqueeze(1)
        start = right.where(fwd, left)
        b = _build(pot, metric, start, eps * sign, d, e0, active, coins, min_depth)
        lw_of += b.log_w
        live_of += b.live_at
        turn_of += b.turn
        right = b.last.where(active & fwd, right)
        left = b.last.where(active & ~fwd, left)
        go = b.live
        take = go & (coins.draw(go) < b.tree.log_w - log_w)
        proposal = b.proposal.where(take, proposal)
        r_sum = torch.where(go.unsqueeze(1), r_sum + b.tree.r_sum, r_sum)
        turn = _turning(left.v, left.r, right.v, right.r, r_sum)
        if min_depth is not None:
            turn = turn & (min_depth <= d + 1)
        log_w = torch.where(go & ~turn, torch.logaddexp(log_w, b.tree.log_w), log_w)
        active = go & ~turn
        if d + 1 < max_depth and not bool(active.any()):  # the one read per doubling
            break
    stats = _transition_stats(coins, lw_of, live_of, turn_of, d + 1)
    return proposal, stats


def hmc_step_batch(
    pot: FlatPotential,
    metric: BatchMetric,
    p: BatchPoint,
    eps: torch.Tensor,
    num_steps: int,
    rngs: Sequence[np.random.Generator],
) -> tuple[BatchPoint, dict]:
    """One HMC transition of every chain: ``num_steps`` leapfrog steps, Metropolis per chain.

    A chain whose energy becomes infinite stops there (frozen), as the sequential kernel does.
    """
    c = len(rngs)
    eps = eps.to(p.z.dtype).reshape(c, 1)
    q = p
    for _ in range(num_steps):
        alive = torch.isfinite(q.energy)
        if not bool(alive.any()):
            break
        q = leapfrog_batch(pot, metric, q, eps).where(alive, q)
    de = (q.energy - p.energy).tolist()
    accept = [math.exp(min(-x, 0.0)) for x in de]
    keep = [rngs[i].random() < accept[i] for i in range(c)]
    new = q.where(torch.tensor(keep), p)
    stats = {
        "n_steps": np.full(c, num_steps),
        "diverging": np.array(de) > MAX_ENERGY_ERROR,
        "acceptance_rate": np.array(accept),
    }
    return new, stats
