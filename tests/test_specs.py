"""The tests' spec builder (tests/specs.py): what it writes is what the tests state."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests import specs


def test_every_spec_has_an_explicit_studies_key(tmp_path: Path) -> None:
    for data in (
        specs.spec(),
        specs.spec("s", studies=[specs.study("price_of_mean_field")]),
        specs.simulation("product_matrix", width=2, depths=[1], n_draws=10),
        specs.spec("nothing", data=None, model=None, inference=None),
    ):
        text = specs.write_spec(tmp_path, data).read_text()
        assert "studies" in yaml.safe_load(text), text
    assert specs.spec()["studies"] == []


def test_the_default_spec_is_tiny_and_valid(tmp_path: Path) -> None:
    spec = specs.load(tmp_path)
    (cell,) = spec.cells()
    assert spec.studies == [] and cell.studies == []
    assert spec.data.kind == "two_moons" and spec.data.n_train == 100
    assert spec.model.depth == 1 and spec.model.width == 4
    assert cell.method.name == "mfvi" and cell.method.steps == 10


def test_sections_add_nothing_and_specs_share_nothing() -> None:
    assert specs.nuts(warmup=5) == {"name": "nuts", "kind": "nuts", "warmup": 5}
    assert specs.svi("m", guide={"kind": "k_tied", "rank": 2}, steps=1)["guide"] == {
        "kind": "k_tied",
        "rank": 2,
    }
    a = specs.spec()
    a["inference"][0]["steps"] = 99
    a["data"]["n_train"] = 1
    assert specs.spec()["inference"][0]["steps"] == 10 and specs.DATA["n_train"] == 100


def test_keys_keep_the_order_of_a_spec_file_and_tuples_are_lists(tmp_path: Path) -> None:
    data = specs.spec("o", sweep={"seed": (0, 1)}, report={"x": "seed"}, seed=3)
    assert list(data) == [
        "name",
        "seed",
        "data",
        "model",
        "inference",
        "studies",
        "sweep",
        "report",
    ]
    assert specs.load(tmp_path, data).sweep == {"seed": [0, 1]}


def test_a_whole_spec_or_its_parts_not_both(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="not both"):
        specs.write_spec(tmp_path, specs.spec(), seed=1)
    assert specs.write_spec(tmp_path / "x.yaml", specs.spec()) == tmp_path / "x.yaml"
