"""The compiled Pyro model: site names and shapes, priors, the pure apply(), and the
warnings about degenerate networks."""

from __future__ import annotations

import math

import pyro
import pytest
import torch

import zoo.data
import zoo.models
from tests.conftest import SPECS
from zoo.models import BayesianLeNet, BayesianNet
from zoo.models.likelihoods import CategoricalLikelihood, GaussianLikelihood
from zoo.models.mlp import BayesianMLP
from zoo.models.priors import he_prior
from zoo.spec.load import load_spec


def _trace(model, x, y, n_total=None):
    return pyro.poutine.trace(model).get_trace(x, y, n_total)


def _latent(tr):
    return {
        n: s
        for n, s in tr.nodes.items()
        if s["type"] == "sample" and not s["is_observed"] and hasattr(s["fn"], "batch_shape")
    }


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


def test_priors_normal_and_he(tiny_spec) -> None:
    model = BayesianMLP(4, [10], CategoricalLikelihood(2), weight_prior=he_prior())
    tr = _trace(model, torch.randn(3, 4), torch.zeros(3, dtype=torch.long))
    w0 = tr.nodes["layer0.weight"]["fn"].base_dist
    w1 = tr.nodes["layer1.weight"]["fn"].base_dist
    assert torch.allclose(w0.scale, torch.tensor(math.sqrt(2 / 4)))
    assert torch.allclose(w1.scale, torch.tensor(math.sqrt(2 / 10)))
    spec = load_spec(
        tiny_spec,
        [
            "prior={kind: normal, scale: 0.5, bias: {kind: normal, scale: 2.0}}",
            "sweep.seed=[0]",
            "sweep.model.depth=[2]",
        ],
    )
    cell = spec.cells()[0]
    m = zoo.models.build(cell.spec, zoo.data.load(cell.spec.data, cell.spec.seed))
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
    params = {
        n: torch.ones_like(s["value"])
        for n, s in _latent(_trace(model, x, torch.zeros(1, dtype=torch.long))).items()
    }
    out = model.apply(x, params)
    pre = torch.tensor(2.0)  # -1 + 2 + bias 1
    h = {"relu": pre, "leaky_relu": pre, "tanh": torch.tanh(pre), "linear": pre}[act]
    assert torch.allclose(out, (3 * h + 1).expand(1, 2))
    x2 = torch.tensor([[-3.0, 0.0]])  # pre-activation -2
    out2 = model.apply(x2, params)
    h2 = {"relu": 0.0, "leaky_relu": -0.4, "tanh": math.tanh(-2.0), "linear": -2.0}[act]
    assert torch.allclose(out2, torch.full((1, 2), 3 * h2 + 1), atol=1e-6)


@pytest.mark.parametrize(
    "net",
    [
        lambda: BayesianMLP(5, [7, 3], CategoricalLikelihood(4)),
        lambda: BayesianMLP(5, [], GaussianLikelihood(None)),
        lambda: BayesianLeNet(36, CategoricalLikelihood(3), conv=(2,), dense=5, pool=False),
    ],
    ids=["mlp", "linear", "lenet"],
)
def test_networks_are_bayesian_nets_with_consistent_sites(net) -> None:
    net = net()
    assert isinstance(net, BayesianNet)
    info = net.site_info()
    assert list(info) == [s for pair in net.layer_sites() for s in pair]
    assert set(info) == set(net.prior_params)
    assert net.num_params == sum(math.prod(shape) for shape, _ in info.values())
    x = torch.randn(3, net.dims[0])
    y = torch.zeros(3, dtype=torch.long) if net.likelihood.out_dim > 1 else torch.randn(3)
    sites = _latent(_trace(net, x, y))
    for site, (shape, _) in info.items():
        assert tuple(sites[site]["value"].shape) == shape


def test_mlp_site_info_fan_ins() -> None:
    info = BayesianMLP(5, [7], CategoricalLikelihood(2)).site_info()
    assert info == {
        "layer0.weight": ((7, 5), 5),
        "layer0.bias": ((7,), 5),
        "layer1.weight": ((2, 7), 7),
        "layer1.bias": ((2,), 7),
    }


def test_build_errors_name_the_field(tiny_spec) -> None:
    spec = load_spec(tiny_spec, ["sweep.seed=[0]", "sweep.model.depth=[2]"])
    spec = spec.cells()[0].spec
    ds = zoo.data.load(spec.data, spec.seed)
    small = spec.model_copy(
        update={"model": spec.model.model_copy(update={"width": None, "param_budget": 3})}
    )
    with pytest.raises(ValueError, match="model.param_budget"):
        zoo.models.build(small, ds)
    with pytest.raises(TypeError, match="no builder for str"):
        zoo.models.build(spec.model_copy(update={"model": "mlp"}), ds)


# --------------------------------------------------------------------------- degenerate networks


def _cell(spec_path, overrides):
    spec = load_spec(spec_path, overrides)
    return spec.cells()[0]


