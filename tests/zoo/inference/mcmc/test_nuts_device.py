"""The batched NUTS with its tree on the device: same coins as the one-chain kernel, few reads.

:func:`zoo.inference.mcmc.batched.nuts_step_batch` draws each chain's uniforms ahead as a block
and afterwards advances the chain's generator by the number its chain used; these tests
check that the generators end where the one-chain kernel leaves them (including the coins
the recursion draws on its way up out of a subtree that stopped), on a target whose energy
turns NaN beyond a radius (divergences at any leaf), and that a transition reads the device
only once per doubling plus once at the end.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from tests.zoo.inference.mcmc.test_sequential import _small
from zoo.inference.mcmc import batched, nuts_record
from zoo.inference.mcmc.batched import BatchMetric, new_point_batch, nuts_step_batch
from zoo.inference.mcmc.kernel import Metric, new_point, nuts_step


@pytest.mark.parametrize("k", [0, 1, 7, 1000])
def test_random_takes_one_advance_step(k: int) -> None:
    """``Generator.random()`` consumes one 64-bit output: ``advance(k)`` skips k of them."""
    g = np.random.default_rng(3)
    state = g.bit_generator.state
    block = g.random(k + 2)
    g.bit_generator.state = state
    g.bit_generator.advance(k)
    assert g.random() == block[k] and g.random() == block[k + 1]
    # what Coins.settle does, for PCG64 and for a bit generator without advance
    for bits in (np.random.PCG64(5), np.random.MT19937(5)):
        ref, g = np.random.Generator(type(bits)(5)), np.random.Generator(bits)
        ref.random(k)
        coins = nuts_record.Coins([g], 2 * k + 3, torch.device("cpu"))
        coins.settle([k])
        np.testing.assert_array_equal(g.random(3), ref.random(3))


class _Wall:
    """U = |z|^2 / 2 inside a ball of radius ``radius``, NaN outside (float64)."""

    def __init__(self, dim: int, radius: float) -> None:
        self.dim, self.radius = dim, radius

    def _u(self, z: torch.Tensor) -> torch.Tensor:
        u = 0.5 * (z * z).sum(-1)
        return torch.where(z.norm(dim=-1) > self.radius, math.nan, u)

    def value_and_grad(self, z: torch.Tensor) -> tuple[float, torch.Tensor]:
        return float(self._u(z)), z.clone()

    def value_and_grad_batch(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self._u(z), z.clone()


def _states_follow_the_kernel(pot, dim, eps, depth, transitions, dtype) -> list[dict]:
    c = len(eps)
    minv = torch.rand(c, dim, generator=torch.Generator().manual_seed(1), dtype=dtype) + 0.5
    z = torch.randn(c, dim, generator=torch.Generator().manual_seed(2), dtype=dtype)
    metrics = [Metric({("all",): minv[i]}, {("all",): slice(0, dim)}) for i in range(c)]
    seeds = range(10, 10 + c)
    rngs, brngs = [[np.random.default_rng(s) for s in seeds] for _ in range(2)]
    gens, bgens = [[torch.Generator().manual_seed(s) for s in seeds] for _ in range(2)]
    bmetric, e = BatchMetric(minv), torch.tensor(eps)
    state = [(z[i], *pot.value_and_grad(z[i])) for i in range(c)]
    seen = []
    for t in range(transitions):
        zb = torch.stack([s[0] for s in state])
        ub = torch.tensor([s[1] for s in state], dtype=torch.float64)
        gb = torch.stack([s[2] for s in state])
        qb, stb = nuts_step_batch(
            pot, bmetric, new_point_batch(bmetric, zb, ub, gb, bgens), e, depth, brngs
        )
        for i in range(c):
            p = new_point(pot, metrics[i], *state[i], gens[i])
            q, st = nuts_step(pot, metrics[i], p, eps[i], depth, rngs[i])
            assert brngs[i].bit_generator.state == rngs[i].bit_generator.state, (t, i)
            for k, v in st.items():  # float32 networks: test_batched.py's tolerances
                np.testing.assert_allclose(stb[k][i], v, rtol=1e-5, atol=3e-5, err_msg=f"{t}{i}{k}")
            np.testing.assert_allclose(qb.z[i].numpy(), q.z.numpy(), rtol=1e-5, atol=2e-4)
            state[i] = (q.z, q.potential, q.g)
            seen.append(st)
    return seen


#: ``batched.CHUNK_BYTES``: the default (a subtree's leaves in one chunk), every leaf its own
#: chunk (all merges among the chunks' roots), and chunks of four leaves of the tests' targets.
CHUNKS = pytest.mark.parametrize("chunk", [None, 1, 4 * 4 * 8 * 6 * 8], ids=["one", "leaf", "four"])


@CHUNKS
def test_generators_end_where_the_kernel_leaves_them_at_a_nan_wall(chunk, monkeypatch) -> None:
    """Eight chains, step sizes from tiny (full trees) to ones that cross the NaN wall at
    some leaf of a subtree: after every transition each generator's state is the one-chain
    kernel's, and so are the statistics and the proposal, however the subtree's leaves are
    chunked (the roots of chunks merge as points, the leaves within one as indices)."""
    if chunk is not None:
        monkeypatch.setattr(batched, "CHUNK_BYTES", chunk)
    eps = [0.02, 0.05, 0.3, 0.6, 0.9, 1.2, 1.5, 2.5]
    seen = _states_follow_the_kernel(_Wall(6, 7.0), 6, eps, 6, 5, torch.float64)
    assert any(st["diverging"] for st in seen)
    assert any(not st["diverging"] and st["tree_depth"] < 6 for st in seen)  # U-turns
    assert any(st["tree_depth"] == 6 for st in seen)


@CHUNKS
def test_generators_end_where_the_kernel_leaves_them_on_a_network(chunk, monkeypatch) -> None:
    if chunk is not None:
        monkeypatch.setattr(batched, "CHUNK_BYTES", chunk)
    pot = _small("classification")[0]
    seen = _states_follow_the_kernel(pot, pot.dim, [0.2, 0.06, 8.0], 5, 4, torch.float32)
    assert any(st["diverging"] for st in seen)


def test_a_transition_reads_the_device_once_per_doubling(monkeypatch) -> None:
    """No ``item``/``tolist``/``bool``/``float`` of a tensor inside a tree: one ``bool`` per
    doubling (whether any chain goes on) and one copy of the record at the end."""
    reads: list[str] = []
    for name in ("item", "tolist", "__bool__", "__float__", "__int__", "cpu", "numpy"):
        orig = getattr(torch.Tensor, name)

        def counted(self, *a, _orig=orig, _name=name, **k):
            reads.append(_name)
            return _orig(self, *a, **k)

        monkeypatch.setattr(torch.Tensor, name, counted)
    pot, c, depth = _Wall(4, 1e9), 5, 6
    z = torch.randn(c, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    metric = BatchMetric(torch.ones(c, 4, dtype=torch.float64))
    gens = [torch.Generator().manual_seed(i) for i in range(c)]
    p = new_point_batch(metric, z, *pot.value_and_grad_batch(z), gens)
    reads.clear()
    _, st = nuts_step_batch(
        pot, metric, p, torch.full((c,), 1e-3), depth, [np.random.default_rng(i) for i in range(c)]
    )
    assert (st["tree_depth"] == depth).all()  # tiny steps: every doubling is built
    assert reads.count("__bool__") == depth - 1  # not after the last doubling
    assert len(reads) - reads.count("__bool__") <= 2  # the record: .cpu().numpy()
