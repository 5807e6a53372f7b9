"""A cell's memory, estimated at validation: refused past the machine's, warned past half."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import specs
from tests.conftest import SPECS
from zoo.cli import main
from zoo.execution.preflight import check_widths
from zoo.execution.usage import UsageError
from zoo.spec import load_spec
from zoo.spec.memory import DataShape, estimate

GB = 10**9

#: ChEES at width 100,000 on two moons: D = 500,002 weights and biases; the streamed
#: moments alone are 18 float64 D x D matrices (8 groups' co-moments and covariances, the
#: pooled ones), 36 TB.
HUGE = {
    "data": specs.two_moons(n_train=20, n_test=20),
    "model": specs.mlp(depth=1, width=100_000),
    "inference": [specs.chees("chees", warmup=10, draws=10, keep_draws=10)],
}


def test_a_cell_that_needs_terabytes_is_refused_naming_the_fields(tmp_path: Path, capsys) -> None:
    spec = specs.load(tmp_path, **HUGE)
    cell = spec.cells()[0]
    e = estimate(spec, cell.method, cell.studies, DataShape(20, 20, 2, 2, 2))
    d = 3 * 100_000 + 100_001 * 2
    assert e.terms["dense matrices"] == 8 * 18 * d * d  # the formula of zoo.spec.memory
    assert e.fields == ["inference.chees.stream_groups", "model.width"]
    with pytest.raises(UsageError, match=r"needs at least 36.0 TB .* shrink inference.chees"):
        check_widths(spec, memory=64 * GB)
    capsys.readouterr()
    assert main(["validate", str(tmp_path / "s.yaml")]) == 2  # this machine's memory
    err = capsys.readouterr().err
    assert "36.0 TB (dense matrices 36.0 TB)" in err and "model.width" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_pointwise_values_of_a_large_test_set_are_counted(tmp_path: Path) -> None:
    """An svi cell saving 1000 draws on a million training and test points: 4 pointwise
    groups (4 bytes a value, each value held twice), the chains' and the predictive
    probabilities."""
    data = specs.teacher(n_train=1000, n_test=10)
    spec = specs.load(
        tmp_path,
        data=data,
        likelihood=specs.section("gaussian", noise=0.1),
        inference=[specs.svi("mf", steps=1, predictive_samples=1000, save_draws=True)],
    )
    cell = spec.cells()[0]
    e = estimate(spec, cell.method, cell.studies, DataShape(10**6, 10**6, 5, 1))
    assert e.terms["pointwise values"] == 2 * 1000 * 2 * 10**6 * 4 * 4 + 1000 * 10**6 * 4
    assert e.terms["predictive"] == 1000 * 10**6 * 4
    assert "inference.mf.predictive_samples" in e.fields


def test_a_cell_past_half_the_memory_is_warned_with_its_estimate(tmp_path: Path, capsys) -> None:
    spec = specs.load(tmp_path, **HUGE)
    check_widths(spec, memory=50 * 10**12)  # 36 TB of 50: accepted, with a warning
    err = capsys.readouterr().err
    assert "warning: cell chees_" in err and "needs at least 36.0 TB" in err
    assert "more than 50% of this machine's 50.0 TB" in err


def test_the_shipped_specs_fit_a_16_gb_machine(capsys) -> None:
    """Every shipped spec passes on 16 GB without a warning; IDX data (not on every
    machine) is estimated at MNIST's sizes."""
    for path in sorted(SPECS.glob("*.yaml")):
        spec = load_spec(path)
        check_widths(spec, memory=16 * GB)
        assert "needs at least" not in capsys.readouterr().err, path.name
        if spec.simulation is None and spec.data.kind == "idx":
            for cell in spec.cells():
                d = cell.spec.data
                n_train = d.n_train or 60_000 - d.validation
                shape = DataShape(n_train, min(d.n_test or 10_000, 10_000), 784, 10, 10)
                assert estimate(cell.spec, cell.method, cell.studies, shape).total < 8 * GB


def test_a_tune_grid_value_is_estimated_too(tmp_path: Path) -> None:
    """The main cells keep the spec's width until tuned; the tuning cells have the grid's."""
    spec = specs.load(
        tmp_path,
        data=specs.two_moons(n_train=40, n_test=20),
        model=specs.mlp(depth=1, width=8),
        inference=[specs.chees("chees", warmup=10, draws=10, keep_draws=10)],
        tune={"grid": {"model.width": [8, 100_000]}},
    )
    with pytest.raises(UsageError, match=r"cell chees_tune=0.2_width=100000_.* 36.0 TB"):
        check_widths(spec, memory=64 * GB)


def test_a_grid_value_whose_network_cannot_be_built_is_named(tmp_path: Path, capsys) -> None:
    spec = specs.write_spec(
        tmp_path,
        data=specs.two_moons(n_train=40, n_test=20),
        model=specs.mlp(depth=2, param_budget=500),
        tune={"grid": {"model.param_budget": [500, 3]}},
    )
    assert main(["validate", str(spec)]) == 2
    err = capsys.readouterr().err
    assert "param_budget=3_" in err and "param_budget 3 is too small" in err
    assert "Traceback" not in err


def test_draws_a_study_extends_are_counted_to_its_cap(tmp_path: Path) -> None:
    """NUTS holds every draw: with the price of mean field's stopping rule, up to its
    max_draws a chain, and that field is named when the draws are the largest term."""
    study = specs.section(
        "price_of_mean_field",
        gaussian_fit={"cov": "empirical"},
        kl_target_draws=100,
        max_draws=4000,
    )
    spec = specs.load(
        tmp_path,
        model=specs.mlp(depth=1, width=2000),
        inference=[specs.nuts("nuts", warmup=5, draws=50, chains=4, vectorize_chains=True)],
        studies=[study],
    )
    cell = spec.cells()[0]
    e = estimate(spec, cell.method, cell.studies, DataShape(20, 20, 2, 2, 2))
    d = 3 * 2000 + 2001 * 2
    assert e.terms["weight draws"] == 4 * 4000 * d * 4
    assert e.fields == ["inference.nuts.chains", "studies[0].max_draws", "model.width"]
    (tmp_path / "plain").mkdir()
    plain = specs.load(
        tmp_path / "plain",
        model=specs.mlp(depth=1, width=2000),
        inference=[specs.nuts("nuts", warmup=5, draws=50, chains=4)],
    )
    cell = plain.cells()[0]
    e = estimate(plain, cell.method, cell.studies, DataShape(20, 20, 2, 2, 2))
    assert e.terms["weight draws"] == 4 * 50 * d * 4
