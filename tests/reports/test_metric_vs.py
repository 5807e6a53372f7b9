"""Tests for the metric-vs-axis figures, the headline and the summary tables of a report."""

import re

import numpy as np
import pandas as pd
import pytest

from reports.document import Document, Table, to_markdown
from reports.figures.metric_vs import figure_name, metric_figure, plot_metric_vs
from reports.headline import headline
from reports.labels import METRIC_LABELS
from reports.tables import failed_table, summarize, summary_tables, t_half_width
from zoo.studies.price_of_mf import COMPANIONS
from zoo.studies.price_of_mf import LABELS as PMF_LABELS

LABELS = {**METRIC_LABELS, **PMF_LABELS}

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

    from reports.figures import figure_png

    def png():
        fig = Figure(figsize=(2, 2))
        fig.add_subplot().plot([0, 1], [1, 0])
        return figure_png(fig)

    assert png().startswith(PNG_MAGIC) and png() == png()


def test_summary_and_failed_tables_of_a_report(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    results = _results()
    summary = summarize(results, ["accuracy", "nll"])
    ((header, rows),) = summary_tables(summary, ["accuracy", "nll"])
    assert header == ["model.depth", "method", "accuracy", "nll", "n"]
    assert len(rows) == 6 and all(" ± " in r[2] for r in rows)
    failed = failed_table(results[results["status"] != "ok"])
    md = to_markdown(Document("t", [Table(header, rows), Table(*failed, cls="failed")]))
    assert "| model.depth | method | accuracy | nll | n |" in md
    assert "c_bad" in md and "\\| loss" in md  # pipe escaped inside the table
    assert list(tmp_path.iterdir()) == []  # pure: the store writes the files


def test_all_failed_gives_no_summary_table_but_the_errors():
    results = _results().assign(status="failed", error="OOM")
    summary = summarize(results, ["accuracy"])
    assert summary.empty and summary_tables(summary, ["accuracy"]) == []
    header, rows = failed_table(results)
    assert header[-1] == "error" and all(r[-1] == "OOM" for r in rows)


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
        "[importlib.import_module(m.name) for m in pkgutil.walk_packages(reports.__path__, 'reports.')]; "
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
    for path in Path(reports.__file__).parent.rglob("*.py"):
        hits = [ln for ln in path.read_text().splitlines() if pattern.search(ln)]
        assert not hits, f"{path.name} writes files: {hits}"


# ---------------------------------------------------------------- results for people


def _kl_results(seeds=(0, 1, 2), w_excess=True) -> pd.DataFrame:
    """nuts: kl 12 +- ... at depth 1 falling to 5 at depth 4; mfvi has no kl (NaN)."""
    rows = []
    kl = {1: [10.0, 12.0, 14.0], 4: [4.0, 5.0, 6.0]}
    for depth in (1, 4):
        for method in ("mfvi", "nuts"):
            for i, seed in enumerate(seeds):
                row = {
                    "method": method,
                    "seed": seed,
                    "model.depth": depth,
                    "status": "ok",
                    "cell_id": f"{method}{depth}{seed}",
                    "accuracy": 0.8 + 0.01 * i,
                    "kl_diag_full": kl[depth][i % 3] if method == "nuts" else np.nan,
                    "w_error": -0.1 * depth if method == "nuts" else np.nan,
                }
                if w_excess:
                    row["w_excess"] = 0.5 * depth if method == "nuts" else np.nan
                rows.append(row)
    return pd.DataFrame(rows)


def _summary(results, metrics):
    return summarize(results, metrics, by=["method", "model.depth"])


def test_headline_states_the_result_computed_from_the_numbers():
    res = _kl_results()
    s = _summary(res, ["kl_diag_full", "accuracy"])
    # kl of nuts: 10, 12, 14 -> 12 +- 2/sqrt(3) s.e.; 4, 5, 6 -> 5 +- 1/sqrt(3); the 95%
    # t-interval with 2 degrees of freedom is 4.303 s.e.: 4.97 and 2.48
    assert headline(s, "kl_diag_full", "model.depth", "method", labels=LABELS) == (
        "KL(q_diag ‖ q_full) [nats] of nuts falls from 12 ± 5 at depth 1 to 5 ± 2.5 at "
        "depth 4 (mean ± 95% t-interval over 3 seeds)."
    )
    # accuracy is the same at both depths: within the intervals, said so, for each method
    text = headline(s, "accuracy", "model.depth", "method")
    assert text.startswith(
        "test accuracy of mfvi changes by less than its 95% intervals: 0.81 ± 0.025 at "
        "depth 1, 0.81 ± 0.025 at depth 4; of nuts changes by less"
    )
    # other numbers, another sentence: nothing is hard-coded
    res.loc[(res["method"] == "nuts") & (res["model.depth"] == 4), "kl_diag_full"] += 20
    rises = headline(
        _summary(res, ["kl_diag_full"]), "kl_diag_full", "model.depth", "method", labels=LABELS
    )
    assert "rises from 12 ± 5 at depth 1 to 25 ± 2.5 at depth 4" in rises
    # a categorical x: the mean per value (0.80, 0.81, 0.82 twice: sd 0.0089, s.e. 0.0037,
    # t with 5 degrees of freedom 2.571: 0.0094)
    by_method = summarize(res, ["accuracy"], by=["method"])
    assert headline(by_method, "accuracy", "method", "method") == (
        "test accuracy: mfvi 0.81 ± 0.0094, nuts 0.81 ± 0.0094 "
        "(mean ± 95% t-interval over 6 seeds)."
    )
    assert headline(s, "nope", "model.depth", "method") is None


def _figures(monkeypatch):
    import reports.figures.metric_vs as metric_vs

    drawn = []
    real = metric_vs.figure_png

    def keep(fig):
        drawn.append(fig)
        return real(fig)

    monkeypatch.setattr(metric_vs, "figure_png", keep)
    return drawn


def test_figures_are_titled_for_people_with_units_error_bars_and_seeds(monkeypatch):
    drawn = _figures(monkeypatch)
    res = _kl_results()
    _, caption = metric_figure(
        _summary(res, ["kl_diag_full"]),
        "model.depth",
        "kl_diag_full",
        "method",
        results=res,
        labels=LABELS,
    )
    (ax,) = drawn[0].get_axes()
    assert ax.get_ylabel() == "KL(q_diag ‖ q_full) [nats]"
    assert ax.get_xlabel() == "hidden layers (model.depth)"
    title = " ".join(ax.get_title().split())
    assert "KL(q_diag ‖ q_full) vs depth" in title and "mean ± 95% t-interval over 3 seeds" in title
    assert len(ax.collections[-1].get_offsets()) == 6  # each seed's value: 2 depths x 3
    assert caption.startswith(
        "KL(q_diag ‖ q_full) [nats] against hidden layers (model.depth): mean ± 95% t-interval"
    )
    # six seeds: means only
    drawn.clear()
    many = _kl_results(seeds=range(6))
    plot_metric_vs(
        _summary(many, ["kl_diag_full"]),
        "model.depth",
        "kl_diag_full",
        "method",
        results=many,
        labels=LABELS,
    )
    assert not [c for c in drawn[0].get_axes()[0].collections if len(c.get_offsets()) == 12]


def test_w_error_is_never_plotted_alone(monkeypatch):
    drawn = _figures(monkeypatch)
    res = _kl_results()
    metric_figure(
        _summary(res, ["w_error", "w_excess"]),
        "model.depth",
        "w_error",
        "method",
        results=res,
        companion=COMPANIONS["w_error"],
        labels=LABELS,
    )
    left, right = drawn[0].get_axes()  # beside its bias-corrected companion
    assert "Wasserstein error" in left.get_ylabel() and "Wasserstein excess" in right.get_ylabel()
    drawn.clear()
    alone = _kl_results(w_excess=False)
    plot_metric_vs(_summary(alone, ["w_error"]), "model.depth", "w_error", "method", labels=LABELS)
    (ax,) = drawn[0].get_axes()  # no companion: the label says what it is
    assert "biased below 0" in ax.get_ylabel().replace("\n", " ")


def test_wide_summary_tables_are_split_and_non_finite_means_marked():
    res = _kl_results()
    metrics = [f"m{i}" for i in range(12)]
    res = res.assign(**{m: np.arange(len(res), dtype=float) + i for i, m in enumerate(metrics)})
    res.loc[0, "m0"] = np.nan  # mfvi, depth 1, seed 0
    summary = summarize(res, [*metrics, "kl_diag_full"], by=["method", "model.depth"])
    tables = summary_tables(summary, ["kl_diag_full", *metrics])
    md = to_markdown(Document("t", [Table(h, r) for h, r in tables]))
    headers = [ln for ln in md.splitlines() if ln.startswith("| method | model.depth |")]
    assert len(headers) == 3  # 13 metrics, at most 5 per table
    assert all(ln.count("|") - 1 <= 2 + 5 + 1 for ln in headers)
    assert {m for ln in headers for m in ln.split(" | ")} >= {*metrics, "kl_diag_full"}
    # the mean over the finite values only, marked, and the mark explained
    assert "| mfvi | 1 | - | 1.5 ± 6.4 [2/3] | 2 ± 2.5 |" in md
    # a table of sampler-only metrics has no rows for the method without them
    md = to_markdown(
        Document("t", [Table(h, r) for h, r in summary_tables(summary, ["kl_diag_full"])])
    )
    assert "| nuts | 1 |" in md and "| mfvi |" not in md


def test_any_categorical_x_is_drawn_as_categories(monkeypatch):
    drawn = _figures(monkeypatch)
    res = _kl_results().assign(
        **{"data.path": lambda d: np.where(d["seed"] == 1, "/a/x.csv", "/b/y.csv")}
    )
    for x in ("method", "data.path"):
        by = list(dict.fromkeys(["method", x]))
        png, _ = metric_figure(
            summarize(res, ["accuracy"], by=by), x, "accuracy", "method", results=res
        )
        assert png.startswith(PNG_MAGIC)
        ax = drawn[-1].get_axes()[0]
        assert [t.get_text() for t in ax.get_xticklabels()] == (
            ["mfvi", "nuts"] if x == "method" else ["/a/x.csv", "/b/y.csv"]
        )


def test_only_the_figures_package_draws():
    """Numbers and tables never import matplotlib: every figure is in reports/figures."""
    from pathlib import Path

    import reports

    root = Path(reports.__file__).parent
    drawing = re.compile(r"^(from|import) (matplotlib|reports\.figures)", re.M)
    allowed = {"__init__.py", "document.py"}  # the package's front door; the renderer
    found = [p.name for p in root.glob("*.py") if drawing.search(p.read_text())]
    assert set(found) <= allowed, found


def test_the_quoted_error_is_the_95_percent_t_interval_of_the_mean():
    from scipy import stats

    res = _kl_results(seeds=(0, 1))  # 2 seeds: 1 degree of freedom, t = 12.71
    s = _summary(res, ["kl_diag_full"])
    row = s[(s["method"] == "nuts") & (s["model.depth"] == 1)].iloc[0]
    assert row["kl_diag_full_sem"] == pytest.approx(1.0)  # 10 and 12
    assert row["kl_diag_full_ci95"] == pytest.approx(stats.t.ppf(0.975, 1))
    assert np.isnan(t_half_width([1.0], [1])[0])  # one value: no interval
    assert t_half_width([2.0], [3])[0] == pytest.approx(2 * 4.3027, rel=1e-4)
