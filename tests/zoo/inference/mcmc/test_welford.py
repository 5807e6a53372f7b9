"""Welford's update and Chan's merge against NumPy's two-pass statistics."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from zoo.inference.mcmc.welford import (
    chan_merge,
    regularized_variance,
    welford_init,
    welford_update,
)


def test_pooled_chan_merge_is_numpys_variance() -> None:
    rng = np.random.default_rng(0)
    batches = [rng.normal(size=(c, 4)) * [1, 10, 0.1, 3] + 5 for c in (1, 7, 3, 7)]
    w = welford_init((4,))
    for b in batches:
        w = chan_merge(w, torch.from_numpy(b).float().double())
    allx = np.concatenate([b.astype(np.float32) for b in batches]).astype(np.float64)
    assert w.count == 18
    np.testing.assert_allclose(w.mean.numpy(), allx.mean(0), rtol=1e-12)
    np.testing.assert_allclose((w.m2 / (w.count - 1)).numpy(), allx.var(0, ddof=1), rtol=1e-10)
    n = 18
    np.testing.assert_allclose(
        regularized_variance(w).numpy(),
        n / (n + 5) * allx.var(0, ddof=1) + 1e-3 * 5 / (n + 5),
        rtol=1e-10,
    )


def test_full_chan_merge_is_numpys_covariance() -> None:
    rng = np.random.default_rng(1)
    batches = [rng.normal(size=(c, 3)) @ [[1, 0.5, 0], [0, 2, 0], [0, 0, 0.1]] + 3 for c in (2, 5)]
    w = welford_init((3,), full=True)
    for b in batches:
        w = chan_merge(w, torch.from_numpy(b), full=True)
    allx = np.concatenate(batches)
    np.testing.assert_allclose(w.m2.numpy() / 6, np.cov(allx.T), rtol=1e-12)


@pytest.mark.parametrize("fused", [False, True])
def test_per_row_welford_is_numpys_variance(fused: bool) -> None:
    x = torch.from_numpy(np.random.default_rng(2).normal(size=(9, 3, 5)) + 7)
    w = welford_init((3, 5))
    for row in x:
        w = welford_update(w, row, fused=fused)
    np.testing.assert_allclose(w.mean.numpy(), x.mean(0).numpy(), rtol=1e-12)
    np.testing.assert_allclose(w.m2.numpy() / 8, x.var(0).numpy(), rtol=1e-10)
    with pytest.raises(RuntimeError):
        regularized_variance(welford_init((3,)))
