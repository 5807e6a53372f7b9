"""The batched samplers' metric and trajectory floor in the spec: what goes together."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests import specs
from tests.zoo.spec._helpers import errors
from zoo.spec.sections.inference import ChEESMethod, HMCMethod, NUTSMethod


def _spec(**nuts) -> dict:
    fields = {"warmup": 5, "draws": 10, "chains": 2, "vectorize_chains": True, **nuts}
    return specs.spec(
        data=specs.two_moons(n_train=50),
        model=specs.mlp(depth=1, width=4),
        inference=[specs.nuts(**fields)],
    )


@pytest.mark.parametrize(
    "fields",
    [
        {"mass_matrix": "dense"},
        {"mass_matrix": "fisher_diag"},
        {"mass_matrix": "fisher_low_rank", "min_trajectory": "prior"},
        {"min_trajectory": 2.5},
    ],
)
def test_batched_settings_load(tmp_path: Path, fields: dict) -> None:
    spec = specs.load(tmp_path, _spec(**fields))
    method = spec.inference[0]
    for k, v in fields.items():
        assert getattr(method, k) == v


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"mass_matrix": "block"}, ["mass_matrix: block", "vectorize_chains: false"]),
        (
            {"mass_matrix": "fisher_diag", "vectorize_chains": False},
            ["mass_matrix: fisher_diag is pooled", "vectorize_chains: true"],
        ),
        (
            {"mass_matrix": "fisher_low_rank", "chains": 1},
            ["mass_matrix: fisher_low_rank", "chains >= 2"],
        ),
        (
            {"min_trajectory": "prior", "vectorize_chains": False},
            ["min_trajectory", "vectorize_chains: true", "remove min_trajectory"],
        ),
        ({"min_trajectory": 0}, ["min_trajectory (0.0) must be > 0"]),
        ({"min_trajectory": "long"}, ["min_trajectory", "neither a number nor 'prior'"]),
    ],
)
def test_bad_combinations_name_the_field_and_the_fix(tmp_path: Path, fields, words) -> None:
    msgs = errors(specs.write_spec(tmp_path, _spec(**fields)))
    assert len(msgs) == 1, msgs
    assert "inference[0]" in msgs[0], msgs
    for w in words:
        assert w in msgs[0], msgs


def test_hmc_pooled_metric_needs_adaptation() -> None:
    HMCMethod(name="h", kind="hmc", adapt_mass_matrix=True, mass_matrix="dense")
    with pytest.raises(ValueError, match="adapt_mass_matrix: true"):
        HMCMethod(name="h", kind="hmc", mass_matrix="dense")


def test_every_new_field_is_described() -> None:
    for cls in (NUTSMethod, HMCMethod, ChEESMethod):
        assert cls.model_fields["min_trajectory"].description
    for cls in (NUTSMethod, HMCMethod):
        assert cls.model_fields["mass_matrix"].description
    assert ChEESMethod(name="c", kind="chees", min_trajectory="prior").min_trajectory == "prior"
    with pytest.raises(ValueError, match="neither a number nor 'prior'"):
        ChEESMethod(name="c", kind="chees", min_trajectory="long")


def test_validate_exits_2_with_the_message(tmp_path: Path) -> None:
    p = specs.write_spec(tmp_path, _spec(min_trajectory=1.0, vectorize_chains=False))
    r = subprocess.run(
        [sys.executable, "-m", "zoo.cli", "validate", str(p)], capture_output=True, text=True
    )
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "min_trajectory is a setting of the batched kernels" in r.stderr
