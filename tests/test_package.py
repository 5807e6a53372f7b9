"""What an installed user gets: the shipped specs by name from any directory, the licence
and the version.

The fast tests resolve shipped specs from another working directory without building
anything; the slow one builds the wheel, installs it into a bare folder and runs the CLI
from it, with this checkout off ``sys.path``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

import zoo
from tests.test_layers import _torch_free
from zoo.cli import main
from zoo.shipped import DEFAULT_SPEC, resolve_spec, shipped_specs
from zoo.spec import SpecError

ROOT = Path(__file__).resolve().parents[1]
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def test_shipped_specs_by_name_from_another_directory(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    assert {p.name for p in shipped_specs()} == {p.name for p in (ROOT / "specs").glob("*.yaml")}
    want = (ROOT / "specs" / "two_moons_depth.yaml").resolve()
    for arg in ("two_moons_depth", "two_moons_depth.yaml", "specs/two_moons_depth.yaml"):
        assert resolve_spec(arg).resolve() == want
    assert main(["validate", "two_moons_depth", "specs/product_matrix_sim.yaml"]) == 0
    assert "two_moons_depth: ok (24 cells)" in capsys.readouterr().out
    with pytest.raises(SpecError, match="did you mean 'two_moons_depth'"):
        resolve_spec("two_moons_dept")


def test_a_local_path_wins_over_a_shipped_spec(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "specs").mkdir()
    mine = tmp_path / "specs" / "two_moons_depth.yaml"
    mine.write_text((ROOT / "specs" / "two_moons_depth.yaml").read_text())
    assert resolve_spec("specs/two_moons_depth.yaml") == Path("specs/two_moons_depth.yaml")
    (tmp_path / "two_moons_depth").mkdir()  # a run directory of that name
    assert resolve_spec("two_moons_depth") == Path("two_moons_depth")


def test_list_marks_the_default_wraps_and_names_simulations(monkeypatch, capsys) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert all(len(line) <= 80 for line in lines), max(lines, key=len)
    (default,) = [ln for ln in lines if ln.startswith(f"{DEFAULT_SPEC}.yaml ")]
    assert "(default)" in default
    (sim,) = [ln for ln in lines if ln.startswith("product_matrix_sim.yaml")]
    assert " simulation " in sim and "0 cells" not in sim


def test_version(capsys) -> None:
    assert zoo.__version__ == VERSION
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    assert capsys.readouterr().out.strip() == f"zoo {VERSION}"
    # the API's entry point and the version cost no torch
    _torch_free(
        "import zoo; zoo.__version__; zoo.run; import zoo.execution.netcdf; assert callable(zoo.run)"
    )


def _tree_copy(dst: Path) -> Path:
    """The checkout's files a build reads (no .git, runs, venvs, build output)."""
    skip = shutil.ignore_patterns(
        ".git", ".venv*", "runs", "build", "dist", "*.egg-info", "__pycache__", ".*_cache"
    )
    return Path(shutil.copytree(ROOT, dst, ignore=skip))


@pytest.mark.slow
def test_the_wheel_runs_its_specs_from_anywhere(tmp_path: Path) -> None:
    src = _tree_copy(tmp_path / "src")
    # a file an earlier build left in build/lib that the checkout no longer has
    stale = src / "build" / "lib" / "zoo" / "references" / "shipped" / "stale.json"
    stale.parent.mkdir(parents=True)
    stale.write_text("{}")
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run(
        [*pip, "wheel", str(src), "-w", str(tmp_path / "whl"), "--no-deps", "--no-build-isolation"],
        check=True,
        cwd=tmp_path,
    )
    (wheel,) = (tmp_path / "whl").glob("bnn_zoo-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert f"bnn_zoo-{VERSION}.dist-info/licenses/LICENSE" in names
    shipped = {f"zoo/_specs/{p.name}" for p in (ROOT / "specs").glob("*.yaml")}
    assert shipped <= names
    assert not [n for n in names if n.startswith(("tests/", "specs/", "benchmarks/"))]
    assert "zoo/references/shipped/stale.json" not in names
    site = tmp_path / "site"
    subprocess.run([*pip, "install", "--no-deps", "--target", str(site), str(wheel)], check=True)
    away = tmp_path / "elsewhere"
    away.mkdir()
    env = {**os.environ, "PYTHONPATH": str(site), "COLUMNS": "100"}

    def zoo_cli(*args: str) -> str:
        r = subprocess.run(
            [sys.executable, "-m", "zoo.cli", *args],
            capture_output=True,
            text=True,
            cwd=away,
            env=env,
        )
        assert r.returncode == 0, (args, r.stderr)
        return r.stdout

    where = subprocess.run(
        [
            sys.executable,
            "-c",
            "import zoo, zoo.shipped as s; print(zoo.__file__, s.shipped_dir())",
        ],
        capture_output=True,
        text=True,
        cwd=away,
        env=env,
        check=True,
    ).stdout
    assert where.split() == [str(site / "zoo" / "__init__.py"), str(site / "zoo" / "_specs")]
    listing = zoo_cli("list")
    assert "two_moons_depth.yaml (default)" in listing and "product_matrix_sim.yaml" in listing
    assert "two_moons_depth: ok (12 cells)" in zoo_cli(
        "validate", "two_moons_depth", "--set", "inference=[mfvi]"
    )
    assert zoo_cli("--version").strip() == f"zoo {VERSION}"
    cut = ["inference=[mfvi]", "studies=[]", "sweep.seed=[0]", "sweep.model.depth=[1]"]
    cut += ["inference.mfvi.epochs=2", "data.n_train=100", "data.n_test=100"]
    sets = [a for item in cut for a in ("--set", item)]
    zoo_cli("run", "two_moons_depth", *sets, "--workers", "1", "--out", "r", "--no-progress")
    assert "1 cell(s): 1 ok, 0 failed." in (away / "r" / "report.md").read_text()


def test_the_cli_refuses_another_projects_guides_or_reports(tmp_path, monkeypatch, capsys) -> None:
    """A ``reports`` package of another project shadowing ours: exit 2, named, no traceback."""
    other = tmp_path / "reports"
    other.mkdir()
    (other / "__init__.py").write_text("")
    import importlib.util as iu

    real = iu.find_spec

    def find_spec(name, *a, **k):
        if name == "reports":
            return iu.spec_from_file_location("reports", other / "__init__.py")
        return real(name, *a, **k)

    monkeypatch.setattr(iu, "find_spec", find_spec)
    from zoo.cli import main

    assert main(["list"]) == 2
    err = capsys.readouterr().err
    assert "'reports' is another project's" in err and str(other) in err
    assert "Traceback" not in err
    monkeypatch.setattr(iu, "find_spec", real)
    assert main(["list"]) == 0


def test_the_dependency_check_names_what_pyproject_requires() -> None:
    """zoo.execution.usage.DEPENDENCIES is pyproject's ``dependencies`` for this Python."""
    from packaging.requirements import Requirement

    from zoo.execution.usage import DEPENDENCIES

    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    reqs = [Requirement(d) for d in deps]
    wanted = {r.name for r in reqs if r.marker is None or r.marker.evaluate()}
    assert set(DEPENDENCIES.values()) == wanted


def test_a_missing_library_is_named_with_its_install(without_h5netcdf, capsys) -> None:
    """A Python without h5netcdf (imported only when a cell stores its ArviZ file): exit 2
    before any cell runs, naming it and the fix."""
    assert main(["run", DEFAULT_SPEC]) == 2
    err = capsys.readouterr().err
    assert "bnn-zoo needs h5netcdf" in err and "pip install h5netcdf" in err
    assert "Traceback" not in err
