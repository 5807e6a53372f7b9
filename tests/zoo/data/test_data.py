"""Data loaders on real data (sklearn's two moons and digits, CSV files), the loader table
and the one trip of a data set into torch."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import zoo.data
from tests import specs
from zoo.data.csv import load_csv
from zoo.data.sklearn_sets import load_digits, load_two_moons
from zoo.runtime import Runtime
from zoo.spec.sections.data import CsvData, DigitsData, TwoMoonsData


def test_two_moons_seeded_shapes_and_noise() -> None:
    spec = TwoMoonsData(kind="two_moons", n_train=300, n_test=100, noise=0.1)
    a, b, c = load_two_moons(spec, 0), load_two_moons(spec, 0), load_two_moons(spec, 1)
    assert a.x_train.shape == (300, 2) and a.x_test.shape == (100, 2)
    assert a.x_train.dtype == np.float32 and a.y_train.dtype == np.int64
    assert a.n_classes == 2 and set(np.unique(a.y_train)) == {0, 1}
    np.testing.assert_array_equal(a.x_train, b.x_train)
    assert not np.array_equal(a.x_train, c.x_train)
    assert not np.array_equal(a.x_train[:100], a.x_test)  # independent draws
    fixed = TwoMoonsData(kind="two_moons", n_train=50, seed=7)
    np.testing.assert_array_equal(
        load_two_moons(fixed, 0).x_train, load_two_moons(fixed, 1).x_train
    )


def test_digits_split() -> None:
    ds = load_digits(DigitsData(kind="digits", test_fraction=0.25), 0)
    assert ds.x_train.shape[1] == 64 and ds.n_classes == 10
    assert len(ds.x_train) + len(ds.x_test) == 1797
    assert abs(len(ds.x_test) - 0.25 * 1797) <= 1
    assert ds.x_train.min() >= 0 and ds.x_train.max() <= 1
    assert set(np.unique(ds.y_test)) == set(range(10))  # stratified


def _csv(tmp_path: Path) -> Path:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, 2)) * [1.0, 10.0] + [0.0, 5.0]
    y = 3 * x[:, 0] + 100
    p = tmp_path / "d.csv"
    p.write_text("a;b;target\n" + "\n".join(f"{u};{v};{t}" for (u, v), t in zip(x, y, strict=True)))
    return p


def test_csv_regression_standardized(tmp_path: Path) -> None:
    p = _csv(tmp_path)
    spec = CsvData.model_validate(
        {"kind": "csv", "path": str(p), "target": "target", "delimiter": ";", "test_fraction": 0.25}
    )
    ds = load_csv(spec, 0)
    assert ds.x_train.shape == (30, 2) and ds.x_test.shape == (10, 2) and ds.n_classes == 0
    np.testing.assert_allclose(ds.x_train.mean(0), 0, atol=1e-5)
    np.testing.assert_allclose(ds.x_train.std(0), 1, atol=1e-5)
    np.testing.assert_allclose(ds.y_train.mean(), 0, atol=1e-5)
    assert ds.y_scale > 1 and ds.y_shift == pytest.approx(100, abs=5)


def test_csv_errors_name_the_field(tmp_path: Path) -> None:
    p = _csv(tmp_path)
    spec = CsvData.model_validate(
        {"kind": "csv", "path": str(p), "target": "price", "delimiter": ";"}
    )
    with pytest.raises(ValueError, match="data.target: .* has no column 'price'"):
        load_csv(spec, 0)


def test_csv_path_relative_to_spec(tmp_path: Path) -> None:
    _csv(tmp_path)
    spec = specs.load(
        tmp_path,
        name="c",
        data=specs.section("csv", path="d.csv", target="target", delimiter=";"),
        model=specs.mlp(depth=0),
        likelihood=specs.section("gaussian", noise=0.1),
        inference=[specs.svi("m", steps=1)],
    )
    assert Path(spec.data.path).is_absolute()
    assert zoo.data.load(spec.data, spec.seed).x_train.shape[1] == 2


def test_load_dispatches_on_the_section_class() -> None:
    spec = TwoMoonsData(kind="two_moons", n_train=20, n_test=10)
    a, b = zoo.data.load(spec, 3), load_two_moons(spec, 3)
    for x, y in zip(a, b, strict=True):
        if isinstance(x, np.ndarray):
            np.testing.assert_array_equal(x, y)
    zoo.data.check(spec)  # no files to check: nothing happens
    with pytest.raises(TypeError, match="no data loader for str"):
        zoo.data.load("two_moons", 0)


def test_to_torch_once_through_the_runtime() -> None:
    import torch

    ds = load_two_moons(TwoMoonsData(kind="two_moons", n_train=30, n_test=10), 0)
    t = ds.to_torch(Runtime.cpu())
    assert t.x_train.dtype == torch.float32 and t.y_train.dtype == torch.int64
    assert torch.equal(t.x_train, torch.as_tensor(ds.x_train))  # the numbers of before
    assert torch.equal(t.y_test, torch.as_tensor(ds.y_test))
    assert t.x_val is None and t.true_params is None
    t64 = ds.to_torch(Runtime.cpu(torch.float64))
    assert t64.x_test.dtype == torch.float64 and t64.y_test.dtype == torch.int64
    assert ds.task == "classification" and ds.out_dim == 2
