"""Every accepted spec runs: the bounds of seeds, sizes and floats, and safe names.

Each value below was accepted before and failed (or never finished) at run time: a seed
NumPy refuses, a network no machine holds, a float32 overflow, a run directory outside
``runs/``. Each is now refused at its FILE:LINE:COL with the bound in the message.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest
import yaml
from pydantic import ValidationError

import zoo.data
from tests.zoo.spec._helpers import GOOD, errors, write
from zoo.spec import Spec, load_spec
from zoo.spec.sections.bounds import F32_MAX, MAX_SEED, SEED_HEADROOM
from zoo.spec.sections.data import DigitsData

#: (--set item, the field the message names, words of the message)
REFUSED = [
    ("seed=-1", "seed", "greater than or equal to 0"),
    (f"seed={2**32}", "seed", f"less than or equal to {MAX_SEED}"),
    (f"seed={2**64}", "seed", f"less than or equal to {MAX_SEED}"),
    ("data.seed=-5", "data.seed", "greater than or equal to 0"),
    ("model.depth=1000000000000", "model.depth", "less than or equal to 1000"),
    ("model.width=10000000", "model.width", "less than or equal to 100000"),
    ("model.width=50000", "model.width", "at most 100,000,000 fit one machine"),
    ("data.n_train=100000000000", "data.n_train", "less than or equal to 10000000"),
    ("inference.mfvi.steps=10000000000", "inference[0].steps", "less than or equal to 1000000000"),
    ("inference.mfvi.num_particles=10000000", "inference[0].num_particles", "10000"),
    ("prior.scale=1e39", "prior.scale", "overflows float32"),
    ("inference.mfvi.guide.init_scale=1e-50", "inference[0].guide.init_scale", "underflows"),
    ("inference.mfvi.betas=[1e39, 0.9]", "inference[0].betas[0]", "overflows float32"),
    ("likelihood.noise=1e40", "likelihood.noise", "overflows float32"),
    ("name=..", "name", "runs/<name>"),
    ("name=.", "name", "runs/<name>"),
    ("name=a/b", "name", "starting with a letter or digit"),
    ("name=.hidden", "name", "starting with a letter or digit"),
    ('name="a\\tb"', "name", "letters, digits"),
    ("name=été", "name", "letters, digits"),
    ("name=" + "x" * 101, "name", "at most 100 characters"),
    ("inference.mfvi.name=" + "m" * 101, "inference[0].name", "at most 100 characters"),
    ('runtime.device="cpu\\n"', "runtime.device", "give cpu, cuda or cuda:N"),
    ("runtime.device=cuda:١", "runtime.device", "give cpu, cuda or cuda:N"),
]


@pytest.mark.parametrize(("item", "field", "words"), REFUSED, ids=[r[0][:40] for r in REFUSED])
def test_values_no_cell_can_run_are_refused(
    tmp_path: Path, item: str, field: str, words: str
) -> None:
    text = GOOD[: GOOD.index("sweep:")]
    text = text.replace("mean_field}", "mean_field}\n    betas: [0.9, 0.99]")
    text += "prior: {kind: normal}\n"
    if item.startswith("likelihood"):
        text += "likelihood: {kind: gaussian}\n"
        text = text.replace("two_moons", "teacher")
    p = write(tmp_path, text)
    msgs = errors(p, [item])
    assert len(msgs) == 1, msgs
    where = rf"(--set {re.escape(item)}|{re.escape(str(p))}:\d+:\d+)"  # a renamed method: its line
    assert re.match(rf"{where}: {re.escape(field)}: ", msgs[0]), msgs[0]
    assert words in msgs[0], msgs[0]


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan, 1e39])
def test_floats_are_finite_and_float32(value: float) -> None:
    data = yaml.safe_load(GOOD)
    data["inference"][0]["lr"] = value
    data["likelihood"] = {"kind": "gaussian", "noise": value}
    data["data"] = {"kind": "teacher"}
    with pytest.raises(ValidationError) as e:
        Spec.model_validate(data)
    locs = sorted(".".join(map(str, err["loc"][:3])) for err in e.value.errors())
    assert locs == ["inference.0.svi", "likelihood.gaussian.noise"], locs
    assert all(re.search("finite number|float32", err["msg"]) for err in e.value.errors())


def test_a_bad_value_in_the_file_is_reported_at_its_position(tmp_path: Path) -> None:
    p = write(tmp_path, GOOD.replace("  depth: 2\n", "  depth: 1000000000000\n"))
    msgs = errors(p)
    assert len(msgs) == 1 and msgs[0].startswith(
        f"{p}:7:10: model.depth: Input should be less than or equal to 1000"
    ), msgs
    p = write(tmp_path, GOOD.replace("  seed: [0, 1, 2]", "  seed: [0, -1]"))
    msgs = errors(p)
    assert len(msgs) == 1 and re.match(
        rf"{p}:16:\d+: sweep.seed\[1\]: .*greater than or equal "
        "to 0",
        msgs[0],
    ), msgs


def test_bounds_themselves_are_accepted(tmp_path: Path) -> None:
    text = GOOD.replace("  seed: [0, 1, 2]", f"  seed: [0, {MAX_SEED}]")
    text = text.replace("mean_field}", f"mean_field, init_scale: {F32_MAX!r}}}")
    spec = load_spec(write(tmp_path, text), ["name=two_moons.v2-a_b"])
    assert spec.name == "two_moons.v2-a_b" and len(spec.cells()) == 4


def test_the_largest_seed_and_its_offsets_are_valid_library_seeds() -> None:
    # the cells derive seed + k (k <= 7, and a few offsets below SEED_HEADROOM); NumPy's
    # legacy generators and scikit-learn (digits' split) accept seeds below 2**32 only
    for k in (0, 1, 4, 7, SEED_HEADROOM):
        np.random.RandomState(MAX_SEED + k)
    ds = zoo.data.load(DigitsData(kind="digits"), MAX_SEED)
    assert ds.n_classes == 10
    with pytest.raises(ValueError):
        np.random.RandomState(MAX_SEED + SEED_HEADROOM + 1)  # = 2**32: the bound is tight


def test_sampler_draws_times_chains_is_bounded(tmp_path: Path) -> None:
    text = GOOD.replace(
        "    steps: 10\n",
        "    steps: 10\n  - {name: nuts, kind: nuts, draws: 100000, chains: 1000}\n",
    )
    msgs = errors(write(tmp_path, text))
    assert (
        len(msgs) == 1 and "draws x chains = 100,000,000 kept draws; at most 1,000,000" in (msgs[0])
    ), msgs


def test_lenet_filters_must_be_positive(tmp_path: Path) -> None:
    text = GOOD.replace("  kind: mlp\n  depth: 2\n  width: 8\n", "  kind: lenet\n  conv: [8, 0]\n")
    text = text.replace("  model.depth: [1, 2]\n", "").replace(
        "two_moons\n  n_train: 100", "digits"
    )
    msgs = errors(write(tmp_path, text))
    assert len(msgs) == 1 and "model.conv[1]: Input should be greater than 0" in msgs[0], msgs


@pytest.mark.parametrize("delimiter", ['""', '";;"', '"\\n"', "'\"'"])
def test_csv_delimiter_is_one_character(tmp_path: Path, delimiter: str) -> None:
    csv = tmp_path / "d.csv"
    csv.write_text("a,y\n1,0\n2,1\n")
    text = GOOD.replace(
        "two_moons\n  n_train: 100",
        f"csv\n  path: {csv}\n  target: y\n  task: classification\n  delimiter: {delimiter}",
    )
    msgs = errors(write(tmp_path, text))
    assert (
        len(msgs) == 1 and "data.delimiter: " in msgs[0] and "one printable character" in (msgs[0])
    ), msgs
