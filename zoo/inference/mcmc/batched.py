"""The functional core of :mod:`zoo.inference.mcmc.kernel`, batched over chains: C chains, one computation.

The same algorithms as :func:`zoo.inference.mcmc.kernel.nuts_step` and :func:`~zoo.inference.mcmc.kernel.hmc_step`
on a :class:`BatchPoint` of ``C`` chains (tensors ``(C, D)``, potential and energy ``(C,)``
float64) with a diagonal inverse mass matrix and a step size per chain. Every leapfrog step
of all chains is one :meth:`~zoo.inference.mcmc.potential.FlatPotential.value_and_grad_batch`.
All chains build subtrees of the same size at the same time, each in its own random
direction, and a subtree is built in two passes: first its leapfrog steps, the points stacked
``(leaves, C, ...)``; then the recursion's merges, level by level, each level one operation per
quantity on the stacked blocks (:mod:`~zoo.inference.mcmc.nuts_tree`), and which chains were still live at each leaf and merge from
the cumulative count of the stopping events in the recursion's order. That is possible because
nothing a chain computes depends on whether it is live (a chain whose subtree turned or
diverged goes on with rows that are not used), and it turns the ~20 small operations a merge
took per leaf into ~20 per level. The host reads one flag per doubling (to stop when every
chain is done) and the transition's record once at the end (:mod:`~zoo.inference.mcmc.nuts_record`).

Each chain's uniforms come from its own ``numpy.random.Generator``, drawn ahead as a block
and consumed in the order in which the recursive one-chain kernel draws them (including the
merges on the way up out of a subtree that stopped, counted on the host); momenta come
from its own ``torch.Generator`` as in :class:`~zoo.inference.mcmc.kernel.Metric`. So each
chain follows the trajectory it would follow alone (up to floating-point rounding of the
batched products); each merge does the one-chain kernel's arithmetic, so the two-pass build
gives the same bits as building leaf by leaf. History and measurements: ``docs/notes/samplers.md``.
"""

from __future__ import annotations

import functools
import math
import threading
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import torch

from zoo.inference.mcmc.kernel import MAX_ENERGY_ERROR
from zoo.inference.mcmc.nuts_record import Coins, transition_stats
from zoo.inference.mcmc.nuts_tree import (
    Blocks,
    cat,
    layout,
    live_after,
    merge_levels,
    pick,
    turning,
)
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
        return pick(mask, self, other)

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

    def drift(
        self, z: torch.Tensor, scaled: torch.Tensor, r: torch.Tensor, out=None
    ) -> torch.Tensor:
        """The position step :math:`z + \\epsilon M^{-1} r` (``scaled``: :meth:`scale`'s),
        into ``out`` if given."""
        return torch.addcmul(z, scaled, r, out=out)


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


class _Built(NamedTuple):
    """A subtree of every chain and the record of its build (per leaf and per merge). Its
    points and momentum sum may be views of :func:`_scratch`, valid until the next subtree
    is built: :func:`nuts_step_batch` takes what it keeps of them at once."""

    last: torch.Tensor  # (4, C, D): the frontier's z, r, v, g (of chains live at the end)
    r_sum: torch.Tensor  # the subtree's momentum sum
    weight: torch.Tensor  # the subtree's log weight
    proposal: tuple  # (z, r, v, g stacked (4, C, D), potential, energy)
    live: torch.Tensor  # neither turned nor diverged (and active)
    log_w: torch.Tensor  # (leaves, C): e0 - energy
    live_at: torch.Tensor  # (leaves, C): the chains that built the leaf
    turn: torch.Tensor  # (merges, C) in level order: the U-turn criterion, unmasked


#: The leaves of a subtree are kept (stacked) in chunks of at most this many bytes: the merges
#: within a chunk run level by level on them, the chunks' roots are merged after.
CHUNK_BYTES = 2**26


_SCRATCH = threading.local()


def _scratch(n: int, like: torch.Tensor, name: str = "points", planes: int = 3) -> torch.Tensor:
    """An uninitialized ``(planes, n, *like.shape)`` tensor in a buffer this thread keeps
    between calls (one per ``name``), for :func:`_leaves`' stacks. What :func:`_subtree`
    keeps past a chunk it copies out.

    A fresh buffer of megabytes would come from new pages, and touching them first costs a
    page fault each (thousands per transition, about a third of the tree's own time at 16
    chains). The potentials have one too: kept as a tensor per leaf, they broke up the
    heap's free space between the gradients' megabyte temporaries, which then grew the heap
    and faulted on its new pages (about 10,000 times a transition at 64 chains, 12% of the
    gradient's time, where the raw gradient faults none)."""
    return _scratch_rows(n, like, name, planes)[0]


