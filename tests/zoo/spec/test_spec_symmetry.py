"""A sampler's ``symmetry_moves``: off by default, refused with the field's name where the
network's hidden units have no such symmetry or the chains do not run as one batch."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests import specs
from tests.zoo.spec._helpers import errors, write
from zoo.spec import load_spec
from zoo.spec.sections.inference import ChEESMethod, NUTSMethod


def _spec(model: dict, **moves) -> dict:
    nuts = specs.nuts(warmup=5, draws=10, chains=2, vectorize_chains=True, **moves)
    return specs.spec(
        data=specs.two_moons(n_train=50),
        model=model,
        inference=[specs.svi("mfvi", steps=5), nuts],
        studies=[],
    )


def test_off_by_default_and_loads_where_the_units_have_it(tmp_path: Path) -> None:
    assert NUTSMethod(name="n", kind="nuts").symmetry_moves == "off"
    assert ChEESMethod(name="c", kind="chees").symmetry_moves == "off"
    for act, moves in [("relu", "auto"), ("leaky_relu", "rescale"), ("tanh", "sign")]:
        model = specs.mlp(depth=2, width=3, activation=act)
        spec = specs.load(tmp_path, _spec(model, symmetry_moves=moves))
        assert spec.method("nuts").symmetry_moves == moves


@pytest.mark.parametrize(
    ("model", "moves", "words"),
    [
        (
            {"kind": "mlp", "depth": 1, "width": 4, "activation": "tanh"},
            "rescale",
            "mlp network of depth 1 with tanh units has sign",
        ),
        ({"kind": "mlp", "depth": 2, "width": 4}, "sign", "with relu units has rescale"),
        ({"kind": "mlp", "depth": 0}, "auto", "of depth 0 with relu units has none"),
        ({"kind": "lenet"}, "auto", "a lenet network has none"),
    ],
)
def test_refused_where_the_units_have_no_such_symmetry(
    tmp_path: Path, model: dict, moves: str, words: str
) -> None:
    msgs = errors(specs.write_spec(tmp_path, _spec(model, symmetry_moves=moves)))
    assert len(msgs) == 1, msgs
    assert "inference[1].symmetry_moves" in msgs[0] and words in msgs[0], msgs
    assert "set symmetry_moves:" in msgs[0]


def test_yaml_off_and_on_read_as_off_and_auto(tmp_path: Path) -> None:
    """Unquoted, YAML 1.1 reads ``off`` as false and ``on`` as true."""
    model = specs.mlp(depth=1, width=4)
    for written, read in [("off", "off"), ("on", "auto"), ("false", "off"), ("true", "auto")]:
        text = specs.yaml_text(_spec(model, symmetry_moves="MOVES"))
        p = write(tmp_path, text.replace("MOVES", written))
        assert load_spec(p).method("nuts").symmetry_moves == read


def test_needs_the_batched_loop() -> None:
    with pytest.raises(ValueError, match="symmetry_moves: auto runs in the batched loop"):
        NUTSMethod(name="n", kind="nuts", chains=2, symmetry_moves="auto")
    with pytest.raises(ValueError, match="vectorize_chains: true and chains >= 2"):
        NUTSMethod(name="n", kind="nuts", vectorize_chains=True, symmetry_moves="auto")


def test_validate_exits_2_naming_the_field(tmp_path: Path) -> None:
    model = specs.mlp(depth=1, width=4, activation="tanh")
    p = specs.write_spec(tmp_path, _spec(model, symmetry_moves="rescale"))
    r = subprocess.run(
        [sys.executable, "-m", "zoo.cli", "validate", str(p)], capture_output=True, text=True
    )
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "inference[1].symmetry_moves" in r.stderr and str(p) in r.stderr
