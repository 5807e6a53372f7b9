"""Tests for reports.render."""

import re

import numpy as np
import pandas as pd
import pytest

from reports.render import figure_name, plot_metric_vs, render_report
from reports.tables import summarize

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _results() -> pd.DataFrame:
    rows = []
    rng = np.random.default_rng(0)
    i = 0
    for depth in (1, 2, 3):
        for method in ("mean_field", "full_rank"):
            for seed in (0, 1):
                rows.append(
                    {
                        "cell_id": f"c{i}",
                        "model.depth": depth,
                        "method": method,
                        "seed": seed,
                        "status": "ok",
                        "error": "",
                        "time_s": 0.1,
                        "accuracy": 0.9 - 0.05 * depth + 0.01 * rng.normal(),
                        "nll": 0.3 + 0.1 * depth + 0.01 * rng.normal(),
                    }
                )
                i += 1
    rows.append(
        {
            "cell_id": "c_bad",
            "model.depth": 4,
            "method": "mean_field",
            "seed": 0,
            "status": "failed",
            "error": "RuntimeError: <b>nan</b> | loss",
            "time_s": 0.0,
            "accuracy": np.nan,
            "nll": np.nan,
        }
    )
    return pd.DataFrame(rows)


def test_figure_name_sanitizes():
    assert figure_name("accuracy", "model.depth") == "accuracy_vs_model_depth.png"


def test_plot_metric_vs_returns_png(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    summary = summarize(_results(), ["accuracy", "nll"])
    png = plot_metric_vs(summary, "model.depth", "accuracy", "method")
    assert isinstance(png, bytes) and png.startswith(PNG_MAGIC)
    assert list(tmp_path.iterdir()) == []  # pure: nothing written


def test_plot_metric_vs_no_hue_categorical_x_and_empty():
    summary = summarize(_results(), ["accuracy"], by=["method"])
    assert plot_metric_vs(summary, "method", "accuracy", None).startswith(PNG_MAGIC)
    empty = summary.iloc[0:0]
    assert plot_metric_vs(empty, "method", "accuracy", None).startswith(PNG_MAGIC)
    with pytest.raises(KeyError, match="model.width"):
        plot_metric_vs(summary, "model.width", "accuracy", None)


def test_figure_png_is_deterministic():
    from matplotlib.figure import Figure

    from reports.render import figure_png

    def png():
        fig = Figure(figsize=(2, 2))
        fig.add_subplot().plot([0, 1], [1, 0])
        return figure_png(fig)

    assert png().startswith(PNG_MAGIC) and png() == png()


def test_render_report_returns_self_contained_escaped_files(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    results = _results()
    summary = summarize(results, ["accuracy", "nll"])
    spec = "name: demo\nmodel:\n  depth: [1, 2, 3]\n"
    written = render_report(
        title="Depth <sweep>",
        spec_text=spec,
        results=results,
        summary=summary,
        x="model.depth",
        hue="method",
        metrics=["accuracy", "nll"],
        notes=["a note with <script>alert(1)</script>"],
    )
    assert set(written) == {
        "report.md",
        "report.html",
        "figures/accuracy_vs_model_depth.png",
        "figures/nll_vs_model_depth.png",
    }
    assert all(isinstance(b, bytes) for b in written.values())
    assert list(tmp_path.iterdir()) == []  # pure: the store writes the files
    assert written["figures/accuracy_vs_model_depth.png"].startswith(PNG_MAGIC)

    md = written["report.md"].decode()
    assert md.startswith("# Depth &lt;sweep&gt;")
    assert "](figures/accuracy_vs_model_depth.png)" in md
    assert "| model.depth | method | accuracy | nll | n |" in md
    assert "## Failed cells" in md and "c_bad" in md
    assert "\\| loss" in md  # pipe escaped inside the table
    assert "```yaml\nname: demo\nmodel:\n  depth: [1, 2, 3]\n```" in md
    assert "<script>" not in md
    assert " ± " in md

    page = written["report.html"].decode()
    assert page.count("data:image/png;base64,") == 2
    srcs = re.findall(r'src="([^"]*)"', page)
    assert srcs and all(s.startswith("data:image/png;base64,") for s in srcs)
    assert "http://" not in page and "https://" not in page
    assert "<script>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "&lt;b&gt;nan&lt;/b&gt;" in page
    assert "<title>Depth &lt;sweep&gt;</title>" in page
    assert "name: demo" in page


def test_render_report_all_failed_still_gives_a_report():
    results = _results().assign(status="failed", error="OOM")
    summary = summarize(results, ["accuracy"])
    written = render_report(
        title="all failed",
        spec_text=None,
        results=results,
        summary=summary,
        x="model.depth",
        hue="method",
        metrics=["accuracy"],
    )
    assert set(written) == {"report.md", "report.html"}
    md = written["report.md"].decode()
    assert "No cell finished successfully" in md
    assert "OOM" in md
    assert "```yaml" not in md
    page = written["report.html"].decode()
    assert "No cell finished successfully" in page
    assert "<img" not in page


def test_extra_varying_group_key_gets_its_own_lines():
    res = pd.concat([_results().assign(**{"model.width": w}) for w in (16, 64)])
    summary = summarize(res, ["accuracy"])
    assert "model.width" in summary.columns
    png = plot_metric_vs(summary, "model.depth", "accuracy", "method")
    assert png.startswith(PNG_MAGIC)


def test_reports_package_imports_no_torch_pyro_or_zoo():
    import subprocess
    import sys

    code = (
        "import sys, pkgutil, importlib, reports; "
        "[importlib.import_module('reports.' + m.name) for m in pkgutil.iter_modules(reports.__path__)]; "
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'pyro', 'zoo')); "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_reports_package_writes_no_files():
    """Report code returns bytes; the run store is the only writer (DESIGN.md)."""
    from pathlib import Path

    import reports

    pattern = re.compile(
        r"\.write_(bytes|text)\(|open\([^)]*[\"'][wa]b?[\"']|os\.replace|to_csv\(|savefig\((?!buf)"
    )
    for path in Path(reports.__file__).parent.glob("*.py"):
        hits = [ln for ln in path.read_text().splitlines() if pattern.search(ln)]
        assert not hits, f"{path.name} writes files: {hits}"