def test_width_warnings_on_a_budget_too_small_for_digits(tiny_spec) -> None:
    # param_budget 100 on digits: width 1 (accuracy 0.31), below 3, the classes and inputs
    cell = _cell(
        tiny_spec,
        [
            "data={kind: digits}",
            "model.param_budget=100",
            "sweep.model.depth=[1]",
            "sweep.seed=[0]",
        ],
    )
    ds = zoo.data.load(cell.spec.data, 0)
    net = zoo.models.build(cell.spec, ds)
    assert net.dims == [64, 1, 10]  # the warnings' arithmetic is the network's
    (w,) = zoo.models.width_warnings(cell, (ds.in_dim, ds.n_classes))
    assert w.startswith(
        f"cell {cell.cell_id}: hidden width 1 (from model.param_budget 100 at "
        "depth 1) is below 3, the 10 classes and the 64 inputs"
    )
    assert "raise model.param_budget" in w


def test_width_warnings_on_deep_two_moons_at_the_shipped_budget() -> None:
    # the 2-logit network at the shipped budget, depth 8: eight ReLU layers of width 2 (with
    # the default's one logit the width is 3: no warning, checked below)
    over = ["sweep.model.depth=[1, 8]", "likelihood={kind: categorical}"]
    spec = load_spec(SPECS / "two_moons_depth.yaml", over)
    by_depth = {c.spec.model.depth: c for c in spec.cells()}
    ds = zoo.data.load(by_depth[8].spec.data, 0)
    assert zoo.models.build(by_depth[8].spec, ds).dims == [2, *[2] * 8, 2]
    (w,) = zoo.models.width_warnings(by_depth[8], (2, 2))
    assert "hidden width 2 (from model.param_budget 100 at depth 8) is below 3:" in w
    assert zoo.models.width_warnings(by_depth[1], (2, 2)) == []  # width 19
    one = load_spec(SPECS / "two_moons_depth.yaml", ["sweep.model.depth=[8]"]).cells()[0]
    assert zoo.models.build(one.spec, ds).dims == [2, *[3] * 8, 1]
    assert zoo.models.width_warnings(one, (2, 2)) == []


@pytest.mark.parametrize(
    "name",
    [
        "two_moons_depth.yaml",
        "digits_depth.yaml",
        "overpruning_depth.yaml",
        "ktied_mlp_fashion.yaml",
    ],
)
def test_shipped_networks_give_no_warning(name: str) -> None:
    shapes = {"two_moons": (2, 2), "digits": (64, 10), "uci": (13, 0), "idx": (784, 10)}
    for cell in load_spec(SPECS / name).cells():
        assert zoo.models.width_warnings(cell, shapes[cell.spec.data.kind]) == [], cell


def test_networks_that_cannot_be_built_are_refused_naming_the_field(tiny_spec) -> None:
    cell = _cell(tiny_spec, ["model.param_budget=5", "sweep.model.depth=[1]"])
    with pytest.raises(ValueError, match=r"^model.param_budget: .*width 1 already needs 7"):
        zoo.models.width_warnings(cell, (2, 2))
    cell = _cell(tiny_spec, ["model.param_budget=100000000", "sweep.model.depth=[1]"])
    with pytest.raises(ValueError, match=r"^model.param_budget: .* at most 100000 units"):
        zoo.models.width_warnings(cell, (2, 2))
    lenet = ["data={kind: digits}", "model={kind: lenet, dense: 4}", "sweep.model.depth=null"]
    cell = _cell(tiny_spec, lenet)
    with pytest.raises(ValueError, match=r"^model: 8x8 images shrink to nothing"):
        zoo.models.width_warnings(cell, (64, 10))
    (w,) = zoo.models.width_warnings(cell, (784, 10))
    assert "dense layer of 4 units (model.dense) is below the 10 classes" in w


def test_cli_validate_and_run_warn_and_refuse(tiny_spec, tmp_path, capsys) -> None:
    from zoo.cli import main

    digits = ["--set", "data={kind: digits}", "--set", "sweep.model.depth=[1]"]
    assert main(["validate", str(tiny_spec), *digits, "--set", "model.param_budget=100"]) == 0
    out = capsys.readouterr()
    assert "ok (2 cells)" in out.out
    lines = out.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("warning: cell mfvi_depth=1_seed=0_")
    assert lines[0].endswith("lower model.depth (and 1 more cell with this network)")
    assert main(["validate", str(tiny_spec), *digits, "--set", "model.param_budget=50"]) == 2
    err = capsys.readouterr().err
    assert "model.param_budget: param_budget 50 is too small for depth 1" in err
    assert "Traceback" not in err
    # zoo run refuses it before any cell runs
    out = tmp_path / "run"
    assert (
        main(
            [
                "run",
                str(tiny_spec),
                *digits,
                "--set",
                "model.param_budget=50",
                "--out",
                str(out),
                "--no-progress",
            ]
        )
        == 2
    )
    assert "model.param_budget: param_budget 50" in capsys.readouterr().err
    assert not (out / "cells").exists() or not any((out / "cells").iterdir())