def _scratch_rows(n: int, like: torch.Tensor, name: str = "points", planes: int = 3):
    """:func:`_scratch`'s tensor and its rows (``planes`` lists of ``n`` views), made once
    per shape while the buffer lasts: a transition asks for the same few, and slicing and
    unbinding them anew cost a microsecond a view."""
    key = (name, planes, n, like.shape, like.dtype, like.device)
    views = _SCRATCH.__dict__.setdefault("views", {})
    if key in views:
        return views[key]
    size = planes * n * like.numel()
    buf = getattr(_SCRATCH, name, None)
    if buf is None or buf.numel() < size or buf.dtype != like.dtype or buf.device != like.device:
        buf = like.new_empty(size)
        setattr(_SCRATCH, name, buf)
        for k in [k for k in views if k[0] == name]:  # views of the buffer it replaces
            del views[k]
    t = buf[:size].view(planes, n, *like.shape)
    views[key] = t, [p.unbind() for p in t.unbind()]
    return views[key]


def _leaves(pot, metric, p: BatchPoint, minv_eps, neg, n: int) -> tuple[BatchPoint, torch.Tensor]:
    """``n`` leapfrog steps of every chain from ``p`` (``neg``: ``-eps / 2``), the points
    stacked ``(n, C, ...)``, and their z, r, v and g as one ``(4, n, C, D)`` tensor (of
    which the points' are views). A kick is ``r + g (-eps / 2)``: the bits of ``r - g eps / 2``.

    The loop does what a step needs (kick, drift, gradient, kick), writing positions, momenta,
    gradients and potentials into the stacks and keeping nothing else of a leaf through the
    next gradient; the velocities and energies of all ``n`` points are computed after it in
    one operation each (elementwise products and row sums: the same bits as point by point).
    A NaN energy stays NaN."""
    planes, rows = _scratch_rows(n, p.z, planes=4)
    z_of, r_of, v_of, g_of = planes.unbind()
    mid = _scratch_rows(1, p.z, "kick", 1)[1][0][0]  # the momentum between the kicks
    u_all = u_of = None
    r, g, z = p.r, p.g, p.z
    vg, kick = pot.value_and_grad_batch, torch.addcmul
    # the potentials in the energy's dtype, finished (float64, constants) all at once after
    # the loop, where the potential offers it: two operations fewer a leaf
    later = (False,) if getattr(vg, "finishes_later", False) else ()
    # and into the stacks, where it offers that: two copies fewer a leaf
    into = bool(later) and getattr(vg, "writes_into", False)
    # a diagonal metric's drift is the addcmul itself: one Python call fewer a leaf
    drift = kick if type(metric) is BatchMetric else metric.drift
    stacks = zip(rows[0], rows[1], rows[3], strict=True)
    for k, (z_k, r_k, g_k) in enumerate(stacks):
        kick(r, g, neg, out=mid)
        z = drift(z, minv_eps, mid, out=z_k)
        if into and k:
            u, g = vg(z, False, (u_of[k], g_k))
        else:
            u, g = vg(z, *later)
            g_k.copy_(g)
            if u_of is None:  # in the potential's dtype and shape
                u_all, (u_of,) = _scratch_rows(n, u, "potentials", 1)
                u_all = u_all[0]
            u_of[k].copy_(u)
        r = kick(mid, g, neg, out=r_k)
        del u  # of a leaf only its rows of the stacks live through the next gradient
    if type(metric) is BatchMetric:  # elementwise: stacked, the same bits
        torch.mul(metric.minv, r_of, out=v_of)
    elif isinstance(metric, BatchMetric):
        v_of.copy_(metric.velocity(r_of))
    else:  # a product: point by point, as the one-chain kernel
        torch.stack([metric.velocity(x) for x in r_of], out=v_of)
    u = pot.finish_batch(u_all) if later else u_all.clone()
    # u + K with K's factor 1/2 in the add (exact: a power of two)
    energy = torch.add(u, (r_of * v_of).sum(-1).double(), alpha=0.5)
    return BatchPoint(z_of, r_of, v_of, g_of, u, energy), planes


