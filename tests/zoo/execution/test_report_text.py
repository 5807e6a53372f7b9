"""The report's words as a reader sees them in report.md: no doubled punctuation, no escapes
shown where Markdown needs none."""

from __future__ import annotations

import pandas as pd

from zoo.execution.report_settings import run_settings
from zoo.spec import load_spec

CSV_SPEC = """\
name: csv_settings
data: {{kind: csv, path: {path}, target: y, delimiter: "{delimiter}"}}
model: {{kind: mlp, depth: 1, width: 4}}
likelihood: {{kind: gaussian, noise: learned}}
inference:
  - {{name: m, kind: svi, guide: {{kind: mean_field}}, steps: 2}}
studies: []
"""


def test_a_punctuation_value_is_quoted_in_the_settings(tmp_path) -> None:
    for delimiter, shown in ((",", "delimiter ','"), (";", "delimiter ';'")):
        csv = tmp_path / "d.csv"
        csv.write_text(f"a{delimiter}y\n1{delimiter}2\n3{delimiter}4\n")
        spec_file = tmp_path / "s.yaml"
        spec_file.write_text(CSV_SPEC.format(path=csv, delimiter=delimiter))
        (data, *_) = run_settings(load_spec(spec_file), pd.DataFrame())
        assert shown in data and f"delimiter {delimiter}," not in data, data
        assert "kind csv" not in data and data.startswith("Data: csv, path ")
        assert "target y," in data  # a word stays bare


def test_the_console_summary_shows_no_nan_grade(tmp_path, capsys) -> None:
    from zoo.cli.summary import print_summary

    pd.DataFrame(
        {
            "method": ["mfvi", "nuts"],
            "model.depth": [1, 1],
            "n": [3, 3],
            "nll_mean": [0.3, 0.2],
            "kl_diag_full_mean": [float("nan"), 8.35],
            "grade": [None, "bronze"],
            "n_grade_failed": [0, 1],
        }
    ).to_csv(tmp_path / "summary.csv", index=False)
    print_summary(tmp_path)
    mfvi, nuts = capsys.readouterr().out.split("\n\n")
    assert "NaN" not in mfvi + nuts and "grade" not in mfvi  # MF-VI cells are not graded
    assert "bronze; 1 failed left out" in nuts and "n_grade_failed" not in nuts


def test_a_failed_cell_sets_the_exit_status_when_stdout_is_a_closed_pipe(
    tiny_spec, tmp_path
) -> None:
    """``zoo run SPEC | head``: the summary cannot be printed, the status still says 1."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    sets = ["sweep.seed=[0]", "sweep.model.depth=[1]", "inference.mfvi.lr=1e30"]
    sets += ["inference.mfvi.steps=2", "inference.mfvi.pretrain_epochs=0"]
    args = [sys.executable, "-m", "zoo.cli", "run", str(tiny_spec), "--out", str(tmp_path / "r")]
    args += ["--no-progress", "--workers", "1", *(a for s in sets for a in ("--set", s))]
    env = {**os.environ, "PYTHONPATH": str(root)}
    with subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env) as proc:
        proc.stdout.close()  # the reader is gone before anything is printed
        err = proc.stderr.read().decode()
        assert proc.wait(timeout=300) == 1, err
    assert "1 of 1 cells failed" in err and "Traceback" not in err
