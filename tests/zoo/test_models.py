"""The compiled Pyro model: site names and shapes, priors, and the pure apply()."""

from __future__ import annotations

import math

import pyro
import pytest
import torch

from zoo.models.mlp import BayesianMLP, CategoricalLikelihood, GaussianLikelihood, he_prior
from zoo.run.cell import build_data, build_model
from zoo.spec.load import load_spec


def _trace(model, x, y, n_total=None):
    return pyro.poutine.trace(model).get_trace(x, y, n_total)


def _latent(tr):
    return {n: s for n, s in tr.nodes.items()
            if s["type"] == "sample" and not s["is_observed"] and hasattr(s["fn"], "batch_shape")}  # fmt: skip


@pytest.mark.parametrize("depth", [0, 1, 3])
def test_site_names_and_shapes(depth: int) -> None:
    model = BayesianMLP(5, [7] * depth, CategoricalLikelihood(3))
    x, y = torch.randn(4, 5), torch.randint(0, 3, (4,))
    sites = _latent(_trace(model, x, y))
    dims = [5, *[7] * depth, 3]
    expected = {}
    for i in range(depth + 1):
        expected[f"layer{i}.weight"] = (dims[i + 1], dims[i])
        expected[f"layer{i}.bias"] = (dims[i + 1],)
    assert {n: tuple(s["value"].shape) for n, s in sites.items()} == expected
    assert model.num_params == sum((a + 1) * b for a, b in zip(dims[:-1], dims[1:], strict=True))


def test_priors_normal_and_he() -> None:
    model = BayesianMLP(4, [10], CategoricalLikelihood(2), weight_prior=he_prior())
    tr = _trace(model, torch.randn(3, 4), torch.zeros(3, dtype=torch.long))
    w0 = tr.nodes["layer0.weight"]["fn"].base_dist
    w1 = tr.nodes["layer1.weight"]["fn"].base_dist
    assert torch.allclose(w0.scale, torch.tensor(math.sqrt(2 / 4)))
    assert torch.allclose(w1.scale, torch.tensor(math.sqrt(2 / 10)))
    spec = load_spec(
        "specs/two_moons_depth.yaml",
        ["prior={kind: normal, scale: 0.5, bias: {kind: normal, scale: 2.0}}", "sweep.seed=[0]",
         "sweep.model.depth=[2]"],
    )  # fmt: skip
    cell = spec.cells()[0]
    m = build_model(cell.spec, build_data(cell.spec))
    assert m.prior_params["layer1.weight"] == (0.0, 0.5)
    assert m.prior_params["layer1.bias"] == (0.0, 2.0)


def test_data_plate_scales_minibatch_likelihood() -> None:
    model = BayesianMLP(2, [3], CategoricalLikelihood(2))
    x, y = torch.randn(10, 2), torch.randint(0, 2, (10,))
    tr = _trace(model, x, y, n_total=1000)
    tr.compute_log_prob()
    obs = tr.nodes["obs"]
    assert obs["scale"] == pytest.approx(100.0)
    assert obs["value"].shape == (10,)


def test_apply_matches_forward_and_batches() -> None:
    torch.manual_seed(0)
    model = BayesianMLP(3, [4, 4], GaussianLikelihood(0.3), act="tanh")
    x, y = torch.randn(6, 3), torch.randn(6)
    tr = _trace(model, x, y)
    params = {n: s["value"] for n, s in _latent(tr).items()}
    out = tr.nodes["_RETURN"]["value"]
    assert torch.allclose(model.apply(x, params), out, atol=1e-6)
    # batched over S draws: stack the same draw twice
    stacked = {k: torch.stack([v, v]) for k, v in params.items()}
    assert torch.allclose(model.apply(x, stacked)[1], out, atol=1e-6)
    ll = model.log_likelihood(x, y, params)
    tr.compute_log_prob()
    assert torch.allclose(ll, tr.nodes["obs"]["log_prob"], atol=1e-6)


def test_learned_noise_site() -> None:
    model = BayesianMLP(2, [], GaussianLikelihood(None, prior_scale=0.5))
    tr = _trace(model, torch.randn(5, 2), torch.randn(5))
    assert "noise" in _latent(tr)
    assert tr.nodes["noise"]["fn"].scale == pytest.approx(0.5)


@pytest.mark.parametrize("act", ["relu", "leaky_relu", "tanh", "linear"])
def test_activations(act: str) -> None:
    model = BayesianMLP(2, [3], CategoricalLikelihood(2), act=act, negative_slope=0.2)
    x = torch.tensor([[-1.0, 2.0]])
    params = {n: torch.ones_like(s["value"]) for n, s in
              _latent(_trace(model, x, torch.zeros(1, dtype=torch.long))).items()}  # fmt: skip
    out = model.apply(x, params)
    pre = torch.tensor(2.0)  # -1 + 2 + bias 1
    h = {"relu": pre, "leaky_relu": pre, "tanh": torch.tanh(pre), "linear": pre}[act]
    assert torch.allclose(out, (3 * h + 1).expand(1, 2))
    x2 = torch.tensor([[-3.0, 0.0]])  # pre-activation -2
    out2 = model.apply(x2, params)
    h2 = {"relu": 0.0, "leaky_relu": -0.4, "tanh": math.tanh(-2.0), "linear": -2.0}[act]
    assert torch.allclose(out2, torch.full((1, 2), 3 * h2 + 1), atol=1e-6)
