"""Bad input that once raised a traceback instead of a validation message."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import SPECS
from tests.zoo.data.test_data_idx import _fake_dir
from tests.zoo.spec._helpers import GOOD, errors, write
from zoo.cli import main
from zoo.spec import cell_id, load_spec


def test_sweep_axis_of_a_method_that_does_not_exist(tmp_path: Path, capsys) -> None:
    p = write(tmp_path, GOOD + "  inference.mfiv.lr: [0.1, 0.2]\n")
    (msg,) = [m for m in errors(p) if "mfiv" in m]
    assert "sweep.inference.mfiv.lr" in msg and "'mfvi'" in msg
    for cmd in ("validate", "show"):
        assert main([cmd, str(write(tmp_path, GOOD)), "--set", "sweep.inference.mfiv.lr=[1]"]) == 2
        assert "not an inference method of this spec" in capsys.readouterr().err


CSV = """\
name: t
data: {kind: csv, path: PATH, target: y}
model: {kind: mlp, depth: 1, width: 4}
likelihood: {kind: gaussian}
inference:
  - {name: map, kind: map, steps: 10}
"""


@pytest.mark.parametrize(
    ("value", "field", "words"),
    [
        ('"a\\0b.csv"', "data.path", "NUL byte"),
        ("a" * 5000 + ".csv", "data.path", "too long"),
        ("x/" * 2100 + "c.csv", "data.path", "too long"),
    ],
)
def test_unusable_data_paths_are_validation_errors(tmp_path, value, field, words) -> None:
    p = write(tmp_path, CSV.replace("PATH", value))
    (msg,) = errors(p)
    assert field in msg and words in msg
    (msg,) = errors(write(tmp_path, CSV), [f"data.path={value}"])
    assert field in msg and words in msg


@pytest.mark.parametrize("value", ['"a\\0b"', "d" * 5000])
def test_unusable_data_dirs_are_validation_errors(tmp_path, value) -> None:
    text = CSV.replace("{kind: csv, path: PATH, target: y}", f"{{kind: idx, dir: {value}}}")
    text = text.replace("gaussian", "categorical")
    (msg,) = errors(write(tmp_path, text))
    assert "data.dir" in msg and ("NUL" in msg or "too long" in msg)


@pytest.mark.parametrize("scale", ["1e30", "1e-25"])
def test_a_prior_scale_whose_square_float32_cannot_hold_is_refused(tmp_path, scale) -> None:
    (msg,) = errors(write(tmp_path, GOOD), [f"prior={{kind: normal, scale: {scale}}}"])
    assert "prior.scale" in msg and "1e-18 to 1e+18" in msg
    (msg,) = errors(
        write(tmp_path, GOOD), [f"prior={{kind: he, bias: {{kind: normal, scale: {scale}}}}}"]
    )
    assert "prior.bias.scale" in msg
    assert (
        load_spec(write(tmp_path, GOOD), ["prior={kind: normal, scale: 1e18}"]).prior.scale == 1e18
    )


TEACHER = """\
name: teacher_bounds
seed: 0
data: {kind: teacher, n_train: 5, n_test: 5, width: 4}
model: {kind: mlp, depth: 1, width: 4}
likelihood: {kind: gaussian, noise: 0.1}
inference:
  - {name: map, kind: map, steps: 2}
studies: []
"""


@pytest.mark.parametrize("field", ["prior_scale", "noise"])
@pytest.mark.parametrize("scale", ["1e18", "1e30", "1e-13"])
def test_teacher_scales_that_float32_cannot_square_are_refused(tmp_path, field, scale) -> None:
    (msg,) = errors(write(tmp_path, TEACHER), [f"data.{field}={scale}"])
    assert f"data.{field}" in msg and "1e-12 to 1e+12" in msg
    assert load_spec(write(tmp_path, TEACHER), [f"data.{field}=1e12"]).data.prior_scale > 0


def test_slug_keeps_the_sign_of_an_exponent() -> None:
    assert cell_id({}, {"method": "m", "prior.scale": 1e30}).startswith("m_scale=1e30_")
    assert cell_id({}, {"method": "m", "prior.scale": 1e-30}).startswith("m_scale=1e-30_")


def _csv_ids(folder: Path, rows: str) -> list[str]:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "d.csv").write_text("x,y\n" + rows)
    spec = write(folder, CSV.replace("PATH", "d.csv") + "sweep: {seed: [0, 1]}\n")
    return [c.cell_id for c in load_spec(spec).cells()]


def test_csv_cell_ids_follow_the_data_not_its_place(tmp_path) -> None:
    rows = "".join(f"{i},{2 * i}\n" for i in range(20))
    here = _csv_ids(tmp_path / "checkout", rows)
    assert _csv_ids(tmp_path / "moved" / "elsewhere", rows) == here  # was: all new ids
    assert not set(_csv_ids(tmp_path / "other", rows + "20,41\n")) & set(here)


IDX = """\
name: idx_ids
seed: 0
data: {kind: idx, dir: fmnist, validation: 5}
model: {kind: mlp, depth: 1, width: 4}
inference:
  - {name: map, kind: map, steps: 2}
studies: []
sweep: {seed: [0, 1]}
"""


def _idx_ids(folder: Path, gz: bool = False) -> list[str]:
    _fake_dir(folder / "fmnist", gz=gz)
    return [c.cell_id for c in load_spec(write(folder, IDX)).cells()]


def test_idx_cell_ids_follow_the_data_not_its_place(tmp_path) -> None:
    here = _idx_ids(tmp_path / "checkout")
    assert _idx_ids(tmp_path / "moved" / "elsewhere") == here  # was: all new ids
    assert not set(_idx_ids(tmp_path / "gz", gz=True)) & set(here)  # other bytes, other ids
    (tmp_path / "checkout" / "fmnist" / "t10k-labels-idx1-ubyte").unlink()
    missing = [c.cell_id for c in load_spec(tmp_path / "checkout" / "s.yaml").cells()]
    assert not set(missing) & set(here)  # a file missing: the directory names the data


def test_ids_of_the_default_spec_are_unchanged() -> None:
    # the nuts ids changed with the spec's tempered sampler; a new field left at its default
    # (None) keeps the ids of every other spec's cells
    ids = [c.cell_id for c in load_spec(SPECS / "two_moons_depth.yaml").cells()]
    assert ids[:4] == [
        "mfvi_depth=1_seed=0_b4e357060876",
        "nuts_depth=1_seed=0_6eb33690c837",
        "mfvi_depth=1_seed=1_53449c2922cc",
        "nuts_depth=1_seed=1_a0c5754442f2",
    ]


def test_a_sweep_over_two_identical_data_files_is_one_setting_twice(tmp_path) -> None:
    rows = "x,y\n" + "".join(f"{i},{2 * i}\n" for i in range(20))
    for name in ("a.csv", "b.csv"):
        (tmp_path / name).write_text(rows)
    p = write(tmp_path, CSV.replace("PATH", "a.csv") + "sweep: {data.path: [a.csv, b.csv]}\n")
    (msg,) = errors(p)
    assert "sweep.data.path" in msg and "the same setting" in msg
