"""Shared fixtures."""

from __future__ import annotations

from pathlib import Path

import pyro
import pytest

ROOT = Path(__file__).resolve().parent.parent
SPECS = ROOT / "specs"


@pytest.fixture(autouse=True)
def _clean_pyro():
    """Every test starts with an empty Pyro param store."""
    pyro.clear_param_store()
    yield
    pyro.clear_param_store()


@pytest.fixture
def tiny_spec(tmp_path: Path) -> Path:
    """A spec small enough to run end to end in seconds."""
    p = tmp_path / "tiny.yaml"
    p.write_text(
        """\
name: tiny
description: a tiny two-moons sweep for tests
seed: 0
data: {kind: two_moons, n_train: 200, n_test: 200, noise: 0.1}
model: {kind: mlp, depth: 1, param_budget: 200, activation: relu}
prior: {kind: normal, scale: 1.0}
likelihood: {kind: categorical}
inference:
  - name: mfvi
    kind: svi
    guide: {kind: mean_field, init_scale: 0.001}
    pretrain_epochs: 5
    steps: 60
    batch_size: 50
    lr: 0.02
    predictive_samples: 20
sweep:
  model.depth: [1, 2]
  seed: [0, 1]
"""
    )
    return p
