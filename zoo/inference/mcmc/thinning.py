"""The kept draws of a sampler run: at most a given number per chain, evenly thinned over all."""

from __future__ import annotations

import math

import numpy as np
import torch

__all__ = ["Thinned"]


class Thinned:
    """At most ``capacity`` draws of a stream, evenly thinned over all of it.

    Draw ``j`` (from 0) is kept when ``j`` is a multiple of the stride ``k`` (initially
    ``ceil(expected / capacity)``). When a draw is due and the buffer is full, ``k`` doubles
    and every other kept draw is dropped, so the kept draws are always draws ``0, k, 2k,
    ...``: between half of ``capacity`` and ``capacity`` of them once the buffer has filled.
    Buffers live on the CPU.
    """

    def __init__(
        self, chains: int, dim: int, capacity: int, expected: int, dtype: torch.dtype
    ) -> None:
        self.z = torch.empty(chains, capacity, dim, dtype=dtype, device="cpu")
        self.stats: list[dict[str, np.ndarray]] = []
        self.index: list[int] = []
        self.stride = max(1, math.ceil(expected / capacity))

    def due(self, j: int) -> bool:
        """Whether draw ``j`` is to be kept (making room first when the buffer is full)."""
        if j % self.stride:
            return False
        m = len(self.index)
        if m == self.z.shape[1]:
            self.stride *= 2
            half = (m + 1) // 2
            self.z[:, :half] = self.z[:, 0:m:2].clone()
            self.index, self.stats = self.index[::2], self.stats[::2]
        return j % self.stride == 0

    def add(self, j: int, z: torch.Tensor, stats: dict[str, np.ndarray]) -> None:
        """Keep draw ``j``: states ``(C, D)`` and per-chain statistics."""
        self.z[:, len(self.index)] = z.to("cpu")
        self.index.append(j)
        self.stats.append(stats)

    def kept(self) -> torch.Tensor:
        """The kept states, ``(C, k, D)`` (a view)."""
        return self.z[:, : len(self.index)]

    def stacked(self) -> dict[str, np.ndarray]:
        """The kept statistics, ``(C, k)`` each."""
        if not self.stats:
            return {}
        return {k: np.stack([s[k] for s in self.stats], 1) for k in self.stats[0]}
