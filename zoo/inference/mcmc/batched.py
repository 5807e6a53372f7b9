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
    half = 0.5 * eps
    r = torch.addcmul(p.r, p.g, half, value=-1)
    z = torch.addcmul(p.z, metric.minv * eps, r)
    u, g = pot.value_and_grad_batch(z)
    r = torch.addcmul(r, g, half, value=-1)
    v = metric.minv * r
    energy = u + _kinetic(r, v)
    return BatchPoint(z, r, v, g, u, torch.where(energy.isnan(), math.inf, energy))


def _exp0(x: float) -> float:
    return math.exp(min(x, 0.0))


def _logaddexp(a: float, b: float) -> float:
    m = max(a, b)
    return m if m == -math.inf else m + math.log1p(math.exp(-abs(a - b)))


def _turning(v1, r1, v2, r2, r_sum) -> list[bool]:
    """Pyro's U-turn criterion per chain (symmetric in the two ends)."""
    rho = r_sum - 0.5 * (r1 + r2)
    d = torch.stack([(v1 * rho).sum(1), (v2 * rho).sum(1)], 1).tolist()
    return [a <= 0 or b <= 0 for a, b in d]


class _Sub(NamedTuple):
    """A (sub)tree in build order: its first point's r, v; momentum sum; proposal; weights."""

    r0: torch.Tensor
    v0: torch.Tensor
    r_sum: torch.Tensor
    proposal: BatchPoint
    log_w: list[float]


def _build(pot, metric, start: BatchPoint, eps, depth: int, e0: list[float], active, rngs):
    """A subtree of ``2**depth`` leaves for every active chain, leaf by leaf.

    The recursive ``_build_tree`` of :mod:`zoo.inference.mcmc.kernel` in post-order: after leaf ``k``
    the tree merges with the pending left halves at the levels of the trailing one bits of
    ``k``. A chain whose tree turns or diverges stops there; the recursion would still merge
    the stopped tree with the left halves at the higher one bits of ``k`` on its way up, so
    the chain draws those coins (its proposal is then discarded anyway).

    Returns the last point, the tree (valid for chains not ``done``), and per chain: done,
    diverging, sum of acceptance probabilities and leaves built.
    """
    c = len(rngs)
    done = [not a for a in active]
    diverging, sum_acc, n = [False] * c, [0.0] * c, [0] * c
    pending: list[_Sub | None] = [None] * depth
    p = start
    for k in range(2**depth):
        q = leapfrog_batch(pot, metric, p, eps)
        p = q.where(torch.tensor([not d for d in done]), p) if any(done) else q
        energy = p.energy.tolist()
        lw = [0.0] * c
        stopped = []  # chains done at this leaf: (chain, level, log weight)
        for i in range(c):
            if done[i]:
                continue
            de = energy[i] - e0[i]
            lw[i] = -de
            sum_acc[i] += _exp0(-de)
            n[i] += 1
            if de > MAX_ENERGY_ERROR:
                diverging[i] = done[i] = True
                stopped.append((i, 0, -de))
        cur = _Sub(p.r, p.v, p.r, p, lw)
        level = 0
        while level < depth and k >> level & 1:  # merge with the pending left half
            half = pending[level]
            take, w = [False] * c, [0.0] * c
            for i in range(c):
                if done[i]:
                    continue
                w[i] = _logaddexp(half.log_w[i], cur.log_w[i])
                take[i] = w[i] > -math.inf and rngs[i].random() < _exp0(cur.log_w[i] - w[i])
            r_sum = half.r_sum + cur.r_sum
            turn = _turning(half.v0, half.r0, p.v, p.r, r_sum)
            prop = cur.proposal.where(torch.tensor(take), half.proposal)
            cur = _Sub(half.r0, half.v0, r_sum, prop, w)
            level += 1
            for i in range(c):
                if not done[i] and turn[i]:
                    done[i] = True
                    stopped.append((i, level, w[i]))
        if level < depth:
            pending[level] = cur
        for i, lev, w in stopped:  # out of the subtree: merges on the way up draw coins too
            for j in range(lev, depth):
                if k >> j & 1:
                    w = _logaddexp(pending[j].log_w[i], w)
                    if w > -math.inf:
                        rngs[i].random()
        if all(done):
            break
    return p, cur, done, diverging, sum_acc, n


def nuts_step_batch(
    pot: FlatPotential,
    metric: BatchMetric,
    p: BatchPoint,
    eps: torch.Tensor,
    max_depth: int,
    rngs: Sequence[np.random.Generator],
) -> tuple[BatchPoint, dict]:
    """One NUTS transition of every chain from ``p`` (with fresh momenta); Pyro's scheme.

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
    left = right = proposal = p
    r_sum = p.r
    e0 = p.energy.tolist()
    log_w, sum_acc, n = [0.0] * c, [0.0] * c, [0] * c
    depth, diverging, active = [0] * c, [False] * c, [True] * c
    for d in range(max_depth):
        fwd = [rngs[i].random() < 0.5 if active[i] else True for i in range(c)]
        fmask = torch.tensor(fwd)
        sign = torch.where(fmask, 1.0, -1.0).to(eps.dtype).unsqueeze(1)
        start = right.where(fmask, left)
        last, tree, done, div, acc, nt = _build(pot, metric, start, eps * sign, d, e0, active, rngs)
        was = torch.tensor(active)
        right = last.where(was & fmask, right)
        left = last.where(was & ~fmask, left)
        take = [False] * c
        for i in range(c):
            if not active[i]:
                continue
            sum_acc[i] += acc[i]
            n[i] += nt[i]
            depth[i] += 1
            if div[i]:
                diverging[i], active[i] = True, False
            elif done[i]:
                active[i] = False
            else:
                take[i] = rngs[i].random() < _exp0(tree.log_w[i] - log_w[i])
        proposal = tree.proposal.where(torch.tensor(take), proposal)
        live = [i for i in range(c) if active[i]]
        if live:
            r_sum = torch.where(torch.tensor(active).unsqueeze(1), r_sum + tree.r_sum, r_sum)
            turn = _turning(left.v, left.r, right.v, right.r, r_sum)
            for i in live:
                if turn[i]:
                    active[i] = False
                else:
                    log_w[i] = _logaddexp(log_w[i], tree.log_w[i])
        if not any(active):
            break
    stats = {
        "n_steps": np.array(n),
        "tree_depth": np.array(depth),
        "diverging": np.array(diverging),
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
    accept = [_exp0(-x) for x in de]
    keep = [rngs[i].random() < accept[i] for i in range(c)]
    new = q.where(torch.tensor(keep), p)
    stats = {
        "n_steps": np.full(c, num_steps),
        "diverging": np.array(de) > MAX_ENERGY_ERROR,
        "acceptance_rate": np.array(accept),
    }
    return new, stats
