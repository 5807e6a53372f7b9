"""FlatPotential against Pyro's log joint; NUTS and HMC against a closed-form posterior.

Bayesian linear regression y = X w + b + eps, eps ~ N(0, sigma^2) with sigma known and an
N(0, 1) prior on (w, b) has the Gaussian posterior N(m, A^-1), A = I + Z^T Z / sigma^2
(Z = [X, 1]), m = A^-1 Z^T y / sigma^2. Zoo's depth-0 BayesianMLP is that model, and its
flat vector is (w, b) in this order.
"""

from __future__ import annotations

import functools

import numpy as np
import pyro
import pytest
import torch
from arviz_stats.base import array_stats

from zoo.execution.arviz_io import SAMPLE_STATS
from zoo.inference.mcmc import samplers
from zoo.inference.mcmc.potential import FlatPotential
from zoo.models.likelihoods import CategoricalLikelihood, GaussianLikelihood
from zoo.models.mlp import BayesianMLP
from zoo.models.priors import he_prior, normal_prior
from zoo.spec.sections.samplers import HMCMethod, NUTSMethod


def schema_defaults(section: type, *names: str) -> dict:
    """The spec's defaults of a sampler section's fields (the samplers have none of their own)."""
    return {n: section.model_fields[n].default for n in names}


#: The samplers with the schema's defaults for what a test does not set.
run_nuts = functools.partial(
    samplers.run_nuts,
    **schema_defaults(
        NUTSMethod,
        "chains",
        "target_accept",
        "max_tree_depth",
        "step_size",
        "mass_matrix",
        "vectorize_chains",
    ),
)
run_hmc = functools.partial(
    samplers.run_hmc,
    **schema_defaults(
        HMCMethod, "chains", "target_accept", "adapt_mass_matrix", "step_size", "vectorize_chains"
    ),
    mass_matrix="diag",
)

SIGMA = 0.5
STATS = SAMPLE_STATS  # NUTS records every sample stat of a cell file


def _regression(n: int = 60, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 2)) @ np.array([[1.0, 0.8], [0.0, 0.6]]) + 1.0
    y = x @ np.array([0.7, -1.2]) + 0.3 + SIGMA * rng.normal(size=n)
    z = np.hstack([x, np.ones((n, 1))])
    prec = np.eye(3) + z.T @ z / SIGMA**2
    mean = np.linalg.solve(prec, z.T @ y / SIGMA**2)
    pot = FlatPotential(
        BayesianMLP(2, [], GaussianLikelihood(SIGMA)),
        torch.tensor(x, dtype=torch.float32),
        torch.tensor(y, dtype=torch.float32),
    )
    return pot, mean, np.linalg.inv(prec)


def _small(kind: str, n: int = 25):
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(n, 3, generator=gen)
    if kind == "classification":
        lik, y = CategoricalLikelihood(3), torch.randint(0, 3, (n,), generator=gen)
        model = BayesianMLP(
            3, [4, 5], lik, act="tanh", weight_prior=normal_prior(0.7), bias_prior=he_prior()
        )
    else:
        lik, y = GaussianLikelihood(None, prior_scale=0.8), torch.randn(n, generator=gen)
        model = BayesianMLP(3, [4], lik, act="leaky_relu", weight_prior=he_prior())
    return FlatPotential(model, x, y), x, y


def _pyro_potential(pot: FlatPotential, z: torch.Tensor, x, y) -> torch.Tensor:
    params = pot.unravel(z)
    tr = pyro.poutine.trace(pyro.poutine.condition(pot.model, params)).get_trace(x, y)
    jac = z[pot.site_slices["noise"]].sum() if pot.learned_noise else 0.0
    return -(tr.log_prob_sum() + jac)


