"""Single-chain sampler cells: metrics that do not apply are missing (None), not NaN; the
cell's tree-depth gate uses the method's own limit; the report names a damaged ArviZ file.

One tiny run (two seeds of one-chain NUTS with the price of mean field, a tree-depth limit
that two moons hits) is shared; its ArviZ files are written without the ``settings``
attribute, so the cell-time gate cannot have read the limit from there.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr

import zoo.execution.evaluate as evaluate
from tests import specs
from zoo.cli import main

# the run writes and the report reads its ArviZ files and draws the sampler's figures (with
# arviz-plots where it imports): run on both ArviZ lines (tests/arviz_facing.py)
pytestmark = pytest.mark.arviz

SPEC = specs.spec(
    "one_chain",
    seed=0,
    data=specs.two_moons(n_train=60, n_test=40, noise=0.1),
    model=specs.mlp(depth=1, width=3, activation="tanh"),
    inference=[
        specs.nuts(warmup=60, draws=30, chains=1, max_tree_depth=2, predictive_draws=5),
    ],
    studies=[specs.study("price_of_mean_field")],
    sweep={"seed": [0, 1]},
)


@pytest.fixture(scope="module")
def one_chain_run(tmp_path_factory) -> tuple[Path, str]:
    """The run directory and what the run wrote to stderr."""
    root = tmp_path_factory.mktemp("one_chain")
    specs.write_spec(root, SPEC, file="spec.yaml")
    out = root / "run"

    def without_settings(cell, ds):
        attrs = plain(cell, ds)
        del attrs["settings"]
        return attrs

    plain = evaluate.cell_attrs
    err = io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stderr(err):
        mp.setattr(evaluate, "cell_attrs", without_settings)
        args = [
            "run",
            str(root / "spec.yaml"),
            "--out",
            str(out),
            "--no-progress",
            "--workers",
            "1",
        ]
        assert main(args) == 0
    return out, err.getvalue()


def _records(out: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((out / "cells").glob("*.json"))]


def test_not_applicable_metrics_are_missing_not_nan(one_chain_run) -> None:
    out, err = one_chain_run
    assert "non-finite" not in err and "nonfinite" not in err
    records = _records(out)
    assert len(records) == 2
    for rec in records:
        m = rec["metrics"]
        assert "nonfinite" not in rec
        # one chain: no R-hat; a Ledoit-Wolf fit: no independent-draw count, yet numbers
        assert m["max_r_hat"] is None and m["kl_null_draws"] is None
        assert np.isfinite(m["min_ess_bulk"]) and np.isfinite(m["kl_diag_full"])
        assert not [k for k, v in m.items() if isinstance(v, float) and not np.isfinite(v)]
    res = pd.read_csv(out / "results.csv")
    assert res["max_r_hat"].isna().all() and res["nonfinite"].isna().all()
    md = (out / "report.md").read_text()
    assert "metric value(s) of ok cells are NaN or infinite" not in md
    assert "| nuts | 0 | n/a | " in md  # R-hat: not applicable, not a failed NaN


def test_the_cells_tree_depth_gate_uses_the_methods_limit(one_chain_run) -> None:
    out, _ = one_chain_run
    for rec in _records(out):
        with xr.open_datatree(out / "cells" / f"{rec['cell_id']}.nc") as dt:
            assert "settings" not in dt.attrs
            depth = dt["sample_stats"]["tree_depth"].values
        hits = int((depth >= 2).sum())
        assert hits > 0  # two doublings are not enough on two moons
        assert rec["metrics"]["n_max_tree_depth"] == hits
        assert "tree_depth" in rec["metrics"]["gates_failed"].split(",")


def test_report_names_damaged_arviz_files(one_chain_run, tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    shutil.copytree(one_chain_run[0], out)
    first, second = (r["cell_id"] for r in _records(out))
    # same size, other bytes: the record's SHA-256 finds it
    nc = out / "cells" / f"{first}.nc"
    data = bytearray(nc.read_bytes())
    data[len(data) // 2 : len(data) // 2 + 2000] = bytes(2000)
    nc.write_bytes(bytes(data))
    # truncated, under a record that lists no files (written before records did)
    nc2 = out / "cells" / f"{second}.nc"
    nc2.write_bytes(nc2.read_bytes()[:1000])
    rec_path = out / "cells" / f"{second}.json"
    rec = json.loads(rec_path.read_text())
    del rec["files"]
    rec_path.write_text(json.dumps(rec))

    assert main(["report", str(out)]) == 0
    err = capsys.readouterr().err
    assert "Traceback" not in err
    # the record's SHA-256 finds the same-size damage before any reader: the cell is pending
    assert f"cells/{first}.json: lists {first}.nc, whose contents differ" in err
    assert "the cell counts as pending" in err
    md = (out / "report.md").read_text()
    # the pending cell is out of the report; the truncated file under a record that lists no
    # files is found by its reader
    assert "1 of the worst sampled cells' ArviZ files could not be read" in md
    assert f"cells/{second}.nc (cannot be read: OSError)" in md
    assert f"{first}.nc" not in md
    # its row shows the record's numbers: one chain has no R-hat (n/a, not a failed NaN)
    assert md.count("| nuts | 0 | n/a | ") == 0 and md.count("| nuts | 1 | n/a | ") == 1
