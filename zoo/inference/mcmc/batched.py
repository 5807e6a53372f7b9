"""The functional core of :mod:`zoo.inference.mcmc.kernel`, batched over chains: C chains, one computation.

The same algorithms as :func:`zoo.inference.mcmc.kernel.nuts_step` and :func:`~zoo.inference.mcmc.kernel.hmc_step`
on a :class:`BatchPoint` of ``C`` chains (tensors ``(C, D)``, potential and energy ``(C,)``
float64) with a diagonal inverse mass matrix and a step size per chain. Every leapfrog step
of all chains is one :meth:`~zoo.inference.mcmc.potential.FlatPotential.value_and_grad_batch`; on small
networks the per-operation overhead of torch dominates, so 4 chains cost about as much as
1.5. The NUTS subtrees are built iteratively, leaf by leaf, with a stack of pending left
halves (one per level): all chains build subtrees of the same size at the same time, each in
its own random direction; a chain whose subtree turned or diverged, or whose transition has
ended, is masked: its frontier is frozen (``torch.where``) and its bookkeeping stops, while
the other chains go on. The transition ends when every chain is done or the maximum tree
depth is reached.

The coin flips of chain ``c`` come from its own ``numpy.random.Generator`` and are drawn in
the order in which the recursive sequential kernel draws them (including the merges on the
way up out of a subtree that stopped early), and momenta come from its own
``torch.Generator`` as in :class:`~zoo.inference.mcmc.kernel.Metric`, so that each chain follows the
trajectory it would follow alone (up to floating-point rounding of the batched products).
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
    """Diagonal inverse mass matrices of C chains, ``minv`` of shape (C, D)."""

    def __init__(self, minv: torch.Tensor) -> None:
        if minv.dim() != 2:
            raise ValueError(f"minv has shape {tuple(minv.shape)}; expected (chains, D) (diag)")
        self.minv = minv
        self.sqrt_m = minv.rsqrt()

    def momentum(self, gens: Sequence[torch.Generator], like: torch.Tensor) -> torch.Tensor:
        """One momentum per chain, each from its own generator (as ``Metric.momentum``)."""
        d = like.shape[1]
        eps = torch.stack([torch.randn(d, generator=g, dtype=like.dtype) for g in gens])
        return self.sqrt_m * eps


def _kinetic(r: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return 0.5 * (r * v).sum(1).double()


def new_point_batch(metric: BatchMetric, z, u, g, gens) -> BatchPoint:
    """Points at ``z`` (potential ``u``, gradient ``g``) with fresh momenta."""
    r = metric.momentum(gens, z)
    v = metric.minv * r
    return BatchPoint(z, r, v, g, u, u + _kinetic(r, v))


def leapfrog_batch(
    pot: FlatPotential, metric: BatchMetric, p: BatchPoint, eps: torch.Tensor
) -> BatchPoint:
    """One leapfrog step of every chain; ``eps`` of shape (C, 1) (signed: the direction)."""
    return _leapfrog(pot, metric, p, metric.minv * eps, 0.5 * eps)


def _leapfrog(pot, metric, p: BatchPoint, minv_eps, half) -> BatchPoint:
    """:func:`leapfrog_batch` with ``M^-1 eps`` and ``eps / 2`` computed once per subtree."""
    r = torch.addcmul(p.r, p.g, half, value=-1)
    z = torch.addcmul(p.z, minv_eps, r)
    u, g = pot.value_and_grad_batch(z)
    r = torch.addcmul(r, g, half, value=-1)
    v = metric.minv * r
    energy = u + _kinetic(r, v)
    return BatchPoint(z, r, v, g, u, torch.where(energy.isnan(), math.inf, energy))


def _exp0(x: torch.Tensor) -> torch.Tensor:
    """min(1, exp(x)) without overflow."""
    return torch.exp(x.clamp(max=0.0))


def _turning(v1, r1, v2, r2, r_sum) -> torch.Tensor:
    """Pyro's U-turn criterion per chain (symmetric in the two ends), a ``(C,)`` mask."""
    rho = r_sum - 0.5 * (r1 + r2)
    return torch.minimum((v1 * rho).sum(1), (v2 * rho).sum(1)) <= 0


