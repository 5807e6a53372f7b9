"""A damaged spec.yaml in a run directory: named as damaged, with its fix; no traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.zoo.execution.conftest import ONE_CELL
from zoo.cli import main


@pytest.fixture
def tiny_spec(one_run) -> Path:
    return one_run[0]


@pytest.mark.parametrize(
    ("damage", "words"),
    [
        (bytes(range(128, 256)), "is not UTF-8 text"),
        (b"# bnn-zoo spec_version: 2\nname: [x\n", "is not valid YAML at line"),
        (b"name: [x\n", "is not valid YAML at line"),  # was: "made by an older bnn-zoo"
    ],
    ids=["binary", "yaml-error", "yaml-error-no-version-line"],
)
def test_damaged_spec_yaml_is_named_with_its_fix(run_dir, capsys, damage, words) -> None:
    (run_dir / "spec.yaml").write_bytes(damage)
    for argv in (["status", str(run_dir)], ["report", str(run_dir)], ["run", str(run_dir)]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert "spec.yaml is damaged" in err and words in err
        assert "older" not in err and f"--out {run_dir}" in err


def test_running_the_spec_into_it_writes_it_again_and_keeps_the_cells(
    run_dir, tiny_spec, capsys
) -> None:
    (run_dir / "spec.yaml").write_bytes(b"\xff\x00garbage")
    capsys.readouterr()
    assert main(["run", str(tiny_spec), "--out", str(run_dir), *ONE_CELL]) == 0
    err = capsys.readouterr().err
    assert "is damaged" in err and "1 of 1 cells already done" in err
    assert main(["status", str(run_dir)]) == 0


def test_a_stored_spec_that_no_longer_validates_says_so(run_dir, capsys) -> None:
    text = (run_dir / "spec.yaml").read_text()
    (run_dir / "spec.yaml").write_text(text + "unknown_section: 1\n")
    assert main(["status", str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert "unknown_section" in err and "no longer validates" in err


def test_same_size_damage_of_an_svi_artifact_is_found_and_recomputed(run_dir, capsys) -> None:
    (nc,) = (run_dir / "cells").glob("mfvi*.nc")
    data = bytearray(nc.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped byte: same size, other SHA-256
    nc.write_bytes(bytes(data))
    capsys.readouterr()
    assert main(["status", str(run_dir)]) == 0
    out, err = capsys.readouterr()
    assert "pending 1" in out and f"{nc.name}, whose contents differ" in err
    assert main(["run", str(run_dir), "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert "SHA-256 differs" in err and "computed again" in err
    assert main(["status", str(run_dir)]) == 0
    out, err = capsys.readouterr()
    assert "done 1, failed 0, pending 0" in out and "damaged" not in err


def test_a_hand_edited_results_csv_is_replaced_with_a_warning(run_dir, capsys) -> None:
    results = run_dir / "results.csv"
    results.write_text(results.read_text().replace("ok", "fine, by hand"))
    assert main(["report", str(run_dir)]) == 0
    err = capsys.readouterr().err
    assert "results.csv was edited since zoo wrote it" in err and "edits are gone" in err
    assert "fine, by hand" not in results.read_text()
    assert main(["report", str(run_dir)]) == 0  # zoo's own file: no warning
    assert "edited" not in capsys.readouterr().err
