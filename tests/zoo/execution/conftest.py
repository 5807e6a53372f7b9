"""Fixtures of the run tests: one finished run directory of the tiny spec per module."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.conftest import tiny_spec as _tiny_spec
from zoo.cli import main

#: One cell of the tiny spec, without progress output.
ONE_CELL = ["--set", "sweep.seed=[0]", "--set", "sweep.model.depth=[1]", "--no-progress"]


@pytest.fixture(scope="module")
def one_run(tmp_path_factory) -> tuple[Path, Path]:
    """A tiny spec and its one-cell run directory, made once for the module."""
    base = tmp_path_factory.mktemp("one_run")
    spec = _tiny_spec.__wrapped__(base)
    assert main(["run", str(spec), "--out", str(base / "run"), *ONE_CELL]) == 0
    return spec, base / "run"


@pytest.fixture
def run_dir(one_run, tmp_path: Path) -> Path:
    """A copy of the module's run directory, for a test to change."""
    return Path(shutil.copytree(one_run[1], tmp_path / "run"))