@functools.lru_cache(maxsize=64)
def _indices(n: int, c: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """``(n, C)`` leaf indices (leaf ``k`` in row ``k``) and the ``C`` rows ``0 .. C-1``."""
    return torch.arange(n, device=device).unsqueeze(1).expand(n, c), torch.arange(c, device=device)


def _chunk(pot, metric, p: BatchPoint, steps, n: int, coins: list, floor):
    """``n`` leaves from ``p`` (:func:`_leaves`; ``steps``: ``M^-1 eps``, ``-eps / 2``, ``e0``)
    and the merges among them (``coins``: their log-uniforms per level): the root block
    (leading dim 1; its ends are views of the scratch), its proposal (``_Built.proposal``),
    the leaves' log weights ``e0 - energy``, each level's U-turn criterion and the last
    leaf's z, r, v, g ``(4, C, D)`` (views)."""
    pts, planes = _leaves(pot, metric, p, *steps[:2], n)
    lw = steps[2] - pts.energy  # minus the energy error, exactly
    last = planes[:, -1]
    if n == 1:  # the leaf is the proposal
        prop = (last, pts.potential[0], pts.energy[0])
        return Blocks(pts.r, pts.v, pts.r, pts.v, pts.r, lw, None), prop, lw, [], last
    at, rows = _indices(n, lw.shape[1], lw.device)
    b, turns = merge_levels(Blocks(pts.r, pts.v, pts.r, pts.v, pts.r, lw, at), coins, floor, 0)
    flat = b.proposal[0] * lw.shape[1] + rows  # (leaf, chain) as a row of the stacks
    zrvg = planes.flatten(1, 2).index_select(1, flat)  # one gather for z, r, v and g
    prop = (zrvg, *(f.flatten().index_select(0, flat) for f in pts[4:]))
    return b, prop, lw, turns, last


def _subtree(pot, metric, start: BatchPoint, steps, depth: int, levels: list, floor):
    """The leaves and merges of a subtree of ``2**depth`` leaves, in chunks of at most
    :data:`CHUNK_BYTES` (``levels``: the merges' log-uniforms, level by level): its momentum
    sum, log weight, proposal, leaves' log weights, U-turn criteria in level order and last
    leaf (a view of the scratch)."""
    c, dim = start.z.shape
    chunk = (CHUNK_BYTES // (4 * c * dim * start.z.element_size())).bit_length() - 1
    chunk = min(depth, max(0, chunk))
    if chunk == depth:  # one chunk: the merges all within it
        b, prop, lw, turns, last = _chunk(pot, metric, start, steps, 2**depth, levels, floor)
        return b.r_sum[0], b.log_w[0], prop, lw, turns, last
    n, p, roots, log_w, turns = 2**chunk, start, [], [], [[] for _ in range(chunk)]
    for i in range(2 ** (depth - chunk)):  # a chunk's merges are at positions i n / 2^lev ...
        mine = [levels[lev][i * n >> lev + 1 : (i + 1) * n >> lev + 1] for lev in range(chunk)]
        b, prop, lw, t, last = _chunk(pot, metric, p, steps, n, mine, floor)
        p = BatchPoint(*last.unbind(), None, None)  # the next chunk's start
        prop = BatchPoint(*(x[None].clone() for x in (*prop[0].unbind(), *prop[1:])))
        ends = {f: getattr(b, f).clone() for f in ("r0", "v0", "r1", "v1", "r_sum")}
        roots.append(b._replace(proposal=prop, **ends))  # off the scratch
        log_w.append(lw)
        for lev in range(chunk):
            turns[lev].append(t[lev])
    root = Blocks(*(cat(f) for f in zip(*roots, strict=True)))
    root, t = merge_levels(root, levels[chunk:], floor, chunk)
    prop = (torch.stack([f[0] for f in root.proposal[:4]]), *(f[0] for f in root.proposal[4:]))
    return (
        root.r_sum[0],
        root.log_w[0],
        prop,
        torch.cat(log_w),
        [x for lev in turns for x in lev] + t,
        last,
    )


def _build(pot, metric, start: BatchPoint, eps, depth: int, e0, live, coins, floor=None) -> _Built:
    """A subtree of ``2**depth`` leaves for every chain in ``live``, on the device.

    The recursive ``_build_tree`` of :mod:`zoo.inference.mcmc.kernel` reorganized: the
    leapfrog steps first (chunk by chunk of at most :data:`CHUNK_BYTES`), then the merges
    level by level (:func:`merge_levels`), then which chains were still live at each leaf and
    merge, from the cumulative count of the recursion's stopping events (a leaf that diverged,
    a merge that turned) in its order. That is possible because nothing a chain computes
    depends on whether it is live: a chain whose tree turned or diverged leaves ``live``, its
    rows go on unused (rows of a batch do not interact) and it draws no more coins. A live
    chain's merged weight is never ``-inf``, so it draws at every merge, and merge ``m`` (in
    the recursion's order) reads column ``m`` of the coins' block. The recursion would still
    draw the coins of the merges on its way up out of a subtree that stopped; they decide
    nothing, so :func:`nuts_step_batch` counts them on the host from the record. Nothing is
    read back here. ``floor`` ``(C,)``: a chain's subtrees of fewer than ``2**floor`` leaves do
    not stop it by turning (:func:`nuts_step_batch`'s ``min_depth``).
    """
    sizes = [2 ** (depth - lev) for lev in range(1, depth + 1)]
    levels = coins.take(layout(depth, e0.device)[0]).T.split(sizes)  # level order
    steps = (metric.scale(eps), -0.5 * eps, e0)
    r_sum, weight, proposal, log_w, turns, last = _subtree(
        pot, metric, start, steps, depth, levels, floor
    )
    ok = log_w >= -MAX_ENERGY_ERROR  # NaN (infinite energy) diverges too
    live_at, live, turn = live_after(live, ok, turns, depth, coins)
    return _Built(last, r_sum, weight, proposal, live, log_w, live_at, turn)


class _End(NamedTuple):
    """An end of a trajectory: what the next subtree starts from and the U-turn reads."""

    z: torch.Tensor
    r: torch.Tensor
    v: torch.Tensor
    g: torch.Tensor


def _end(left: torch.Tensor, right: torch.Tensor, side: torch.Tensor) -> _End:
    """Of the trajectory's ends (each z, r, v, g stacked ``(4, C, D)``), ``right`` where
    ``side``, else ``left``: one selection for the four quantities, into a buffer the thread
    keeps (it lives through the subtree's gradients: :func:`_scratch`)."""
    out = _scratch_rows(1, left, "start", 1)[1][0][0]
    return _End(*torch.where(side.view(1, -1, 1), right, left, out=out).unbind())


def _both_ends(p: BatchPoint) -> tuple[torch.Tensor, list]:
    """The trajectory's two ends at its start, both ``p``: ``(2, 4, C, D)`` (left, right; z, r,
    v, g) in a buffer the thread keeps, which :func:`_end` reads and the doublings update,
    and its rows (the left end's z, r, v, g, then the right's: views)."""
    ends, rows = _scratch_rows(4, p.z, "ends", 2)
    for end in ends:
        torch.stack([p.z, p.r, p.v, p.g], out=end)
    return ends, rows


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
        ``(C,)`` integers: a floor on each chain's tree depth (None: none). A (sub)tree of
        fewer than ``2**min_depth`` points is never taken to have turned, so the trajectory
        has at least ``2**min_depth - 1`` steps unless it diverges or hits ``max_depth``.
        Which subtrees are checked depends only on their size in the tree's binary
        decomposition, not on where the chain started in it, so the transition stays
        reversible (the stopping rule is a function of the final tree, as NUTS's is).

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
    coins = Coins(rngs, 2**max_depth - 1 + max_depth, p.z.device)
    ends, ((_, r_left, v_left, _), (_, r_right, v_right, _)) = _both_ends(p)
    left, right = ends.unbind()  # views, updated in place by every doubling
    back = -eps  # eps times the direction, exactly
    proposal, r_sum, e0 = (torch.stack(p[:4]), p.potential, p.energy), p.r, p.energy
    log_w = torch.zeros_like(e0)
    active = torch.ones(c, dtype=torch.bool, device=e0.device)
    lw_of, live_of, turn_of = [], [], []
    for d in range(max_depth):
        coins.reserve(2 ** (d + 1) + d)  # the most this doubling can read
        fwd = (coins.draw(active, log=False) < 0.5) | ~active
        step = torch.where(fwd.unsqueeze(1), eps, back)
        first = _end(left, right, fwd)  # the subtree's start
        b = _build(pot, metric, first, step, d, e0, active, coins, min_depth)
        lw_of.append(b.log_w)
        live_of.append(b.live_at)
        turn_of.append(b.turn)
        grew = (torch.stack([~fwd, fwd]) & active).view(2, 1, c, 1)  # left, right
        torch.where(grew, b.last, ends, out=ends)
        go = b.live
        take = go & (coins.draw(go) < b.weight - log_w)
        proposal = pick(take, b.proposal, proposal)
        r_sum = torch.where(go.unsqueeze(1), r_sum + b.r_sum, r_sum)
        turn = turning(v_left, r_left, v_right, r_right, r_sum)
        if min_depth is not None:
            turn = turn & (min_depth <= d + 1)
        active = go & ~turn
        log_w = torch.where(active, torch.logaddexp(log_w, b.weight), log_w)
        if d + 1 < max_depth and not bool(active.any()):  # the one read per doubling
            break
    stats = transition_stats(coins, lw_of, live_of, turn_of, d + 1, MAX_ENERGY_ERROR)
    return BatchPoint(*proposal[0].unbind(), *proposal[1:]), stats


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
