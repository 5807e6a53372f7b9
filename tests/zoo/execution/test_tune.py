"""A spec's ``tune`` section: tuning cells on a validation part, the choice, the main cells."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import zoo.data
from tests import specs
from zoo.cli import main
from zoo.data.splits import split_indices, validation_indices
from zoo.data.uci import uci_arrays
from zoo.execution.runner import run_spec
from zoo.execution.tune import plan
from zoo.spec import SpecError, load_spec
from zoo.spec.sections.data import TeacherData, UciData
from zoo.spec.tuning import tuning_cells

SPECS = Path(__file__).resolve().parents[3] / "specs"

#: A tiny regression spec: Boston split 0, a 4-unit MLP, a few steps of MAP and ES.
_METHODS = [
    specs.method("MAP", "map", steps=30, lr=0.01),
    specs.method("ES", "mle", steps=30, lr=0.01, patience=5),
]


def _tuned(tune: dict | None = None, **kw) -> dict:
    t = {
        "grid": {"prior.scale": [0.001, 1.0], "inference.ES.lr": [0.01, 0.02]},
        "at": {"split": 0},
        "validation_fraction": 0.2,
        "metric": "nll",
        **(tune or {}),
    }
    fields = {
        "data": specs.uci("boston"),
        "model": specs.mlp(depth=1, width=4),
        "likelihood": {"kind": "gaussian", "noise": "learned"},
        "inference": _METHODS,
        "sweep": {"split": [0, 1]},
        "metrics": {"names": ["nll", "rmse"]},
        "tune": t,
        **kw,
    }
    return specs.spec("tuned", **fields)


def test_tuning_cells_are_the_grid_per_method_at_the_at_values(tmp_path: Path) -> None:
    spec = specs.load(tmp_path, _tuned())
    found = tuning_cells(spec)
    # MAP: the prior grid (2); ES: its learning rate only (no prior: prior.* skipped)
    assert [(c.method.name, v) for _, v, c in found] == [
        ("MAP", {"prior.scale": 0.001}),
        ("MAP", {"prior.scale": 1.0}),
        ("ES", {"inference.ES.lr": 0.01}),
        ("ES", {"inference.ES.lr": 0.02}),
    ]
    for _, _, c in found:
        assert c.spec.data.split == 0 and c.spec.data.validation_fraction == 0.2
        assert c.config()["data"]["validation_fraction"] == 0.2  # its id differs from a main cell
    main_ids = {c.cell_id for c in spec.cells()}
    assert not main_ids & {c.cell_id for _, _, c in found}


def test_validate_list_and_show_count_the_tuning_cells(tmp_path: Path, capsys) -> None:
    """A tuned spec runs its tuning cells too: validate, list and show say how many."""
    spec = specs.load(tmp_path, _tuned())
    path = tmp_path / "s.yaml"  # where specs.load wrote it
    assert main(["validate", str(path)]) == 0
    assert "ok (4 cells after 4 tuning cells)" in capsys.readouterr().out
    assert main(["show", str(path)]) == 0
    out = capsys.readouterr().out
    assert "# 4 tuning cells" in out
    assert out.count("  [tune] ") == 4 and "# 4 cells, shown before tuning" in out
    assert {c.cell_id for _, _, c in tuning_cells(spec)} <= {
        line.split("] ", 1)[1] for line in out.splitlines() if line.startswith("  [tune] ")
    }
    assert main(["list"]) == 0
    listed = capsys.readouterr().out
    shipped = load_spec(SPECS / "overpruning_uci_tuned.yaml")
    n, k = len(shipped.cells()), len(tuning_cells(shipped))
    line = next(ln for ln in listed.splitlines() if ln.startswith("overpruning_uci_tuned.yaml"))
    assert k and f"{n}+{k} tuning" in line


def test_uci_validation_part_comes_from_the_training_part_only() -> None:
    x, y, _ = uci_arrays("boston")
    train, test = split_indices(len(x), 0, 0.1)
    kept, val = validation_indices(train, 0.2)
    assert set(val) <= set(train) and set(kept) <= set(train) and not set(val) & set(kept)
    assert len(kept) + len(val) == len(train) and not set(val) & set(test)
    plain = zoo.data.load(UciData(kind="uci", name="boston"), 0)
    tuned = zoo.data.load(UciData(kind="uci", name="boston", validation_fraction=0.2), 0)
    assert len(tuned.x_train) + len(tuned.x_test) == len(plain.x_train)
    # standardized on the reduced training part: its own mean is zero
    np.testing.assert_allclose(tuned.x_train.mean(0), 0, atol=1e-5)
    # the validation rows are training rows (undo each scaling: same raw inputs)
    raw_val = x[val]
    mu, sd = x[kept].mean(0), x[kept].std(0)
    np.testing.assert_allclose(tuned.x_test, (raw_val - mu) / sd, rtol=1e-4, atol=1e-4)


def test_generic_validation_part_is_a_subset_of_the_training_rows() -> None:
    plain = zoo.data.load(TeacherData(kind="teacher", n_train=50, n_test=30), 3)
    tuned = zoo.data.load(
        TeacherData(kind="teacher", n_train=50, n_test=30, validation_fraction=0.2), 3
    )
    rows = {tuple(r) for r in plain.x_train}
    assert {tuple(r) for r in tuned.x_test} <= rows
    assert {tuple(r) for r in tuned.x_train} <= rows
    assert len(tuned.x_test) == 10 and len(tuned.x_train) == 40
    assert not {tuple(r) for r in plain.x_test} & {tuple(r) for r in tuned.x_test}


def _rec(status: str = "ok", **metrics) -> dict:
    return {"status": status, "error": "" if status == "ok" else "boom", "metrics": metrics}


def test_selection_best_metric_ties_first_failed_skipped(tmp_path: Path) -> None:
    spec = specs.load(tmp_path, _tuned())
    ids = {(c.method.name, json.dumps(v)): c.cell_id for _, v, c in tuning_cells(spec)}
    recs = {
        ids["MAP", '{"prior.scale": 0.001}']: _rec(nll=2.0),
        ids["MAP", '{"prior.scale": 1.0}']: _rec(nll=1.5),
        ids["ES", '{"inference.ES.lr": 0.01}']: _rec(nll=3.0),
        ids["ES", '{"inference.ES.lr": 0.02}']: _rec(nll=3.0),  # a tie: the first wins
    }
    tp = plan(spec, recs.get)
    chosen = {s.method: s.tried[s.chosen][0] for s in tp.searches}
    assert chosen == {"MAP": {"prior.scale": 1.0}, "ES": {"inference.ES.lr": 0.01}}
    for c in tp.main:  # the chosen values are in every main cell's configuration
        if c.method.name == "MAP":
            assert c.spec.prior.scale == 1.0 and c.axes["tuned.prior.scale"] == 1.0
        else:
            assert c.method.lr == 0.01 and c.axes["tuned.inference.ES.lr"] == 0.01
    assert not tp.failed and not tp.waiting
    # a failed tuning cell is skipped; all failed: the method's main cells fail, said why
    recs[ids["MAP", '{"prior.scale": 1.0}']] = _rec("failed")
    tp = plan(spec, recs.get)
    assert [s.tried[s.chosen][0] for s in tp.searches if s.method == "MAP"] == [
        {"prior.scale": 0.001}
    ]
    recs[ids["MAP", '{"prior.scale": 0.001}']] = _rec(nll=float("nan"))
    tp = plan(spec, recs.get)
    assert len(tp.failed) == 2 and all(
        "every tuning cell of MAP failed" in m for m in tp.failed.values()
    )
    # a missing tuning cell: its method's main cells wait
    del recs[ids["ES", '{"inference.ES.lr": 0.02}']]
    assert len(plan(spec, recs.get).waiting) == 2


def test_higher_is_better_for_accuracy(tmp_path: Path) -> None:
    data = specs.spec(
        "acc",
        data=specs.two_moons(n_train=50, n_test=20),
        inference=[specs.svi("mfvi", steps=5)],
        tune={"grid": {"prior.scale": [0.5, 1.0]}, "metric": "accuracy"},
    )
    spec = specs.load(tmp_path, data)
    found = tuning_cells(spec)
    recs = {found[0][2].cell_id: _rec(accuracy=0.6), found[1][2].cell_id: _rec(accuracy=0.9)}
    assert plan(spec, recs.get).main[0].spec.prior.scale == 1.0


def test_run_tunes_then_runs_main_cells_and_resumes(tmp_path: Path) -> None:
    spec = specs.load(tmp_path, _tuned())
    out = tmp_path / "run"
    lines: list[str] = []
    res = run_spec(spec, out, workers=1, progress=False, log=lines.append)
    assert res.n_cells == 4 + 4 and res.n_ran == 8 and res.n_failed == 0
    recs = {r.name: json.loads(r.read_text()) for r in (out / "cells").glob("*.json")}
    val = {
        json.dumps(r["axes"].get("tune.prior.scale")): r["metrics"]["nll"]
        for r in recs.values()
        if r["axes"].get("tune") and r["axes"]["method"] == "MAP"
    }
    best = min(val, key=val.get)
    # a tuning cell scores on a part of the training rows: together they are the main
    # cell's training rows (455 of Boston's 506; its 51 test rows are never read)
    for r in recs.values():
        m = r["metrics"]
        assert (m["n_train"] + m["n_test"], m["n_test"]) == (
            (455, 91) if r["axes"].get("tune") else (455 + 51, 51)
        )
    results = pd.read_csv(out / "results.csv")
    assert set(results["method"]) == {"MAP", "ES"} and len(results) == 4
    assert set(results.loc[results.method == "MAP", "tuned.prior.scale"]) == {json.loads(best)}
    assert any(line.startswith("tuned MAP") for line in lines)
    report = (out / "report.md").read_text()
    assert "Tuned on split 0 (validation NLL)" in report and "chosen" in report
    again = run_spec(spec, out, workers=1, progress=False, log=lines.append)
    assert again.n_ran == 0 and again.n_skipped == 8


@pytest.mark.parametrize(
    ("tune", "sweep", "field", "says"),
    [
        ({"grid": {"prior.scael": [1.0]}}, None, "tune.grid.prior.scael", "not a spec field"),
        (
            {"grid": {"inference.XX.lr": [0.1]}},
            None,
            "tune.grid.inference.XX.lr",
            "not an inference",
        ),
        (
            {"grid": {"prior.scale": [1.0]}, "methods": ["XX"]},
            None,
            "tune.methods[0]",
            "'XX' is not",
        ),
        (
            {"grid": {"prior.scale": [1.0]}, "methods": ["ES"]},
            None,
            "tune.methods[0]",
            "no grid path",
        ),
        (
            {"grid": {"prior.scale": [1.0]}, "metric": "accuracy"},
            None,
            "tune.metric",
            "not a metric",
        ),
        (
            {"grid": {"prior.scale": [1.0]}},
            {"prior.scale": [1.0, 2.0]},
            "tune.grid.prior.scale",
            "also a sweep axis",
        ),
        (
            {"grid": {"prior.scale": [1.0]}, "validation_fraction": 1.5},
            None,
            "tune.validation_fraction",
            "less than 1",
        ),
        (
            {"grid": {"prior.scale": [0.1, 1.0], "inference.MAP.lr": list(range(1, 101))}},
            {"seed": list(range(100))},
            "tune",
            "at most 10,000",
        ),
        (
            {"grid": {"prior.scale": [1.0]}, "at": {"seed": 0}},
            None,
            "tune.at.seed",
            "not a sweep axis",
        ),
        ({"grid": {"prior.scale": [1.0]}, "at": {"split": 7}}, None, "tune.at.split", "not one of"),
        ({"grid": {"prior.scale": [-1.0]}}, None, "tune.grid", "does not validate"),
        # the main cells would take the chosen fraction and score on validation rows
        (
            {"grid": {"data.validation_fraction": [0.2, 0.5]}},
            None,
            "tune.grid.data.validation_fraction",
            "cannot be tuned",
        ),
        # what the sweep refuses, with its words: the same setting twice, no method
        ({"grid": {"prior.scale": [3, 3.0]}}, None, "tune.grid.prior.scale", "same setting"),
        ({"grid": {"model.width": [1, 1.0, True]}}, None, "tune.grid.model.width", "same setting"),
        ({"grid": {"prior.scale": [1.0]}, "methods": []}, None, "tune.methods", "empty"),
    ],
)
def test_bad_tune_sections_are_named(tmp_path: Path, tune, sweep, field, says, capsys) -> None:
    data = _tuned(tune)
    data["tune"] = {"at": {"split": 0}, **tune}
    if sweep is not None:
        data["sweep"] = {**data["sweep"], **sweep}
    path = specs.write_spec(tmp_path, data)
    with pytest.raises(SpecError) as e:
        load_spec(path)
    text = str(e.value)
    assert field in text and says in text, text
    assert main(["validate", str(path)]) == 2


def test_no_cell_scores_validation_rows_as_test_metrics(tmp_path: Path) -> None:
    """Only a tuning cell holds out a validation part: a spec, a sweep axis or a main cell
    with one is refused, so every main cell scores on the test part."""
    written = _tuned(data=specs.uci("boston", validation_fraction=0.2))
    with pytest.raises(SpecError, match="data.validation_fraction: is set only in the tuning"):
        load_spec(specs.write_spec(tmp_path, written))
    swept = _tuned(sweep={"split": [0, 1], "data.validation_fraction": [0.1, 0.2]})
    with pytest.raises(SpecError, match="sweep.data.validation_fraction"):
        load_spec(specs.write_spec(tmp_path, swept))
    spec = specs.load(tmp_path, _tuned())
    recs = {c.cell_id: _rec(nll=1.0) for _, _, c in tuning_cells(spec)}
    tp = plan(spec, recs.get)
    assert all(c.spec.data.validation_fraction is None for c in tp.main)
    assert all(c.spec.data.validation_fraction == 0.2 for c in tp.tuning)


@pytest.mark.parametrize(
    ("fraction", "says"),
    [(0.05, "holds out 1 for validation; at least 2"), (0.95, "leaves 1 to train on")],
)
def test_a_validation_part_too_small_to_score_or_train_is_refused(
    tmp_path: Path, fraction: float, says: str, capsys
) -> None:
    data = specs.spec(
        "tiny",
        data=specs.two_moons(n_train=20, n_test=20),
        inference=[specs.svi("mfvi", steps=3)],
        tune={"grid": {"prior.scale": [0.5, 1.0]}, "validation_fraction": fraction},
    )
    path = specs.write_spec(tmp_path, data)
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"tune.validation_fraction: {fraction} of the 20 training rows" in err and says in err
    assert "Traceback" not in err


def test_the_shipped_tuned_spec_runs_shrunk(tmp_path: Path) -> None:
    # the point methods only: the svi cells' pruning statistics take seconds each
    out = tmp_path / "run"
    # dropping methods drops their tune grid paths and their names in tune.methods
    shrink = ["inference=[ES, MAP]", "inference.ES.steps=5", "inference.MAP.steps=5"]
    shrink += ["sweep.split=[0, 1]", "sweep.data.name=[boston]", "model.width=4"]
    shrink += ["studies.0.trajectory_every=5"]
    shrink += ["tune.grid.prior.scale=[0.1, 1.0]", "tune.grid.inference.ES.lr=[0.005, 0.01]"]
    spec = SPECS / "overpruning_uci_tuned.yaml"
    args = ["run", str(spec), "--out", str(out), "--no-progress", "--workers", "1"]
    assert main([*args, *(a for s in shrink for a in ("--set", s))]) == 0
    res = pd.read_csv(out / "results.csv").set_index("method")
    assert len(res) == 4 and (res["status"] == "ok").all()
    assert res.loc["MAP", "tuned.prior.scale"].notna().all()
    assert res.loc["ES", "tuned.inference.ES.lr"].notna().all()
    assert len(list((out / "cells").glob("*.json"))) == 4 + 4  # tuning cells, main cells


def test_all_tuning_cells_failed_fails_the_main_cells_with_the_reason(
    tmp_path: Path, capsys
) -> None:
    # a learning rate of 1e30 makes the loss non-finite at once: every tuning cell fails
    data = specs.spec(
        "allfail",
        data=specs.two_moons(n_train=20, n_test=20),
        inference=[specs.svi("mfvi", steps=3)],
        sweep={"seed": [0, 1]},
        tune={"grid": {"inference.mfvi.lr": [1e30, 1e32]}},
    )
    path = specs.write_spec(tmp_path, data)
    out = tmp_path / "run"
    # every cell failed: exit status 1
    assert main(["run", str(path), "--out", str(out), "--no-progress", "--workers", "1"]) == 1
    res = pd.read_csv(out / "results.csv")
    assert len(res) == 2 and (res["status"] == "failed").all()
    assert res["error"].str.contains("every tuning cell of mfvi failed").all()
    assert "its main cells fail" in capsys.readouterr().err
    assert main(["status", str(out)]) == 0
    assert "failed 6" in capsys.readouterr().out  # 4 tuning cells, 2 main cells
