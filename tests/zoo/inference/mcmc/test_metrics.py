"""Pooled metrics of the batched kernels: dense, Fisher diagonal and low rank.

The statistical checks compare with closed forms at a tolerance set by Monte Carlo error:
a whitened sample covariance of ``n`` effectively independent draws in D dimensions has
its eigenvalues inside the Marchenko-Pastur edges ``(1 +- sqrt(D / n))^2``, and ``n`` is
taken from the draws' own ESS.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from zoo.inference.mcmc import GaussianPotential, windowed
from zoo.inference.mcmc.batched import BatchMetric
from zoo.inference.mcmc.ess import ess_per_chain
from zoo.inference.mcmc.loop import sample
from zoo.inference.mcmc.metrics import (
    DenseBatchMetric,
    dense_covariance,
    fisher_diagonal,
    fisher_low_rank,
    pooled_estimate,
)
from zoo.inference.mcmc.programs import BATCHED
from zoo.inference.mcmc.samplers import run_nuts
from zoo.inference.mcmc.windowed import WindowedProgram

D = 8


def _correlated(condition: float = 1000.0, seed: int = 0) -> np.ndarray:
    """A covariance with eigenvalues log-spaced over ``condition`` in a random basis."""
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.standard_normal((D, D)))
    ev = np.logspace(-0.5 * math.log10(condition), 0.5 * math.log10(condition), D)
    return (q * ev) @ q.T


def _spiked(seed: int = 1) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A diagonal covariance plus three directions of large variance (100, 30, 10 times)."""
    rng = np.random.default_rng(seed)
    d = np.exp(rng.uniform(-1, 1, D))
    q, _ = np.linalg.qr(rng.standard_normal((D, 3)))
    lam = np.array([100.0, 30.0, 10.0])
    inner = np.eye(D) + (q * (lam - 1)) @ q.T
    return d[:, None] * inner * d[None, :], q, lam


def _whitened_edges(cov: np.ndarray, est: np.ndarray) -> tuple[float, float]:
    """Extreme eigenvalues of ``cov^-1/2 est cov^-1/2``."""
    w, v = np.linalg.eigh(cov)
    inv_half = (v / np.sqrt(w)) @ v.T
    ev = np.linalg.eigvalsh(inv_half @ est @ inv_half)
    return float(ev.min()), float(ev.max())


def _mp(n_eff: float, slack: float = 1.5) -> tuple[float, float]:
    """Marchenko-Pastur edges at ``n_eff`` draws, ``sqrt(D / n)`` widened by ``slack`` (the
    edges are asymptotic and ``n_eff`` itself an estimate)."""
    r = slack * math.sqrt(D / n_eff)
    return max(0.0, 1 - r) ** 2, (1 + r) ** 2


def _ess_of_squares(draws: np.ndarray, cov: np.ndarray) -> float:
    """The least ESS of the squared whitened coordinates of ``draws`` ``(C, n, D)``: the
    effective n of a covariance estimate (an antithetic chain's ESS of the mean says
    nothing of it)."""
    w, v = np.linalg.eigh(cov)
    y = draws @ (v / np.sqrt(w))
    y = y - y.mean(1, keepdims=True)
    return float(ess_per_chain(torch.from_numpy(y**2)).sum(0).min())


def _check_draws(flat: np.ndarray, cov: np.ndarray) -> None:
    """Mean within 4 MC s.e. of 0 (at the ESS of each coordinate) and the whitened
    covariance inside the MP edges (at the ESS of the squares)."""
    ess = ess_per_chain(torch.from_numpy(flat)).sum(0).numpy()  # (D,)
    x = flat.reshape(-1, D)
    se = np.sqrt(np.diag(cov) / ess)
    assert np.all(np.abs(x.mean(0)) < 4 * se), (x.mean(0), se)
    n_eff = _ess_of_squares(flat, cov)
    lo, hi = _whitened_edges(cov, np.cov(x.T))
    mlo, mhi = _mp(n_eff)
    assert mlo < lo and hi < mhi, (lo, hi, mlo, mhi, n_eff)


def _run(mass_matrix: str, cov: np.ndarray, **kw) -> tuple[WindowedProgram, object]:
    pot = GaussianPotential(cov)
    kernel = BATCHED["nuts"](kw.pop("max_tree_depth", 8), kw.pop("min_trajectory", None))
    program = WindowedProgram(
        kernel.transition,
        "nuts",
        trajectory_cap=kernel.trajectory_cap,
        seed=3,
        warmup=300,
        target_accept=0.8,
        step_size=None,
        adapt_mass_matrix=True,
        pooled=None if mass_matrix == "diag" else mass_matrix,
    )
    res = sample(program, pot, warmup=300, draws=250, chains=8, target_accept=0.8)
    return program, res


