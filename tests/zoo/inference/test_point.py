"""MAP and early-stopped MLE (zoo.inference.point) against closed forms on linear regression.

For y = X w + b + eps with known noise sigma and an N(0, 1) prior on (w, b), the MAP
estimate is the posterior mean m = A^-1 Z^T y / sigma^2 (A = I + Z^T Z / sigma^2, Z = [X, 1]),
and the maximum-likelihood estimate is least squares. Both are deterministic full-batch
optimizations, so the tolerance is the optimizer's convergence, not Monte Carlo error.
"""

from __future__ import annotations

import numpy as np
import torch

from zoo.inference.point import EarlyStopping, PointPosterior, fit_point, log_prior
from zoo.models.likelihoods import GaussianLikelihood
from zoo.models.mlp import BayesianMLP
from zoo.spec.sections.inference import MAPMethod, MLEMethod

SIGMA = 0.5


def _problem(n: int = 40, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 2)) @ np.array([[1.0, 0.8], [0.0, 0.6]]) + 1.0
    y = x @ np.array([0.7, -1.2]) + 0.3 + SIGMA * rng.normal(size=n)
    z = np.hstack([x, np.ones((n, 1))])
    prec = np.eye(3) + z.T @ z / SIGMA**2
    post_mean = np.linalg.solve(prec, z.T @ y / SIGMA**2)
    lstsq = np.linalg.lstsq(z, y, rcond=None)[0]
    return (
        torch.tensor(x, dtype=torch.float32),
        torch.tensor(y, dtype=torch.float32),
        post_mean,
        lstsq,
    )


def _zeros():
    return {"layer0.weight": torch.zeros(1, 2), "layer0.bias": torch.zeros(1)}


def _flat(params) -> np.ndarray:
    return np.concatenate([params["layer0.weight"].numpy().ravel(), params["layer0.bias"].numpy()])


def _gen() -> torch.Generator:
    return torch.Generator().manual_seed(0)


def test_map_is_the_posterior_mean_and_mle_is_least_squares() -> None:
    x, y, post_mean, lstsq = _problem()
    model = BayesianMLP(2, [], GaussianLikelihood(SIGMA))
    kw = dict(steps=800, lr=0.1, lr_decay=0.001)
    map_ = fit_point(
        model, x, y, _zeros(), MAPMethod(name="m", kind="map", **kw), gen=_gen(), seed=0, prior=True
    )
    mle = fit_point(
        model,
        x,
        y,
        _zeros(),
        MLEMethod(name="e", kind="mle", **kw),
        gen=_gen(),
        seed=0,
        prior=False,
    )
    assert np.abs(post_mean - lstsq).max() > 0.02  # the prior matters at n = 40
    np.testing.assert_allclose(_flat(map_.posterior.params), post_mean, atol=3e-3)
    np.testing.assert_allclose(_flat(mle.posterior.params), lstsq, atol=3e-3)
    assert map_.stats["best_step"] == 800 and len(map_.history["val_nll"]) == 0
    assert map_.stats["n_var_params"] == 3 and map_.predictive_draws == 1
    assert isinstance(map_.posterior, PointPosterior)
    one = map_.posterior.sample(1, seed=0)
    assert torch.equal(one["layer0.weight"][0], map_.posterior.params["layer0.weight"])


def test_log_prior_matches_torch() -> None:
    model = BayesianMLP(3, [4], GaussianLikelihood(None, prior_scale=2.0))
    g = torch.Generator().manual_seed(0)
    params = {
        k: torch.randn(s, generator=g)
        for k, s in [
            ("layer0.weight", (4, 3)),
            ("layer0.bias", (4,)),
            ("layer1.weight", (1, 4)),
            ("layer1.bias", (1,)),
        ]
    }
    params["noise"] = torch.tensor(0.7)
    want = sum(
        torch.distributions.Normal(0.0, 1.0).log_prob(v).sum()
        for k, v in params.items()
        if k != "noise"
    )
    want = want + torch.distributions.HalfNormal(2.0).log_prob(params["noise"])
    torch.testing.assert_close(log_prior(model, params), want)


def test_early_stopping_keeps_the_best_validation_estimate() -> None:
    # a wide net on 20 noisy points overfits; early stopping must return the estimate of the
    # best validation NLL, which is better than the last iterate's
    rng = np.random.default_rng(1)
    x = torch.tensor(rng.uniform(-2, 2, size=(40, 1)), dtype=torch.float32)
    y = torch.sin(2 * x[:, 0]) + 0.3 * torch.tensor(rng.normal(size=40), dtype=torch.float32)
    model = BayesianMLP(1, [64, 64], GaussianLikelihood(0.3), act="tanh")
    g = torch.Generator().manual_seed(0)
    init = {}
    for i, (fi, fo) in enumerate(zip(model.dims[:-1], model.dims[1:], strict=True)):
        init[f"layer{i}.weight"] = torch.randn(fo, fi, generator=g) / fi**0.5
        init[f"layer{i}.bias"] = torch.zeros(fo)
    val = (x[20:], y[20:])
    method = MLEMethod(name="es", kind="mle", steps=3000, lr=0.01, patience=5, eval_every=20)
    res = fit_point(
        model,
        x[:20],
        y[:20],
        init,
        method,
        gen=_gen(),
        seed=0,
        prior=False,
        stopping=EarlyStopping(*val, method.patience, method.eval_every),
    )
    assert res.stats["best_step"] < 3000 and len(res.losses) < 3000  # it stopped early
    val_nll = res.history["val_nll"]
    best = val_nll.min()
    got = -model.log_likelihood(*val, res.posterior.params).mean().item()
    np.testing.assert_allclose(got, best, rtol=1e-5)
    assert val_nll[-1] > best  # the last evaluations were worse: that is why it stopped