class _Coins:
    """Each chain's uniforms of one transition, drawn ahead on the host as a ``(C, M)`` block.

    ``numpy.random.Generator.random`` takes one 64-bit output of the bit generator per
    double, so the ``k``-th uniform a chain uses is entry ``k`` of its row, whatever the
    mask decided on the device. :meth:`settle` puts each generator where ``k`` calls of
    ``random()`` would have left it (``PCG64.advance``; other bit generators redraw).
    """

    def __init__(self, rngs: Sequence[np.random.Generator], width: int, device) -> None:
        self.rngs = rngs
        self.states = [g.bit_generator.state for g in rngs]
        block = np.stack([g.random(width + 1) for g in rngs])  # + 1: a column never used
        self.u = torch.from_numpy(block).to(device)
        self.used = torch.zeros(len(rngs), dtype=torch.long, device=device)

    def draw(self, mask: torch.Tensor) -> torch.Tensor:
        """The next uniform of every chain; the chains in ``mask`` consume theirs."""
        x = self.u.gather(1, self.used.unsqueeze(1)).squeeze(1)
        self.used = self.used + mask
        return x

    def settle(self, used: Sequence[int]) -> None:
        for g, state, k in zip(self.rngs, self.states, used, strict=True):
            bg = g.bit_generator
            bg.state = state
            if isinstance(bg, np.random.PCG64 | np.random.PCG64DXSM):
                bg.advance(k)
            else:
                g.random(k)


class _Sub(NamedTuple):
    """A (sub)tree in build order: its first point's r, v; momentum sum; proposal; weight."""

    r0: torch.Tensor
    v0: torch.Tensor
    r_sum: torch.Tensor
    proposal: BatchPoint
    log_w: torch.Tensor


class _Built(NamedTuple):
    """A subtree of every chain: last point, tree, and the per-chain masks of the build."""

    last: BatchPoint
    tree: _Sub
    done: torch.Tensor  # turned or diverged inside (or not active)
    diverging: torch.Tensor
    stop_level: torch.Tensor  # the level at which a chain's subtree turned (0: diverged)
    de: list  # per leaf: the energy errors (C,)
    live: list  # per leaf: which chains built it (C,)


def _build(pot, metric, start: BatchPoint, eps, depth: int, e0, active, coins) -> _Built:
    """A subtree of ``2**depth`` leaves for every active chain, leaf by leaf, on the device.

    The recursive ``_build_tree`` of :mod:`zoo.inference.mcmc.kernel` in post-order: after leaf ``k``
    the tree merges with the pending left halves at the levels of the trailing one bits of
    ``k``. A chain whose tree turns or diverges is masked from there on (its frontier frozen,
    its coins no longer drawn). The recursion would still merge the stopped tree with the
    left halves at the higher one bits of ``k`` on its way up and draw those coins; they
    decide nothing (the proposal is discarded), so :func:`nuts_step_batch` counts them on
    the host from ``stop_level`` and the energy errors. Nothing is read back here.
    """
    c = len(e0)
    done = ~active
    diverging = torch.zeros_like(done)
    stop_level = torch.zeros(c, dtype=torch.long, device=e0.device)
    pending: list[_Sub | None] = [None] * depth
    de_of, live_of = [], []
    minv_eps, half = metric.minv * eps, 0.5 * eps
    p = start
    for k in range(2**depth):
        live = ~done
        p = _leapfrog(pot, metric, p, minv_eps, half).where(live, p)
        de = p.energy - e0
        de_of.append(de)
        live_of.append(live)
        lw = torch.where(live, -de, 0.0)
        div = live & (de > MAX_ENERGY_ERROR)
        diverging = diverging | div
        done = done | div
        cur = _Sub(p.r, p.v, p.r, p, lw)
        level = 0
        while level < depth and k >> level & 1:  # merge with the pending left half
            left = pending[level]
            w = torch.logaddexp(left.log_w, cur.log_w)
            draw = ~done & (w > -math.inf)
            take = draw & (coins.draw(draw) < _exp0(cur.log_w - w))
            r_sum = left.r_sum + cur.r_sum
            turn = ~done & _turning(left.v0, left.r0, p.v, p.r, r_sum)
            cur = _Sub(left.r0, left.v0, r_sum, cur.proposal.where(take, left.proposal), w)
            level += 1
            stop_level = torch.where(turn, level, stop_level)
            done = done | turn
        if level < depth:
            pending[level] = cur
    return _Built(p, cur, done, diverging, stop_level, de_of, live_of)


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


