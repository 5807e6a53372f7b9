"""Bad input that once raised a traceback instead of a validation message (issue 28)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.zoo.spec._helpers import GOOD, errors, write
from zoo.cli import main


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
