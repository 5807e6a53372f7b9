"""Shared fixtures."""

from __future__ import annotations

from pathlib import Path

import pyro
import pytest

from tests import specs
from tests.arviz_facing import touches_arviz

ROOT = Path(__file__).resolve().parent.parent
SPECS = ROOT / "specs"


def pytest_collection_modifyitems(config, items) -> None:
    """Mark ``arviz`` every test whose module imports ArviZ or an ArviZ-facing module (the
    rule: ``tests/arviz_facing.py``); CI runs those on the second ArviZ line."""
    for item in items:
        if touches_arviz(item.path):
            item.add_marker(pytest.mark.arviz)


@pytest.fixture(autouse=True)
def _clean_pyro():
    """Every test starts with an empty Pyro param store."""
    pyro.clear_param_store()
    yield
    pyro.clear_param_store()


@pytest.fixture
def without_h5netcdf(monkeypatch) -> None:
    """A Python that cannot find h5netcdf (the library that writes the ArviZ files):
    :func:`importlib.util.find_spec` answers None for it, as for a missing package."""
    import importlib.util as iu

    real = iu.find_spec
    monkeypatch.setattr(
        iu, "find_spec", lambda name, *a, **k: None if name == "h5netcdf" else real(name, *a, **k)
    )


@pytest.fixture
def tiny_spec(tmp_path: Path) -> Path:
    """A spec small enough to run end to end in seconds (4 cells: depth 1, 2 x seed 0, 1)."""
    return specs.write_spec(
        tmp_path,
        file="tiny.yaml",
        name="tiny",
        description="a tiny two-moons sweep for tests",
        seed=0,
        data=specs.two_moons(n_train=200, n_test=200, noise=0.1),
        model=specs.mlp(depth=1, param_budget=200, activation="relu"),
        prior=specs.section("normal", scale=1.0),
        likelihood=specs.section("categorical"),
        inference=[
            specs.svi(
                "mfvi",
                guide={"kind": "mean_field", "init_scale": 0.001},
                pretrain_epochs=5,
                steps=60,
                batch_size=50,
                lr=0.02,
                predictive_samples=20,
            )
        ],
        sweep={"model.depth": [1, 2], "seed": [0, 1]},
    )