@pytest.mark.parametrize("kind", ["classification", "regression"])
def test_potential_is_minus_the_model_log_joint(kind: str) -> None:
    pot, x, y = _small(kind)
    assert pot.learned_noise == (kind == "regression")
    assert pot.dim == pot.model.num_params + pot.learned_noise
    zs = torch.randn(4, pot.dim, generator=torch.Generator().manual_seed(2))
    batched = pot(zs)
    assert batched.shape == (4,)
    for z, ub in zip(zs, batched, strict=True):
        zg = z.clone().requires_grad_(True)
        ref = _pyro_potential(pot, zg, x, y)
        (gref,) = torch.autograd.grad(ref, zg)
        u, g = pot.value_and_grad(z)
        np.testing.assert_allclose([u, float(pot(z)), float(ub)], ref.item(), rtol=1e-5)
        np.testing.assert_allclose(g.numpy(), gref.numpy(), rtol=1e-4, atol=1e-4)
        assert not z.requires_grad


def test_ravel_unravel_round_trip() -> None:
    pot, _, _ = _small("regression")
    z = torch.randn(5, 2, pot.dim)
    params = pot.unravel(z)
    assert list(params) == list(pot.site_slices) == list(pot.site_shapes)
    assert params["layer0.weight"].shape == (5, 2, 4, 3) and params["noise"].shape == (5, 2)
    assert (params["noise"] > 0).all()
    torch.testing.assert_close(pot.ravel(params), z)
    torch.testing.assert_close(pot.ravel(pot.unravel(z[0, 0])), z[0, 0])
    with pytest.raises(KeyError, match="noise"):
        pot.ravel({k: v for k, v in params.items() if k != "noise"})


def _check_posterior(res, mean: np.ndarray, cov: np.ndarray) -> None:
    """Mean and covariance entries within 4 Monte Carlo standard errors of the closed form.

    The MCSE of the mean of component i is sd_i / sqrt(ESS_i); that of the covariance entry
    (i, j) is the sd of c_i c_j (c = draw - m) over the ESS of c_i c_j: fixed-length HMC can
    be antithetic for means (ESS > draws) while mixing slowly for variances.
    """
    flat = res.flat  # (chain, draw, 3)
    ess = array_stats.ess(flat, chain_axis=0, draw_axis=1, method="mean")
    assert ess.min() > 200
    np.testing.assert_array_less(
        np.abs(res.flat_draws().mean(0) - mean), 4 * np.sqrt(np.diag(cov) / ess)
    )
    c = flat - mean
    for i in range(3):
        for j in range(i + 1):
            prod = c[..., i] * c[..., j]
            ess_ij = array_stats.ess(prod, chain_axis=0, draw_axis=1, method="mean")
            tol = 4 * prod.std() / np.sqrt(ess_ij)
            if i == j:  # tight enough to tell a 1.5x variance error
                assert tol < 0.5 * cov[i, i]
            assert abs(prod.mean() - cov[i, j]) < tol, (i, j, prod.mean(), cov[i, j], tol)


@pytest.mark.slow
@pytest.mark.parametrize("mass_matrix", ["diag", "dense"])
def test_nuts_recovers_conjugate_posterior(mass_matrix: str) -> None:
    pot, mean, cov = _regression()
    res = run_nuts(pot, seed=0, warmup=300, draws=1000, chains=2, mass_matrix=mass_matrix)
    assert res.n_divergent == 0
    _check_posterior(res, mean, cov)


@pytest.mark.slow
@pytest.mark.parametrize(("adapt", "num_steps"), [(False, 4), (True, 2)])
def test_hmc_recovers_conjugate_posterior(adapt: bool, num_steps: int) -> None:
    # num_steps keeps the trajectory away from half periods, where fixed-length HMC is
    # antithetic and its variance draws barely mix (ESS of c_i^2 below 10 at 8 and 3 steps)
    pot, mean, cov = _regression()
    res = run_hmc(
        pot,
        seed=0,
        warmup=300,
        draws=1000,
        chains=2,
        num_steps=num_steps,
        adapt_mass_matrix=adapt,
        mass_matrix="dense",
    )
    _check_posterior(res, mean, cov)


def test_same_seed_same_draws() -> None:
    pot, _, _ = _small("classification")
    a, b, c = (
        run_nuts(pot, seed=s, warmup=20, draws=10, chains=2, max_tree_depth=4) for s in (3, 3, 4)
    )
    np.testing.assert_array_equal(a.flat, b.flat)
    for k in STATS:
        np.testing.assert_array_equal(a.sample_stats[k], b.sample_stats[k])
    assert not np.array_equal(a.flat, c.flat)
    assert not np.array_equal(a.flat[0], a.flat[1])  # chains get their own seeds


