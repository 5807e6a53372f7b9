"""``zoo export`` and ``zoo.references.load``: a shrunk run's sampled cells written in
posteriordb's layout read back with the same draws (bit for bit) and metadata; bad input
(not a run directory, no graded sampled cell, --out not empty, a file or a link) exits 2
and writes nothing; the help says what is written and how to read it.

One tiny run (MF-VI and 4 vectorized NUTS chains on two moons, depths 1 and 2) is shared.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import json
import shutil
from pathlib import Path

import arviz_stats as azs
import numpy as np
import pytest
import xarray as xr

import zoo.references
from tests import specs
from zoo.cli import export_args, main
from zoo.execution.netcdf import load_datatree
from zoo.references import export as export_mod
from zoo.references.layout import json_array, read_array, read_json_zip
from zoo.spec import load_spec

SPEC = specs.spec(
    "refs",
    seed=0,
    data=specs.two_moons(n_train=40, n_test=30, noise=0.1),
    model=specs.mlp(depth=1, width=3, activation="tanh"),
    inference=[
        specs.nuts(
            warmup=60,
            draws=60,
            chains=4,
            vectorize_chains=True,
            max_tree_depth=4,
            predictive_draws=10,
        ),
    ],
    sweep={"model.depth": [1, 2]},
)


def _zoo(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("refs")
    specs.write_spec(root, SPEC, file="spec.yaml")
    out = root / "run"
    code, _, err = _zoo(
        "run", str(root / "spec.yaml"), "--out", str(out), "--no-progress", "--workers", "1"
    )
    assert code == 0, err
    return out


@pytest.fixture(scope="module")
def exported(run_dir: Path, tmp_path_factory) -> tuple[Path, str]:
    db = tmp_path_factory.mktemp("db") / "refs"
    code, out, err = _zoo(
        "export", str(run_dir), "--out", str(db), "--max-draws", "60", "--min-grade", "failed"
    )
    assert code == 0, err
    return db, out


def _records(run_dir: Path) -> dict[str, dict]:
    recs = (json.loads(p.read_text()) for p in (run_dir / "cells").glob("*.json"))
    return {r["cell_id"]: r for r in recs}


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(f"u{a.dtype.itemsize}") if a.dtype.kind == "f" else a


def test_export_reads_back_bit_for_bit_with_its_metadata(run_dir, exported) -> None:
    db, printed = exported
    recs = _records(run_dir)
    sampled = sorted(c for c, r in recs.items() if r["metrics"].get("reference_grade"))
    assert len(sampled) == 2
    names = zoo.references.names(db)
    assert names == [f"refs-{c}" for c in sampled]
    spec_sha = hashlib.sha256((run_dir / "spec.yaml").read_bytes()).hexdigest()
    for name, cell_id in zip(names, sampled, strict=True):
        rec = recs[cell_id]
        dt = zoo.references.load(name, db)
        meta = zoo.references.reference_info(dt)
        info = json.loads((db / f"reference_posteriors/draws/info/{name}.info.json").read_text())
        assert meta["reference_posterior"] == info
        assert meta["posterior"] == json.loads((db / f"posteriors/{name}.json").read_text())
        assert meta["reference_grade"] == rec["metrics"]["reference_grade"]
        assert f"{meta['reference_grade']:<7} {name}" in printed
        cell = info["diagnostics"]["cell"]
        for key in ("max_r_hat", "min_ess_bulk", "max_r_hat_pred", "divergent_frac"):
            assert cell[key] == rec["metrics"][key]
        assert info["checks_made"]["kept_from_next_grade_by"] == [
            g for g in rec["metrics"]["grade_failed"].split(",") if g
        ]
        prov = info["provenance"]
        assert prov["spec_sha256"] == spec_sha and prov["cell_id"] == cell_id
        assert prov["config_hash"] == cell_id.rsplit("_", 1)[1]
        # the draws: the stored posterior, every thin-th draw of each chain, bit for bit
        orig = load_datatree(run_dir / "cells" / f"{cell_id}.nc")
        thin = info["inference"]["thin"]
        full = orig["posterior"].to_dataset()
        assert thin == int(np.ceil(4 * full.sizes["draw"] / 60))
        want = full.isel(draw=slice(None, None, thin))
        got = dt["posterior"].to_dataset()
        assert got.sizes["chain"] * got.sizes["draw"] <= 60
        xr.testing.assert_identical(got, want.drop_attrs())
        for var in want.data_vars:
            assert got[var].dtype == want[var].dtype
            np.testing.assert_array_equal(_bits(got[var].values), _bits(want[var].values))
        for group in ("observed_data", "constant_data", "predictions_constant_data"):
            xr.testing.assert_identical(
                dt[group].to_dataset(), orig[group].to_dataset().drop_attrs()
            )
        # posteriordb's draws file: a list of chains keyed by parameter name
        chains = read_json_zip(
            (db / f"reference_posteriors/draws/draws/{name}.json.zip").read_bytes()
        )
        assert len(chains) == 4 and "layer0.weight[1,2]" in chains[0]
        assert len(info["diagnostics"]["r_hat"]) == len(chains[0])
        # the model file is a spec whose one cell has this cell's configuration hash
        model = meta["model"]
        (cell,) = load_spec(db / model["model_code"]["zoo"]).cells()
        assert cell.cell_id.rsplit("_", 1)[1] == prov["config_hash"]
        assert model["network"]["n_params"] == sum(meta["posterior"]["dimensions"].values())


def test_cells_fitted_to_the_same_points_share_their_data(exported) -> None:
    db, _ = exported
    data_names = {
        zoo.references.reference_info(zoo.references.load(n, db))["posterior"]["data_name"]
        for n in zoo.references.names(db)
    }
    assert len(data_names) == 1
    assert len(list((db / "data/data").iterdir())) == 1


def test_export_is_deterministic(run_dir, exported, tmp_path) -> None:
    db, _ = exported
    code, _, err = _zoo(
        "export",
        str(run_dir),
        "--out",
        str(tmp_path / "again"),
        "--max-draws",
        "60",
        "--min-grade",
        "failed",
    )
    assert code == 0, err
    first = {p.relative_to(db): p.read_bytes() for p in db.rglob("*") if p.is_file()}
    again = {
        p.relative_to(tmp_path / "again"): p.read_bytes()
        for p in (tmp_path / "again").rglob("*")
        if p.is_file()
    }
    assert first == again


def test_min_grade_leaves_cells_out_and_says_so(run_dir, tmp_path) -> None:
    grades = {c: r["metrics"]["reference_grade"] for c, r in _records(run_dir).items()}
    assert sorted(grades.values()) == ["bronze", "failed"]  # the tiny run's two cells
    code, out, err = _zoo("export", str(run_dir), "--out", str(tmp_path / "b"))
    assert code == 0
    (bronze,) = [c for c, g in grades.items() if g == "bronze"]
    (failed,) = [c for c, g in grades.items() if g == "failed"]
    assert zoo.references.names(tmp_path / "b") == [f"refs-{bronze}"]
    assert f"left out {failed}: grade failed, below --min-grade bronze" in err
    code, _, err = _zoo("export", str(run_dir), "--out", str(tmp_path / "g"), "--min-grade", "gold")
    assert code == 2 and "below --min-grade gold" in err
    assert not (tmp_path / "g").exists()


def test_bad_input_exits_2_and_writes_nothing(run_dir, tmp_path) -> None:
    # not a run directory
    code, _, err = _zoo("export", str(tmp_path), "--out", str(tmp_path / "x"))
    assert code == 2 and "not a run directory" in err and "Traceback" not in err
    assert not (tmp_path / "x").exists()
    # no graded sampled cell: the sampled cells' records are gone (pending)
    bare = tmp_path / "bare"
    shutil.copytree(run_dir, bare)
    for p in (bare / "cells").glob("nuts_*"):
        p.unlink()
    code, _, err = _zoo("export", str(bare), "--out", str(tmp_path / "y"))
    assert code == 2 and "no finished sampled cell" in err
    assert not (tmp_path / "y").exists()
    # --out not empty, a file, a link (to an empty directory): refused, left as it was
    full = tmp_path / "full"
    full.mkdir()
    (full / "mine.txt").write_text("keep")
    code, _, err = _zoo("export", str(run_dir), "--out", str(full))
    assert code == 2 and "is not empty" in err
    assert [p.name for p in full.iterdir()] == ["mine.txt"]
    afile = tmp_path / "afile"
    afile.write_text("keep")
    code, _, err = _zoo("export", str(run_dir), "--out", str(afile))
    assert code == 2 and "is a file" in err and afile.read_text() == "keep"
    target = tmp_path / "target"
    target.mkdir()
    link = tmp_path / "link"
    link.symlink_to(target)
    code, _, err = _zoo("export", str(run_dir), "--out", str(link))
    assert code == 2 and "symbolic link" in err
    assert list(target.iterdir()) == []
    # bad options
    code, _, err = _zoo("export", str(run_dir), "--out", str(tmp_path / "z"), "--max-draws", "0")
    assert code == 2 and "--max-draws 0" in err and not (tmp_path / "z").exists()


def test_loader_names_what_it_cannot_find(exported, tmp_path) -> None:
    db, _ = exported
    name = zoo.references.names(db)[0]
    with pytest.raises(zoo.references.ReferenceReadError, match="did you mean"):
        zoo.references.load(name[:-1], db)
    with pytest.raises(zoo.references.ReferenceReadError, match="not a reference database"):
        zoo.references.load(name, tmp_path)
    broken = tmp_path / "broken"
    shutil.copytree(db, broken)
    (broken / f"reference_posteriors/draws/draws/{name}.json.zip").write_bytes(b"not a zip")
    with pytest.raises(zoo.references.ReferenceReadError, match="cannot be read"):
        zoo.references.load(name, broken)
    posterior = broken / f"posteriors/{name}.json"
    doc = json.loads(posterior.read_text())
    posterior.write_text(json.dumps({**doc, "data_name": "../../../etc/passwd"}))
    with pytest.raises(zoo.references.ReferenceReadError, match="outside the database"):
        zoo.references.load(name, broken)


def test_numbers_round_trip_bit_for_bit() -> None:
    rng = np.random.default_rng(0)
    for dtype, bits in ((np.float32, np.uint32), (np.float64, np.uint64)):
        raw = rng.integers(0, np.iinfo(bits).max, size=20000, dtype=bits, endpoint=True)
        x = raw.view(dtype)
        x = np.concatenate([x[np.isfinite(x)], np.array([-0.0, 0.0], dtype=dtype)])
        back = read_array(json.loads(json_array(x)), x.dtype)
        assert back.dtype == x.dtype
        np.testing.assert_array_equal(back.view(bits), x.view(bits))
    ints = np.array([[0, -3], [127, 5]], dtype=np.int8)
    assert np.array_equal(read_array(json.loads(json_array(ints)), "int8"), ints)


def test_help_says_what_is_written_and_how_to_read_it() -> None:
    code, out, _ = _zoo_help("export", "--help")
    assert code == 0
    for words in (
        "posteriors/NAME.json",
        "models/zoo/CELL.yaml",
        "data/data/DATA.json.zip",
        "reference_posteriors/draws/draws/NAME.json.zip",
        "zoo.references.load",
        "--min-grade",
        "--max-draws",
        "exit status",
        "nested R-hat",
    ):
        assert words in out, words
    assert export_args.DEFAULT_MAX_DRAWS == zoo.references.DEFAULT_MAX_DRAWS
    code, out, _ = _zoo_help("--help")
    assert "export" in out


def _zoo_help(*args: str) -> tuple[int, str, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as e:
        main(list(args))
    return e.value.code, out.getvalue(), ""


def test_cells_not_finished_are_left_out_and_named(run_dir, tmp_path) -> None:
    part = tmp_path / "part"
    shutil.copytree(run_dir, part)
    gone = sorted((part / "cells").glob("nuts_depth=2_*.json"))[0]
    gone.unlink()
    code, _, err = _zoo("export", str(part), "--out", str(tmp_path / "o"), "--min-grade", "failed")
    assert code == 0
    assert f"left out {gone.stem}: not finished (pending or running)" in err
    assert len(zoo.references.names(tmp_path / "o")) == 1


def _pdb_chains(chains: list[dict[str, list]], post: xr.Dataset) -> dict[str, np.ndarray]:
    """posteriordb's per-chain draws as ``(chain, draw, *shape)`` arrays of ``post``'s
    dtypes, found by posteriordb's 1-based names."""
    out = {}
    for var, da in post.data_vars.items():
        shape = da.shape[2:]
        flat = [
            np.stack(
                [np.asarray(ch[f"{var}[{','.join(str(i + 1) for i in idx)}]"]) for ch in chains]
            )
            if shape
            else np.stack([np.asarray(ch[var]) for ch in chains])
            for idx in (np.ndindex(*shape) if shape else [()])
        ]
        arr = np.stack(flat, axis=-1).reshape(len(chains), -1, *shape)
        out[str(var)] = read_array(arr, da.dtype)
    return out


