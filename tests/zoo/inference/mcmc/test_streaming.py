"""Streaming moments: exact against NumPy's batch statistics; ESS and R-hat against theory."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from zoo.inference.mcmc.streaming import Moments, StreamingMoments, group_sizes


def _stream(draws: np.ndarray, groups: int = 8, **kw) -> StreamingMoments:
    """Feed (C, S, D) draws one draw per chain at a time."""
    c, s, d = draws.shape
    sm = StreamingMoments(d, c, groups=groups, **kw)
    for t in range(s):
        sm.update(torch.from_numpy(np.ascontiguousarray(draws[:, t])))
    return sm


def _correlated(c: int, s: int, d: int, dtype, seed: int) -> np.ndarray:
    # far from the origin, unequal scales and correlations: a naive sum of x x^T would lose
    # digits here, the centred merge must not
    rng = np.random.default_rng(seed)
    a = rng.normal(size=(d, d)) * np.geomspace(0.1, 10.0, d)
    x = rng.normal(size=(c, s, d)) @ a.T + rng.uniform(-500.0, 500.0, size=d)
    return x.astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("chains", "groups"), [(12, 4), (10, 3), (7, 8), (5, 1)])
def test_streaming_equals_numpy_batch_statistics(dtype, chains, groups):
    s, d = 37, 6
    x = _correlated(chains, s, d, dtype, seed=chains * 10 + groups)
    m = _stream(x, groups).summary()
    x64 = x.astype(np.float64)  # the same values: the reference sees what the stream saw
    flat = x64.reshape(-1, d)
    scale = np.abs(flat).max()
    cov = np.cov(flat, rowvar=False, ddof=1)

    def close(a, b, ref):
        # float64 rounding: a few hundred ulps of the largest magnitude involved
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-13 * ref)

    assert (m.n, m.chains, m.dim) == (s, chains, d)
    close(m.mean, flat.mean(0), scale)
    close(m.cov, cov, np.abs(cov).max())
    close(m.chain_mean, x64.mean(1), scale)
    close(m.chain_var, x64.var(1, ddof=1), np.abs(cov).max())
    # groups: contiguous blocks of chains, the larger ones first (numpy.array_split)
    blocks = np.array_split(np.arange(chains), min(groups, chains))
    assert m.group_sizes == tuple(len(b) for b in blocks)
    assert m.group_mean.shape == (len(blocks), d) and m.group_cov.shape == (len(blocks), d, d)
    for g, idx in enumerate(blocks):
        part = x64[idx].reshape(-1, d)
        close(m.group_mean[g], part.mean(0), scale)
        close(m.group_cov[g], np.cov(part, rowvar=False, ddof=1), np.abs(cov).max())
    for arr in (m.mean, m.cov, m.chain_mean, m.chain_var, m.group_mean, m.group_cov):
        assert arr.dtype == np.float64
    np.testing.assert_array_equal(m.cov, m.cov.T)


def test_group_sizes_are_array_split_blocks():
    assert group_sizes(10, 3) == (4, 3, 3)
    assert group_sizes(8192, 8) == (1024,) * 8
    assert group_sizes(3, 8) == (1, 1, 1)  # fewer chains than groups: one chain per group
    with pytest.raises(ValueError, match="at least 1"):
        group_sizes(0, 8)


def test_pooled_variance_of_the_ess_is_the_covariance_diagonal():
    # the ESS uses sigma^2 from the chain statistics; it is diag(cov) by the law of total
    # variance, which a test of Moments.ess against its formula relies on
    m = _stream(_correlated(9, 20, 4, np.float64, seed=3), groups=2).summary()
    c, n = m.chains, m.n
    var_means = m.chain_mean.var(0, ddof=1)
    pooled = ((n - 1) * c * m.chain_var.mean(0) + n * (c - 1) * var_means) / (c * n - 1)
    np.testing.assert_allclose(pooled, np.diag(m.cov), rtol=1e-12)
    np.testing.assert_allclose(m.ess(cap=False), c * pooled / var_means, rtol=1e-12)


def test_ess_of_iid_draws_is_all_draws():
    # For iid N(0, 1) draws (C - 1) s_m^2 n / sigma^2 ~ chi^2_{C-1}, so r = C n / ESS has
    # mean 1 and sd sqrt(2 / (C - 1)) per coordinate; over D independent coordinates the mean
    # of r has sd sqrt(2 / ((C - 1) D)) = 0.010 (sigma^2's own error, sqrt(2 / (C n D)), is
    # 20 times smaller). Bounds: 4 sd.
    c, n, d = 400, 200, 50
    x = np.random.default_rng(0).normal(size=(c, n, d))
    m = _stream(x).summary()
    r = c * n / m.ess(cap=False)
    sd = np.sqrt(2 / ((c - 1) * d))
    assert abs(r.mean() - 1) < 4 * sd
    # capped: never more than the C n draws; the median of r has sd about 1.2533 sd (a
    # sample median), and the median of chi^2_{C-1}/(C-1) is below 1, so n_eff is C n or
    # within 4 such sd below it
    assert m.ess().max() == c * n
    assert c * n / (1 + 4 * 1.2533 * sd) < m.n_eff <= c * n
    # R-hat = sqrt((n-1)/n + s_m^2 / W) = 1 + O(1/n) for iid draws
    assert np.all(np.abs(m.rhat() - 1) < 0.01)


def test_ess_of_ar1_chains_is_all_draws_over_tau():
    # x_t = rho x_{t-1} + sqrt(1 - rho^2) e_t, started at stationarity: the mean of n draws
    # has variance tau_n / n with tau_n = (1 + rho) / (1 - rho) - 2 rho (1 - rho^n) /
    # (n (1 - rho)^2), so r = C n / ESS has mean tau_n and sd tau_n sqrt(2 / (C - 1)) per
    # coordinate (chi^2 again: the chain means are Gaussian); the mean over D coordinates
    # has sd tau_n sqrt(2 / ((C - 1) D)) = 0.033 here. Bounds: 4 sd.
    c, n, d, rho = 512, 500, 32, 0.5
    rng = np.random.default_rng(1)
    sm = StreamingMoments(d, c, groups=8)
    z = rng.normal(size=(c, d))
    for _ in range(n):
        sm.update(torch.from_numpy(z))
        z = rho * z + np.sqrt(1 - rho**2) * rng.normal(size=(c, d))
    m = sm.summary()
    tau_n = (1 + rho) / (1 - rho) - 2 * rho * (1 - rho**n) / (n * (1 - rho) ** 2)
    sd = tau_n * np.sqrt(2 / ((c - 1) * d))
    assert abs((c * n / m.ess(cap=False)).mean() - tau_n) < 4 * sd
    # the median: sd of a sample median 1.2533 sd; the median of chi^2_{C-1}/(C-1) is
    # 1 - 2/(3 (C - 1)) to first order (0.13%, inside the bound)
    expected = c * n * (1 - rho) / (1 + rho)
    assert m.n_eff == pytest.approx(expected, rel=4 * 1.2533 * sd / tau_n + 0.005)
    assert m.n_eff == pytest.approx(sm.n_eff(), rel=1e-12)
    np.testing.assert_allclose(sm.ess().numpy(), m.ess(), rtol=1e-12)


def test_rhat_flags_chains_with_shifted_means():
    # every chain is iid N(mu_c, 1) with mu_c ~ N(0, 1): B / n ~ 1, W ~ 1, R-hat ~ sqrt(2)
    rng = np.random.default_rng(2)
    c, n, d = 16, 100, 5
    x = rng.normal(size=(c, n, d)) + rng.normal(size=(c, 1, d))
    m = _stream(x).summary()
    assert np.all(m.rhat() > 1.1)
    # and the ESS drops to about C: the chain means are C draws of the spread
    assert np.all(m.ess() < 10 * c)


def test_one_chain_has_no_between_chain_diagnostics():
    m = _stream(np.random.default_rng(4).normal(size=(1, 10, 3))).summary()
    assert m.group_sizes == (1,)
    assert np.isnan(m.ess()).all() and np.isnan(m.rhat()).all() and np.isnan(m.n_eff)
    np.testing.assert_allclose(m.chain_var[0], m.cov.diagonal(), rtol=1e-12)


def test_summary_needs_two_draws_and_update_checks_the_shape():
    sm = StreamingMoments(3, 4)
    with pytest.raises(ValueError, match="at least 2"):
        sm.summary()
    sm.update(torch.zeros(4, 3))
    with pytest.raises(ValueError, match="at least 2"):
        sm.summary()
    with pytest.raises(ValueError, match=r"expected \(4, 3\)"):
        sm.update(torch.zeros(3, 4))


def test_restrict_selects_coordinates_in_order():
    m = _stream(_correlated(6, 15, 5, np.float64, seed=5), groups=2).summary()
    idx = np.array([3, 0, 4])
    r = m.restrict(idx)
    assert isinstance(r, Moments) and r.dim == 3 and (r.n, r.chains) == (m.n, m.chains)
    np.testing.assert_array_equal(r.cov, m.cov[np.ix_(idx, idx)])
    np.testing.assert_array_equal(r.group_cov[1], m.group_cov[1][np.ix_(idx, idx)])
    np.testing.assert_array_equal(r.chain_var, m.chain_var[:, idx])
    np.testing.assert_array_equal(m.restrict(slice(1, 3)).mean, m.mean[1:3])


def _device_dtype_check(device: str) -> None:
    x = _correlated(4, 12, 3, np.float32, seed=6)
    sm = StreamingMoments(3, 4, groups=2)  # lazily on the device of the first draws
    for t in range(12):
        z = torch.from_numpy(x[:, t].copy()).to(device).requires_grad_()
        before = z.detach().clone()
        sm.update(z)
        assert z.dtype == torch.float32 and torch.equal(z.detach(), before)  # z untouched
    assert sm.device.type == torch.device(device).type
    assert sm._group_m2.dtype == torch.float64 and sm._chain_mean.device.type == sm.device.type
    m = sm.summary()
    assert m.cov.dtype == np.float64
    np.testing.assert_allclose(m.mean, x.astype(np.float64).reshape(-1, 3).mean(0), rtol=1e-13)
    # accumulation in float64: not float32's rounding (float32 mean is off by ~1e-5 here)
    np.testing.assert_allclose(
        m.cov, np.cov(x.astype(np.float64).reshape(-1, 3), rowvar=False), rtol=1e-12
    )


def test_float32_draws_accumulate_in_float64_on_the_cpu():
    _device_dtype_check("cpu")
    sm = StreamingMoments(2, 3, device="cpu")  # explicit device: allocated at once
    assert sm._group_m2.shape == (3, 2, 2) and sm._group_m2.dtype == torch.float64


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_float32_draws_accumulate_in_float64_on_cuda():
    _device_dtype_check("cuda")


@pytest.mark.parametrize(("chains", "groups", "buffered"), [(1, 8, 64), (12, 4, 22), (128, 2, 1)])
def test_buffered_draws_join_the_group_moments_exactly(chains, groups, buffered):
    # few chains per group: draws wait in a buffer and join the co-moments as one batch; a
    # summary taken mid-buffer merges what waits, and the stream goes on from there
    s, d = 150, 5
    x = _correlated(chains, s, d, np.float64, seed=chains)
    sm = StreamingMoments(d, chains, groups=groups)
    assert sm.buffered == buffered
    for t in range(s):
        sm.update(torch.from_numpy(np.ascontiguousarray(x[:, t])))
        if t in (9, 70):  # a summary between merges equals the batch statistics so far
            part = x[:, : t + 1].reshape(-1, d)
            np.testing.assert_allclose(
                sm.summary().cov,
                np.cov(part, rowvar=False),
                rtol=1e-12,
                atol=1e-13 * np.abs(part).max() ** 2,
            )
    m = sm.summary()
    flat = x.reshape(-1, d)
    np.testing.assert_allclose(
        m.cov, np.cov(flat, rowvar=False), rtol=1e-12, atol=1e-13 * np.abs(flat).max() ** 2
    )
    np.testing.assert_allclose(m.mean, flat.mean(0), rtol=1e-12, atol=1e-13 * np.abs(flat).max())
    np.testing.assert_allclose(m.chain_var, x.var(1, ddof=1), rtol=1e-12)


def test_buffer_is_capped_in_bytes():
    # 2 chains of a million coordinates: 64 draws would be 1 GB; the buffer holds 4
    sm = StreamingMoments(2**20, 2, groups=2, device="meta")
    assert sm.buffered == 4 and sm._buffer.shape == (4, 2, 2**20)
