"""End to end through the CLI: run, resume, determinism, report, status, show, schema, list."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from zoo.cli import main


def test_run_writes_the_run_directory(tiny_spec: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    assert main(["run", str(tiny_spec), "--out", str(out), "--no-progress"]) == 0
    cells = sorted((out / "cells").glob("*.json"))
    assert len(cells) == 4
    rec = json.loads(cells[0].read_text())
    assert rec["status"] == "ok"
    assert {"accuracy", "nll", "brier", "ece", "neg_elbo", "time_s"} <= set(rec["metrics"]) | {
        "time_s"
    }
    assert rec["config"]["method"]["name"] == "mfvi"
    res = pd.read_csv(out / "results.csv")
    assert list(res.columns[:3]) == ["method", "seed", "model.depth"]
    assert {"accuracy", "nll", "brier", "ece", "neg_elbo"} <= set(res.columns)
    assert (res["status"] == "ok").all()
    assert res["accuracy"].min() > 0.8
    summ = pd.read_csv(out / "summary.csv")
    assert len(summ) == 2 and (summ["n"] == 2).all()
    assert {"accuracy_mean", "accuracy_sem"} <= set(summ.columns)
    for f in (
        "spec.yaml",
        "report.md",
        "report.html",
        "figures/accuracy_vs_model_depth.png",
        "figures/neg_elbo_vs_model_depth.png",
    ):
        assert (out / f).is_file(), f
    assert "data:image/png;base64," in (out / "report.html").read_text()
    assert (out / "spec.yaml").read_text().startswith("# bnn-zoo spec_version: ")
    assert not list(out.rglob("*.tmp"))

    # resume: nothing recomputed, same results
    before = {p.name: p.stat().st_mtime_ns for p in cells}
    assert main(["run", str(tiny_spec), "--out", str(out), "--no-progress"]) == 0
    assert {p.name: p.stat().st_mtime_ns for p in cells} == before
    assert "4 of 4 cells already done" in capsys.readouterr().err

    # determinism: a fresh run of the same spec and seeds gives byte-identical results.csv
    out2 = tmp_path / "run2"
    assert main(["run", str(tiny_spec), "--out", str(out2), "--no-progress"]) == 0
    assert (out / "results.csv").read_bytes() == (out2 / "results.csv").read_bytes()

    # report and status rebuild from the stored cells only
    (out / "report.md").unlink()
    assert main(["report", str(out)]) == 0
    assert (out / "report.md").is_file()
    assert main(["status", str(out)]) == 0
    assert "done 4, failed 0, pending 0" in capsys.readouterr().out


def test_failing_cell_is_recorded_and_others_go_on(tiny_spec: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    # a learning rate that passes validation (a finite float32) but makes the ELBO blow up
    # at run time: that cell fails, the other one runs and is stored
    args = [
        "run",
        str(tiny_spec),
        "--out",
        str(out),
        "--no-progress",
        "--workers",
        "1",
        "--set",
        "sweep.seed=[0]",
        "--set",
        "sweep.model.depth=[1]",
        "--set",
        "sweep.inference.mfvi.lr=[0.02, 1e30]",
    ]
    assert main(["validate", str(tiny_spec), *args[7:]]) == 0  # nothing to refuse up front
    assert main(args) == 1
    res = pd.read_csv(out / "results.csv")
    assert list(res["inference.mfvi.lr"]) == [0.02, 1e30]
    assert list(res["status"]) == ["ok", "failed"]
    assert res.loc[0, "accuracy"] > 0.8
    assert res.loc[1, "error"].split(":")[0] in ("ValueError", "FloatingPointError")
    assert "Failed cells" in (out / "report.md").read_text()


def test_report_of_a_run_directory_without_cells(tiny_spec: Path, tmp_path: Path, capsys) -> None:
    from zoo.execution.store import RunStore
    from zoo.spec.load import load_spec

    store = RunStore(tmp_path / "run")  # a run stopped before its first cell was stored
    store.prepare()
    store.write_spec(load_spec(tiny_spec))
    assert main(["report", str(store.root)]) == 0
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    assert "no finished cell to summarize yet" in captured.out
    assert "No cell is stored yet (0 of 4 in the spec)" in (store.root / "report.md").read_text()
    assert pd.read_csv(store.root / "results.csv").empty
    summary = pd.read_csv(store.root / "summary.csv")
    assert summary.empty and {"method", "model.depth", "n"} <= set(summary.columns)


@pytest.mark.parametrize("version", ["old", "none", "new"])
def test_run_directory_of_another_spec_version_is_refused(
    version: str, tiny_spec: Path, tmp_path: Path, capsys
) -> None:
    """No migration: every command refuses it (exit 2, no traceback) and touches nothing."""
    from zoo.execution.store import SPEC_VERSION, RunStore
    from zoo.spec.load import load_spec

    store = RunStore(tmp_path / "run")
    store.prepare()
    store.write_spec(
        load_spec(tiny_spec), {"old": SPEC_VERSION - 1, "new": SPEC_VERSION + 1}.get(version, 0)
    )
    if version == "none":  # a directory written before spec versions: no version line
        text = store.spec_path.read_text().split("\n", 1)[1]
        store.spec_path.write_text(text)
    store.write_cell({"cell_id": "c_1", "status": "ok", "metrics": {}}, {".nc": b"NC"})
    files = {p: p.read_bytes() for p in store.root.rglob("*") if p.is_file()}
    for cmd in (
        ["status", str(store.root)],
        ["report", str(store.root)],
        ["run", str(store.root)],
        ["run", str(tiny_spec), "--out", str(store.root)],
    ):
        assert main(cmd) == 2, cmd
        err = capsys.readouterr().err
        assert "Traceback" not in err
        if version == "new":
            assert "made by a newer bnn-zoo" in err and "upgrade" in err
        else:
            assert "made by an older bnn-zoo" in err and "into a fresh --out" in err
    assert {p: p.read_bytes() for p in store.root.rglob("*") if p.is_file()} == files


def test_show_schema_list(tiny_spec: Path, capsys) -> None:
    assert main(["show", str(tiny_spec), "--cell", "3"]) == 0
    out = capsys.readouterr().out
    assert "# 4 cells" in out
    assert "layer2.weight" in out and "shape=(2, " in out
    assert main(["schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert "inference" in schema["properties"]
    assert main(["list"]) == 0
    assert "two_moons_depth.yaml" in capsys.readouterr().out


def test_cli_bad_input_exit_2_without_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "name: x\ndata: {kind: two_moons}\nmodel: {kind: mlp, depth: -1, width: 3}\n"
        "inference: [{name: m, kind: svi, guide: {kind: mean_field}, steps: 1}]\n"
    )
    for args in (
        ["run", str(bad)],
        ["show", str(bad)],
        ["report", str(tmp_path)],
        ["run", str(tmp_path / "missing.yaml")],
    ):
        r = subprocess.run(
            [sys.executable, "-m", "zoo.cli", *args], capture_output=True, text=True, cwd=tmp_path
        )
        assert r.returncode == 2, (args, r.stderr)
        assert "Traceback" not in r.stderr
        assert r.stderr.strip()


def test_help_answers_questions() -> None:
    r = subprocess.run([sys.executable, "-m", "zoo.cli", "--help"], capture_output=True, text=True)
    assert r.returncode == 0
    assert "resume" in r.stdout and "exit status" in r.stdout
    assert "--device cuda" in r.stdout and "migrate" not in r.stdout
    r = subprocess.run(
        [sys.executable, "-m", "zoo.cli", "run", "--help"], capture_output=True, text=True
    )
    assert "--device DEVICE" in r.stdout and "cuda:N" in r.stdout
    with pytest.raises(SystemExit):
        main(["run", "--help"])


def test_regression_csv_with_learned_noise(tmp_path: Path) -> None:
    import numpy as np

    rng = np.random.default_rng(1)
    x = rng.normal(size=(120, 3))
    y = x @ [1.0, -0.5, 0.2] * 10 + 50 + rng.normal(size=120)
    rows = "\n".join(",".join(f"{v:.5f}" for v in (*xi, yi)) for xi, yi in zip(x, y, strict=True))
    (tmp_path / "reg.csv").write_text("a,b,c,price\n" + rows)
    spec = tmp_path / "reg.yaml"
    spec.write_text(
        "name: reg\ndata: {kind: csv, path: reg.csv, target: price}\n"
        "model: {kind: mlp, depth: 0}\nlikelihood: {kind: gaussian, noise: learned}\n"
        "inference: [{name: mfvi, kind: svi, guide: {kind: mean_field, init_scale: 0.01},"
        " steps: 400, lr: 0.05, predictive_samples: 50}]\n"
        "sweep: {seed: [0]}\nreport: {x: method, figures: [rmse, nll]}\n"
    )
    out = tmp_path / "run"
    assert main(["run", str(spec), "--out", str(out), "--no-progress"]) == 0
    res = pd.read_csv(out / "results.csv")
    assert res.loc[0, "status"] == "ok"
    # metrics are in the target's original units: noise sd 1 there, so RMSE near 1
    assert 0.6 < res.loc[0, "rmse"] < 1.6
    assert "accuracy" not in res.columns


def test_help_and_validate_do_not_import_torch(tiny_spec: Path) -> None:
    # the import floors (no cycles, no late project imports) are tests/test_layers.py's
    code = (
        "import sys; from zoo.cli import _parser, main; _parser(); "
        f"assert main(['validate', {str(tiny_spec)!r}]) == 0; "
        "assert 'torch' not in sys.modules, 'torch imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