def test_posteriordb_reads_the_export_and_its_checks_are_true(run_dir, exported) -> None:
    pdb = pytest.importorskip(
        "posteriordb", reason="posteriordb is not installed (pip install -e '.[dev]')"
    )
    db, _ = exported
    database = pdb.PosteriorDatabase(str(db))
    assert sorted(database.posterior_names()) == zoo.references.names(db)
    for name in zoo.references.names(db):
        post = database.posterior(name)
        chains = post.reference_draws()
        info = post.reference_draws_info()
        assert Path(post.model.code_file_path("zoo")).is_file()
        assert post.data.values().keys() >= {"x", "y"}
        mine = zoo.references.load(name, db)["posterior"].to_dataset()
        theirs = _pdb_chains(chains, mine)
        for var, arr in theirs.items():
            np.testing.assert_array_equal(_bits(arr), _bits(mine[var].values))
        diag, checks = info["diagnostics"], info["checks_made"]
        stored = sum(len(next(iter(ch.values()))) for ch in chains)
        cell_id = info["provenance"]["cell_id"]
        full = load_datatree(run_dir / "cells" / f"{cell_id}.nc")
        assert diag["ndraws"] == stored == 60 and diag["nchains"] == 4
        assert diag["ndraws_sampled"] == 4 * full["posterior"].sizes["draw"] == 240
        assert diag["diagnostic_information"]["names"][:2] == [
            "layer0.weight[1,1]",
            "layer0.weight[1,2]",
        ]
        # E-FMI of every transition's energy: sum of squared steps over sum of squares
        energy = full["sample_stats"]["energy"].values.astype(np.float64)
        want = (np.diff(energy, axis=1) ** 2).sum(1) / (
            (energy - energy.mean(1, keepdims=True)) ** 2
        ).sum(1)
        np.testing.assert_allclose(diag["expected_fraction_of_missing_information"], want)
        # posteriordb's checks, recomputed here from its own reader's draws
        ds = xr.Dataset({v: (("chain", "draw", *mine[v].dims[2:]), a) for v, a in theirs.items()})
        ess = np.concatenate(
            [np.ravel(azs.ess(ds, method=m)[v].values) for m in ("bulk", "tail") for v in ds]
        )
        rhat = np.concatenate([np.ravel(azs.rhat(ds)[v].values) for v in ds])
        half = 4 * np.sqrt(7 * stored)
        assert checks["ndraws_is_10k"] is False and checks["nchains_is_gte_4"] is True
        assert checks["ess_within_bounds"] is bool(
            ((stored - half <= ess) & (ess <= stored + half)).all()
        )
        assert checks["r_hat_below_1_01"] is bool((rhat <= 1.01).all())
        assert checks["efmi_above_0_2"] is bool((want >= 0.2).all())
        np.testing.assert_allclose(diag["r_hat"], rhat)