def nuts_step_batch(
    pot: FlatPotential,
    metric: BatchMetric,
    p: BatchPoint,
    eps: torch.Tensor,
    max_depth: int,
    rngs: Sequence[np.random.Generator],
) -> tuple[BatchPoint, dict]:
    """One NUTS transition of every chain from ``p`` (with fresh momenta); Pyro's scheme.

    The tree state of all chains lives in ``(C, ...)`` tensors and every decision (direction,
    multinomial coin, U-turn, divergence) is a mask. The host reads one flag per doubling
    (whether any chain goes on, to stop early) and, at the end, the chains' counts and energy
    errors in one copy: from those it computes the acceptance statistics (in Python floats,
    as the one-chain kernel does) and advances each generator by the uniforms its chain used.

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
    depth = torch.zeros(c, dtype=torch.long, device=e0.device)
    diverging = torch.zeros_like(active)
    de_of, live_of, stops = [], [], []
    for d in range(max_depth):
        fwd = (coins.draw(active) < 0.5) | ~active
        sign = torch.where(fwd, 1.0, -1.0).to(eps.dtype).unsqueeze(1)
        b = _build(pot, metric, right.where(fwd, left), eps * sign, d, e0, active, coins)
        de_of += b.de
        live_of += b.live
        right = b.last.where(active & fwd, right)
        left = b.last.where(active & ~fwd, left)
        depth = depth + active
        diverging = diverging | b.diverging
        stops.append(torch.where(active & b.done, b.stop_level, -1))
        go = active & ~b.done
        take = go & (coins.draw(go) < _exp0(b.tree.log_w - log_w))
        proposal = b.tree.proposal.where(take, proposal)
        r_sum = torch.where(go.unsqueeze(1), r_sum + b.tree.r_sum, r_sum)
        turn = _turning(left.v, left.r, right.v, right.r, r_sum)
        log_w = torch.where(go & ~turn, torch.logaddexp(log_w, b.tree.log_w), log_w)
        active = go & ~turn
        if d + 1 < max_depth and not bool(active.any()):  # the one read per doubling
            break
    host = torch.cat(
        [
            torch.stack([coins.used, depth, diverging, *stops], 1).double(),
            torch.stack(de_of, 1),
            torch.stack(live_of, 1).double(),
        ],
        1,
    ).cpu()
    n_leaves = len(de_of)
    counts, stop, de, live = host.split([3, len(stops), n_leaves, n_leaves], 1)
    used, sum_acc, n = [], [], []
    for i in range(c):
        k_used = int(counts[i, 0])
        total, steps, off = 0.0, 0, 0
        des, lives = de[i].tolist(), live[i].tolist()
        for dd, lev in enumerate(stop[i].tolist()):
            s, size = 0.0, 2**dd
            for x, on in zip(des[off : off + size], lives[off : off + size], strict=True):
                if on:  # the kernel's order of sums, in Python floats: the same numbers
                    s += math.exp(min(-x, 0.0))
                    steps += 1
            total += s
            if lev >= 0:
                lw = [-x for x in des[off : off + size]]
                k = max(j for j in range(size) if lives[off + j])
                k_used += _coins_on_the_way_up(lw, k, int(lev), dd)
            off += size
        used.append(k_used)
        sum_acc.append(total)
        n.append(steps)
    coins.settle(used)
    stats = {
        "n_steps": np.array(n),
        "tree_depth": counts[:, 1].numpy().astype(np.int64),
        "diverging": counts[:, 2].numpy() > 0,
        "acceptance_rate": np.array(sum_acc) / np.array(n),
    }
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