def test_dense_metric_draws_momenta_of_the_mass_and_moves_with_its_inverse() -> None:
    cov = torch.from_numpy(_correlated(50.0))
    m = DenseBatchMetric(cov)
    noise = torch.randn(5, D, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    r = m.from_noise(noise)
    # r = L^-T xi: its covariance is (L L^T)^-1 = M; checked exactly through L^T r = xi
    assert torch.allclose(r @ m.chol, noise, atol=1e-10)
    assert torch.allclose(m.velocity(r), r @ cov, atol=1e-12)
    z = torch.zeros(5, D, dtype=torch.float64)
    eps = torch.full((5, 1), 0.1, dtype=torch.float64)
    assert torch.allclose(m.drift(z, m.scale(eps), r), 0.1 * (r @ cov), atol=1e-12)


def test_dense_covariance_is_stans_regularization_of_the_within_chain_covariance() -> None:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(40, 3, D, generator=g, dtype=torch.float64)
    x = x + torch.arange(3, dtype=torch.float64)[None, :, None] * 10  # chains far apart
    est = dense_covariance(x)
    xc = (x - x.mean(0, keepdim=True)).reshape(-1, D)
    n = 120
    want = n / (n + 5) * (xc.T @ xc / (n - 3)) + 1e-3 * 5 / (n + 5) * torch.eye(D)
    assert torch.allclose(est, want.double(), atol=1e-12)  # the chains' offsets left out


def test_batched_nuts_with_dense_metric_adapts_the_target_covariance(monkeypatch) -> None:
    windows = []

    def recording(kind, draws, grads):
        windows.append(draws.clone())
        return pooled_estimate(kind, draws, grads)

    monkeypatch.setattr(windowed, "pooled_estimate", recording)
    cov = _correlated(1000.0)
    program, res = _run("dense", cov)
    # the metric in use is the last slow window's estimate; n from that window's own ESS
    last = windows[-1]  # (T, C, D)
    assert torch.allclose(program.cov, dense_covariance(last))
    n_eff = _ess_of_squares(last.transpose(0, 1).numpy(), cov)
    lo, hi = _whitened_edges(cov, program.cov.numpy())
    mlo, mhi = _mp(n_eff)
    assert mlo < lo and hi < mhi, (lo, hi, mlo, mhi, n_eff)
    _check_draws(res.flat, cov)
    # the adapted metric whitens the target: NUTS's trees are short (the diagonal's, ~40 steps)
    assert res.n_steps_mean < 12


def test_fisher_diagonal_is_exact_on_a_diagonal_gaussian() -> None:
    v = torch.tensor([0.01, 0.5, 1.0, 3.0, 40.0, 2.0, 0.2, 7.0], dtype=torch.float64)
    g = torch.Generator().manual_seed(2)
    x = torch.randn(30, 4, D, generator=g, dtype=torch.float64) * v.sqrt()
    est = fisher_diagonal(x, x / v)  # grad U = x / v
    assert torch.allclose(est, v, rtol=1e-10)


def test_fisher_low_rank_recovers_the_large_variance_directions() -> None:
    cov, q, lam = _spiked()
    g = torch.Generator().manual_seed(4)
    w, v = np.linalg.eigh(cov)
    half = torch.from_numpy((v * np.sqrt(w)) @ v.T)
    x = torch.randn(200, 4, D, generator=g, dtype=torch.float64) @ half
    grads = x @ torch.from_numpy(np.linalg.inv(cov))
    est = fisher_low_rank(x, grads).numpy()
    # for a Gaussian the geometric mean of the draws' and gradients' covariances is the
    # target covariance itself, whatever the sample: only the cutoff leaves the directions
    # the diagonal already gets within a factor 2 to the diagonal
    ew, ev = np.linalg.eigh(est)
    tw, tv = np.linalg.eigh(cov)
    assert np.allclose(ew[-3:], tw[-3:], rtol=0.05), (ew[-3:], tw[-3:])
    for k in (-1, -2, -3):
        assert abs(ev[:, k] @ tv[:, k]) > 0.99
    # the diagonal alone misses them by far
    diag = fisher_diagonal(x, grads).numpy()
    assert diag.max() < 0.5 * tw[-1]


def test_batched_nuts_with_fisher_low_rank_samples_the_spiked_gaussian() -> None:
    cov, _, _ = _spiked()
    program, res = _run("fisher_low_rank", cov)
    _check_draws(res.flat, cov)
    top = np.linalg.eigvalsh(program.cov.numpy())[-1]
    assert 0.5 < top / np.linalg.eigvalsh(cov)[-1] < 2.0


@pytest.mark.parametrize("mass_matrix", ["dense", "fisher_diag", "fisher_low_rank"])
def test_run_nuts_takes_the_pooled_metrics_batched(mass_matrix: str) -> None:
    pot = GaussianPotential(np.diag(np.linspace(0.5, 2.0, D)))
    kw = dict(seed=0, warmup=40, draws=10, chains=2, target_accept=0.8, max_tree_depth=4)
    res = run_nuts(pot, step_size=None, mass_matrix=mass_matrix, vectorize_chains=True, **kw)
    assert np.isfinite(res.flat).all() and res.adapted.inverse_mass_matrix.shape == (2, D)
    if mass_matrix.startswith("fisher"):
        with pytest.raises(ValueError, match="vectorize_chains: true"):
            run_nuts(pot, step_size=None, mass_matrix=mass_matrix, vectorize_chains=False, **kw)


def test_the_diagonal_metric_keeps_its_interface() -> None:
    minv = torch.tensor([[1.0, 4.0], [0.25, 1.0]])
    m = BatchMetric(minv)
    r = m.from_noise(torch.ones(2, 2))
    assert torch.equal(r, minv.rsqrt()) and torch.equal(m.velocity(r), minv * r)
