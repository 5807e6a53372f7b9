"""``zoo.references.migrate``: a database of the first export format (``first_format/``,
written by ``zoo export`` before posteriordb's keys, checks and 1-based names) is rewritten
in place so that posteriordb's reader opens it, with the same draws bit for bit and the same
grade; our loader reads both formats; the shipped references are in the current format."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

import zoo.references
from zoo.references.migrate import NO_ENERGY, main, migrate
from zoo.references.pdb_checks import PDB_CHECKS

FIRST = Path(__file__).resolve().parent / "first_format"


def _draws(name: str, db: Path) -> xr.Dataset:
    return zoo.references.load(name, db)["posterior"].to_dataset()


def _info(name: str, db: Path) -> dict:
    return zoo.references.reference_info(zoo.references.load(name, db))["reference_posterior"]


def test_migrate_rewrites_the_first_format_and_keeps_draws_and_grade(tmp_path, capsys) -> None:
    db = tmp_path / "db"
    shutil.copytree(FIRST, db)
    names = zoo.references.names(db)
    before = {n: (_draws(n, db), _info(n, db)) for n in names}
    for _, info in before.values():  # the first format, as it was written
        assert "ndraws_is_10k" not in info["checks_made"]
    assert main([str(db)]) == 0
    assert capsys.readouterr().out.splitlines() == [f"migrated {n}" for n in names]
    for name, (draws, info) in before.items():
        after = _draws(name, db)
        xr.testing.assert_identical(after, draws)
        for var in draws.data_vars:
            np.testing.assert_array_equal(
                after[var].values.view(np.uint32), draws[var].values.view(np.uint32)
            )
        new = _info(name, db)
        checks, diag = new["checks_made"], new["diagnostics"]
        assert checks["reference_grade"] == info["checks_made"]["reference_grade"]
        assert set(PDB_CHECKS) <= set(checks) and checks["efmi_above_0_2"] is None
        assert diag["ndraws"] == draws.sizes["chain"] * draws.sizes["draw"]
        assert diag["ndraws_sampled"] == info["diagnostics"]["ndraws"]
        assert diag["every_draw"]["r_hat"] == info["diagnostics"]["r_hat"]
        assert diag["diagnostic_information"]["names"][0] == "layer0.weight[1,1]"
        assert new["comments"].endswith(NO_ENERGY)
        model = json.loads(
            (db / "models/info" / f"{new['provenance']['cell_id']}.info.json").read_text()
        )
        assert model["model_implementations"]["zoo"]["model_code"] == model["model_code"]["zoo"]
    first = {p: p.read_bytes() for p in db.rglob("*") if p.is_file()}
    assert migrate(db) == []  # already current: nothing rewritten
    assert first == {p: p.read_bytes() for p in db.rglob("*") if p.is_file()}


def test_posteriordb_opens_a_migrated_database_and_the_shipped_one(tmp_path) -> None:
    pdb = pytest.importorskip(
        "posteriordb", reason="posteriordb is not installed (pip install -e '.[dev]')"
    )
    db = tmp_path / "db"
    shutil.copytree(FIRST, db)
    name = zoo.references.names(db)[0]
    with pytest.raises(KeyError, match="model_implementations"):  # the first format
        pdb.PosteriorDatabase(str(db)).posterior(name)
    migrate(db)
    for root in (db, zoo.references.shipped_dir()):
        database = pdb.PosteriorDatabase(str(root))
        for name in zoo.references.names(root if root == db else None):
            post = database.posterior(name)
            chains = post.reference_draws()
            mine = _draws(name, root)
            assert len(chains) == mine.sizes["chain"]
            assert all(len(v) == mine.sizes["draw"] for v in chains[0].values())
            (var, da), *_ = mine.data_vars.items()
            first = np.asarray([ch[f"{var}[1,1]"] for ch in chains], dtype=np.float64)
            np.testing.assert_array_equal(first.astype(da.dtype), da.values[:, :, 0, 0])
            assert Path(post.model.code_file_path("zoo")).is_file()
            info = post.reference_draws_info()
            assert set(PDB_CHECKS) <= set(info["checks_made"])
            assert info["diagnostics"]["ndraws"] == mine.sizes["chain"] * mine.sizes["draw"]


def test_the_shipped_references_are_in_the_current_format() -> None:
    root = zoo.references.shipped_dir()
    for name in zoo.references.names():
        info = _info(name, root)
        assert set(PDB_CHECKS) <= set(info["checks_made"])
        model = json.loads(
            (root / "models/info" / f"{info['provenance']['cell_id']}.info.json").read_text()
        )
        assert "model_implementations" in model