def test_a_full_disk_leaves_no_partial_database_and_a_retry_succeeds(
    run_dir, tmp_path, monkeypatch
) -> None:
    real, calls = export_mod.write_bytes_atomic, []

    def full_disk(path, data):
        calls.append(path)
        if len(calls) == 3:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(path, data)

    for out in (tmp_path / "new", tmp_path / "empty"):
        if out.name == "empty":
            out.mkdir()
        calls.clear()
        monkeypatch.setattr(export_mod, "write_bytes_atomic", full_disk)
        code, _, err = _zoo("export", str(run_dir), "--out", str(out), "--min-grade", "failed")
        assert code == 2 and "No space left on device" in err and "Traceback" not in err
        assert len(calls) == 3
        assert (list(out.iterdir()) == []) if out.name == "empty" else not out.exists()
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
            p.name for p in (tmp_path / "new", tmp_path / "empty") if p.exists()
        )  # no partial copy left beside it
        monkeypatch.setattr(export_mod, "write_bytes_atomic", real)
        code, out_text, err = _zoo(
            "export", str(run_dir), "--out", str(out), "--min-grade", "failed"
        )
        assert code == 0, err
        assert len(zoo.references.names(out)) == 2


def test_an_unknown_grade_exits_2_naming_the_cell_and_the_field(run_dir, tmp_path) -> None:
    bad = tmp_path / "bad"
    shutil.copytree(run_dir, bad)
    rec_path = sorted((bad / "cells").glob("nuts_depth=1_*.json"))[0]
    rec = json.loads(rec_path.read_text())
    rec["metrics"]["reference_grade"] = "platinum"
    rec_path.write_text(json.dumps(rec))
    code, _, err = _zoo("export", str(bad), "--out", str(tmp_path / "o"), "--min-grade", "failed")
    assert code == 2 and "Traceback" not in err, err
    assert rec_path.stem in err and "metrics.reference_grade" in err and "'platinum'" in err
    assert not (tmp_path / "o").exists()
