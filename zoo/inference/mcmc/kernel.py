"""The functional core of the samplers: leapfrog, NUTS and HMC transitions on flat tensors.

Pure functions over the :class:`Point` NamedTuple (position, momentum, velocity, gradient,
potential, energy) and a :class:`Metric` (the inverse mass matrix as contiguous blocks). The
NUTS transition is Pyro's (multinomial sampling, biased progressive sampling between
doublings, Pyro's U-turn criterion, divergence when the energy error exceeds 1000) with
Python-float bookkeeping. :mod:`zoo.inference.mcmc.sequential` adapts and runs them (the one-chain reference path).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import NamedTuple

import torch

from zoo.inference.mcmc.potential import FlatPotential

__all__ = ["MAX_ENERGY_ERROR", "Metric", "Point", "hmc_step", "leapfrog", "new_point", "nuts_step"]

MAX_ENERGY_ERROR = 1000.0  # Pyro's and Stan's divergence threshold


class Point(NamedTuple):
    """A phase-space point: position, momentum, velocity M^-1 r, grad U, U and U + K."""

    z: torch.Tensor
    r: torch.Tensor
    v: torch.Tensor
    g: torch.Tensor
    potential: float
    energy: float


class Metric:
    """Flat view of Pyro's block inverse mass matrix (blocks are contiguous slices)."""

    def __init__(self, inverse_mass_matrix: Mapping[tuple, torch.Tensor], slices: Mapping) -> None:
        self.blocks = []
        for key, minv in inverse_mass_matrix.items():
            if minv.dim() == 1:
                sqrt_m = minv.rsqrt()
            else:  # Pyro's mass_matrix_sqrt: inverse of the upper Cholesky factor of M^-1
                u = torch.linalg.cholesky(minv).t()
                sqrt_m = torch.linalg.solve_triangular(
                    u, torch.eye(len(u), dtype=u.dtype), upper=True
                )
            self.blocks.append((slices[key], minv, sqrt_m))
        self.single = len(self.blocks) == 1

    def velocity(self, r: torch.Tensor) -> torch.Tensor:
        if self.single:
            minv = self.blocks[0][1]
            return minv * r if minv.dim() == 1 else torch.mv(minv, r)
        out = torch.empty_like(r)
        for sl, minv, _ in self.blocks:
            out[sl] = minv * r[sl] if minv.dim() == 1 else torch.mv(minv, r[sl])
        return out

    def drift(self, z: torch.Tensor, r: torch.Tensor, eps: float) -> torch.Tensor:
        """z + eps M^-1 r (one fused operation for a single diagonal block)."""
        minv = self.blocks[0][1]
        if self.single and minv.dim() == 1:
            return torch.addcmul(z, minv, r, value=eps)
        return torch.add(z, self.velocity(r), alpha=eps)

    def momentum(self, gen: torch.Generator, like: torch.Tensor) -> torch.Tensor:
        eps = torch.randn(like.shape, generator=gen, dtype=like.dtype)
        out = torch.empty_like(eps)
        for sl, _, s in self.blocks:
            out[sl] = s * eps[sl] if s.dim() == 1 else torch.mv(s, eps[sl])
        return out


def leapfrog(pot: FlatPotential, metric: Metric, p: Point, eps: float) -> Point:
    r = torch.add(p.r, p.g, alpha=-0.5 * eps)
    z = metric.drift(p.z, r, eps)
    u, g = pot.value_and_grad(z)
    r = torch.add(r, g, alpha=-0.5 * eps)
    v = metric.velocity(r)
    energy = u + 0.5 * torch.dot(r, v).item()
    return Point(z, r, v, g, u, energy if energy == energy else math.inf)


def new_point(pot: FlatPotential, metric: Metric, z, u, g, gen) -> Point:
    r = metric.momentum(gen, z)
    v = metric.velocity(r)
    return Point(z, r, v, g, u, u + 0.5 * torch.dot(r, v).item())


def _exp0(x: float) -> float:
    """min(1, exp(x)) without overflow."""
    return math.exp(min(x, 0.0))


def _logaddexp(a: float, b: float) -> float:
    m = max(a, b)
    return m if m == -math.inf else m + math.log1p(math.exp(-abs(a - b)))


def _turning(left: Point, right: Point, r_sum: torch.Tensor) -> bool:
    rho = torch.add(r_sum, torch.add(left.r, right.r), alpha=-0.5)
    return torch.dot(left.v, rho).item() <= 0 or torch.dot(right.v, rho).item() <= 0


class _Tree(NamedTuple):
    left: Point
    right: Point
    proposal: Point
    r_sum: torch.Tensor
    log_weight: float
    turning: bool
    diverging: bool
    sum_accept: float
    n: int


def _build_tree(pot, metric, p: Point, eps: float, depth: int, e0: float, rng) -> _Tree:
    if depth == 0:
        q = leapfrog(pot, metric, p, eps)
        de = q.energy - e0
        return _Tree(q, q, q, q.r, -de, False, de > MAX_ENERGY_ERROR, _exp0(-de), 1)
    half = _build_tree(pot, metric, p, eps, depth - 1, e0, rng)
    if half.turning or half.diverging:
        return half
    other = _build_tree(pot, metric, half.right if eps > 0 else half.left, eps, depth - 1, e0, rng)
    w = _logaddexp(half.log_weight, other.log_weight)
    take_other = w > -math.inf and rng.random() < _exp0(other.log_weight - w)
    left, right = (half.left, other.right) if eps > 0 else (other.left, half.right)
    r_sum = half.r_sum + other.r_sum
    turning = other.turning or _turning(left, right, r_sum)
    return _Tree(
        left,
        right,
        other.proposal if take_other else half.proposal,
        r_sum,
        w,
        turning,
        other.diverging,
        half.sum_accept + other.sum_accept,
        half.n + other.n,
    )


def nuts_step(pot, metric, p: Point, eps: float, max_depth: int, rng) -> tuple[Point, dict]:
    """One NUTS transition from ``p`` (with fresh momentum); Pyro's doubling scheme."""
    left = right = proposal = p
    r_sum, log_w = p.r, 0.0
    sum_accept, n, depth, diverging = 0.0, 0, 0, False
    while depth < max_depth:
        forward = rng.random() < 0.5
        tree = _build_tree(
            pot, metric, right if forward else left, eps if forward else -eps, depth, p.energy, rng
        )
        left, right = (left, tree.right) if forward else (tree.left, right)
        sum_accept += tree.sum_accept
        n += tree.n
        depth += 1
        if tree.diverging:
            diverging = True
            break
        if tree.turning:
            break
        if rng.random() < _exp0(tree.log_weight - log_w):
            proposal = tree.proposal
        r_sum = r_sum + tree.r_sum
        if _turning(left, right, r_sum):
            break
        log_w = _logaddexp(log_w, tree.log_weight)
    stats = {
        "n_steps": n,
        "tree_depth": depth,
        "diverging": diverging,
        "acceptance_rate": sum_accept / n,
    }
    return proposal, stats


def hmc_step(pot, metric, p: Point, eps: float, num_steps: int, rng) -> tuple[Point, dict]:
    """One HMC transition: ``num_steps`` leapfrog steps and a Metropolis correction."""
    q = p
    for _ in range(num_steps):
        q = leapfrog(pot, metric, q, eps)
        if q.energy == math.inf:
            break
    de = q.energy - p.energy
    accept = _exp0(-de)
    new = q if rng.random() < accept else p
    return new, {
        "n_steps": num_steps,
        "diverging": de > MAX_ENERGY_ERROR,
        "acceptance_rate": accept,
    }