def test_sample_stats_shapes_and_values() -> None:
    pot, _, _ = _small("regression")
    res = run_nuts(pot, seed=0, warmup=30, draws=15, chains=2, max_tree_depth=5)
    assert set(res.sample_stats) == set(STATS)
    for k in STATS:
        assert res.sample_stats[k].shape == (2, 15), k
    st = res.sample_stats
    assert st["diverging"].dtype == bool and isinstance(res.n_divergent, int)
    assert ((st["n_steps"] >= 1) & (st["n_steps"] <= 2**5 - 1)).all()
    assert ((st["tree_depth"] >= 1) & (st["tree_depth"] <= 5)).all()
    assert (2 ** (st["tree_depth"] - 1) <= st["n_steps"]).all()
    assert ((st["acceptance_rate"] >= 0) & (st["acceptance_rate"] <= 1)).all()
    np.testing.assert_array_equal(
        st["step_size"], res.adapted.step_size[:, None] * np.ones((1, 15))
    )
    lp = -pot(torch.as_tensor(res.flat)).numpy()
    np.testing.assert_allclose(st["lp"], lp, rtol=1e-4)
    assert (st["energy"] >= -st["lp"] - 1e-4).all()  # U + K >= U
    assert res.draws["layer0.weight"].shape == (2, 15, 4, 3)
    assert res.draws["noise"].shape == (2, 15) and (res.draws["noise"] > 0).all()
    assert res.flat_draws().shape == (30, pot.dim)
    # sigma = exp(s) is rounded to float32 (relative 2^-24 = 6e-8), so log(sigma) is s to
    # about 6e-8 absolute: near s = 0 a relative tolerance alone cannot hold
    np.testing.assert_allclose(
        np.log(res.draws["noise"]).ravel(),
        res.flat_draws()[:, res.site_slices["noise"]].ravel(),
        rtol=1e-5,
        atol=5e-7,
    )
    assert res.seconds >= res.warmup_seconds > 0


@pytest.mark.parametrize("mass_matrix", ["block", "dense"])
def test_block_and_dense_mass_matrices_run(mass_matrix: str) -> None:
    pot, _, _ = _small("regression")
    init = pot.unravel(torch.zeros(pot.dim))
    res = run_nuts(
        pot, seed=0, warmup=60, draws=10, mass_matrix=mass_matrix, init=init, max_tree_depth=5
    )
    assert np.isfinite(res.flat).all() and res.adapted.step_size.shape == (1,)
    assert res.init == "shared"


def test_hmc_fixed_step_size_and_stats() -> None:
    pot, _, _ = _regression(n=20)
    res = run_hmc(pot, seed=0, warmup=0, draws=12, num_steps=7, step_size=0.05, progress=True)
    assert "tree_depth" not in res.sample_stats
    assert (res.sample_stats["n_steps"] == 7).all()
    assert (res.sample_stats["step_size"] == 0.05).all()
    assert res.warmup_seconds == 0.0


def test_failures_name_the_fix() -> None:
    pot, x, y = _small("classification")
    bad = FlatPotential(pot.model, x * float("nan"), y)
    with pytest.raises(FloatingPointError, match="init="):
        run_nuts(bad, seed=0, warmup=5, draws=5)
    init = pot.unravel(torch.zeros(pot.dim))
    init["layer1.bias"] = torch.full((5,), float("inf"))
    with pytest.raises(FloatingPointError, match=r"layer1\.bias"):
        run_nuts(pot, seed=0, warmup=5, draws=5, init=init)
    with pytest.raises(ValueError, match="mass_matrix"):
        run_nuts(pot, seed=0, warmup=5, draws=5, mass_matrix="full")
    with pytest.raises(ValueError, match="target_accept"):
        run_hmc(pot, seed=0, warmup=5, draws=5, num_steps=3, target_accept=1.5)
