"""The price-of-mean-field report: the closed-form W2 leads, the KL's two references.

Hand-made results tables: one from a run with the ESS-based reference and the W2 floor
(kl_bias_ess, kl_ess_n, kl_debiased, kl_debiased_se, w2_null) and one from an older run without them.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from reports.figures.metric_vs import metric_figure
from reports.labels import METRIC_LABELS
from reports.tables import summarize
from zoo.spec.load import load_spec
from zoo.studies.price_of_mf import COMPANIONS, LABELS
from zoo.studies.price_of_mf.report import W2_FIGURE, price_of_mf_sections

SPEC = """\
name: pmf_report
seed: 0
data: {kind: two_moons, n_train: 60, n_test: 50, noise: 0.1}
model: {kind: mlp, depth: 1, width: 3}
inference:
  - {name: mfvi, kind: svi, guide: {kind: mean_field}, steps: 20, predictive_samples: 5}
  - {name: nuts, kind: nuts, init_from: mfvi, warmup: 20, draws: 10, chains: 2,
     vectorize_chains: true, max_tree_depth: 4, predictive_draws: 10}
studies:
  - {kind: price_of_mean_field, gaussian_fit: {cov: empirical}, kl_target_draws: 1000}
sweep:
  model.depth: [1, 2]
  seed: [0, 1, 2]
report:
  figures: [kl_diag_full, w2_diag_full]
"""


@pytest.fixture(scope="module")
def spec(tmp_path_factory):
    p = tmp_path_factory.mktemp("pmf") / "spec.yaml"
    p.write_text(SPEC)
    return load_spec(p)


def _results(new: bool, aligned: bool = False) -> pd.DataFrame:
    rows = []
    for depth in (1, 2):
        for seed in (0, 1, 2):
            kl, null = 8.0 / depth + 0.1 * seed, 2.0 + 0.01 * seed
            row = {
                "method": "nuts",
                "seed": seed,
                "model.depth": depth,
                "status": "ok",
                "cell_id": f"nuts{depth}{seed}",
                "kl_diag_full": kl,
                "kl_null": null,
                "kl_null_sd": 0.05,
                "kl_excess": kl - null,
                "kl_null_draws": 1000.0 + seed,
                "w2_diag_full": 1.5 / depth,
                "w_error": -0.3 / depth,
                "w_excess": 4.0 / depth,
                "n_draws": 2000,
                "dim": 97,
            }
            if new:
                bias = 2.1 + 0.01 * seed
                row.update(
                    kl_bias_ess=bias,
                    kl_ess_n=950.0 + seed,
                    kl_debiased=kl - bias,
                    kl_debiased_se=0.3,
                    w2_null=0.4 + 0.01 * seed,
                )
            if aligned:
                row.update(
                    kl_aligned=3.0 / depth + 0.1 * seed,
                    kl_aligned_bias=1.0,
                    kl_alignment_null=0.5,
                    kl_aligned_debiased=3.0 / depth + 0.1 * seed - 1.5,
                    kl_aligned_debiased_se=0.2,
                    kl_relabelled=1.0,
                    w2_aligned=0.7 / depth,
                )
            rows.append(row)
    rows.append(
        {"method": "mfvi", "seed": 0, "model.depth": 1, "status": "ok", "cell_id": "mfvi10"}
    )
    return pd.DataFrame(rows)


def _section(spec, new: bool, aligned: bool = False):
    (sec,) = price_of_mf_sections(_results(new, aligned), None, spec)
    return sec, " ".join(sec.paragraphs)


def test_the_debiased_kl_leads_beside_the_kl_and_the_shift_null(spec) -> None:
    sec, text = _section(spec, new=True)
    assert "an identity, not a check" in text  # kl_null_draws is said to be one
    assert "the KL's own effective n" in text
    assert "It is not the ESS of the weights' means" in text
    header, rows = sec.tables[0]
    assert header[:2] == ["method", "model.depth"]
    kl = header.index("KL(q_diag ‖ q_full) of the draws as sampled (kl_diag_full)")
    assert header[kl + 1 : kl + 3] == [
        "debiased KL (kl_debiased)",
        "its chain-group s.e. (kl_debiased_se)",
    ]
    assert header.index("shift null (kl_null)") > kl + 2
    assert not [h for h in header if "excess_ess" in h]
    assert len(rows) == 2 and rows[0][:2] == ["nuts", "1"]  # mfvi has no KL
    bias = header.index("exact bias at the KL's n (kl_bias_ess)")
    # mean ± the 95% t half-width over the 3 seeds: t(0.975, 2) = 4.303 standard errors
    assert rows[0][bias] == "2.11 ± 0.025"  # s.e. 0.0058
    assert rows[0][header.index("the KL's effective n (kl_ess_n)")] == "951 ± 2.5"  # s.e. 0.58
    # debiased 8.1 - 2.11 = 5.99 over the seeds; its within-cell error of the seeds' mean
    # is sqrt(3 * 0.3^2) / 3 = 0.1732
    assert rows[0][kl + 1] == "5.99 ± 0.22"  # s.e. 0.052
    assert rows[0][kl + 2] == "0.1732"
    kl_fig = dict(sec.figures)["kl_null"]
    labels = kl_fig.axes[0].get_legend_handles_labels()[1]
    assert "exact bias at the KL's n (a null) (nuts)" in labels
    assert "debiased KL (nuts)" in labels


def test_the_aligned_debiased_kl_leads_with_its_alignment_null_beside_it(spec) -> None:
    sec, text = _section(spec, new=True, aligned=True)
    header, rows = sec.tables[0]
    assert header[2:6] == [
        "aligned KL less its bias and alignment null (kl_aligned_debiased)",
        "its chain-group s.e. (kl_aligned_debiased_se)",
        "alignment null (kl_alignment_null)",
        "KL(q_diag ‖ q_full) of the draws as sampled (kl_diag_full)",
    ]
    # depth 1: 3.0 + 0.1 seed - 1.5 over seeds 0-2 -> 1.6, s.e. 0.058, 95% t half-width
    # 4.303 x 0.058 = 0.25; the raw KL 8.1 beside it
    assert rows[0][2:6] == ["1.6 ± 0.25", "0.1155", "0.5 ± 0", "8.1 ± 0.25"]
    assert "The headline is kl_aligned_debiased" in text
    assert "kl_alignment_null, the column beside it" in text
    ((w_header, w_rows),) = sec.tables[1:]
    assert w_header[2].startswith("W2(q_diag, q_full) of the aligned draws")
    assert w_rows[0][2].startswith("0.7")
    labels = dict(sec.figures)["kl_null"].axes[0].get_legend_handles_labels()[1]
    assert "aligned KL less bias and alignment null (nuts)" in labels
    assert "alignment null (nuts)" in labels
    # a run without the aligned columns: the raw KL leads, no headline paragraph
    header, _ = _section(spec, new=True)[0].tables[0]
    assert header[2] == "KL(q_diag ‖ q_full) of the draws as sampled (kl_diag_full)"
    assert "The headline is" not in _section(spec, new=True)[1]


def test_a_table_keeps_rows_that_lack_its_first_column(spec) -> None:
    res = _results(new=True, aligned=True)
    res.loc[res["model.depth"] == 2, ["kl_aligned_debiased", "kl_aligned_debiased_se"]] = None
    (sec,) = price_of_mf_sections(res, None, spec)
    _, rows = sec.tables[0]
    assert [r[:2] for r in rows] == [["nuts", "1"], ["nuts", "2"]]
    assert rows[1][2] == "-" and rows[1][5] == "4.1 ± 0.25"


def test_an_older_run_leaves_the_reference_rows_out(spec) -> None:
    sec, text = _section(spec, new=False)
    header, _ = sec.tables[0]
    assert not [h for h in header if "kl_bias_ess" in h or "kl_debiased" in h]
    assert "kl_ess_n" not in " ".join(header) and "the KL's own effective n" not in text
    labels = dict(sec.figures)["kl_null"].axes[0].get_legend_handles_labels()[1]
    assert not [lab for lab in labels if "debiased" in lab or "bias" in lab]


def test_the_closed_form_w2_leads_with_its_floor(spec) -> None:
    sec, text = _section(spec, new=True)
    ((w_header, w_rows),) = sec.tables[1:]
    assert w_header[2] == "W2(q_diag, q_full), closed form"  # the headline column first
    assert w_header[3].startswith("its sampling floor") and w_rows[0][3] == "0.41 ± 0.025"
    assert w_header[4] == "empirical W error of samples (assignment problem, biased)"
    assert "w2_null is that floor" in text and "measured no floor" not in text
    assert text.index("w2_diag_full is the headline") < text.index("Secondary: w_error")
    assert "empirical W error of samples, an assignment-problem estimate with its own bias" in text
    fig = dict(sec.figures)[W2_FIGURE]
    left, right = fig.axes[:2]
    assert left.get_legend_handles_labels()[1] == [
        "W2(q_diag, q_full), closed form (nuts)",
        "sampling floor: shift null (nuts)",
    ]
    assert "secondary" in right.get_title() and "biased" in right.get_title()
    means = left.lines[0].get_ydata()
    np.testing.assert_allclose(means, [1.5, 0.75])  # positive, the closed form's means


def test_without_a_floor_the_text_says_what_would_give_one(spec) -> None:
    sec, text = _section(spec, new=False)
    assert "This run measured no floor" in text and "shift-null copies" in text
    ((w_header, _),) = sec.tables[1:]
    assert not [h for h in w_header if "floor" in h]
    left = dict(sec.figures)[W2_FIGURE].axes[0]
    assert "no sampling floor measured" in left.get_title()


def test_a_w2_figure_in_report_figures_gets_the_empirical_error_beside_it() -> None:
    assert COMPANIONS["w2_diag_full"] == "w_error" and COMPANIONS["w_error"] == "w_excess"
    res = _results(new=True)
    metrics = ["w2_diag_full", "w_error", "w_excess"]
    summary = summarize(res, metrics, by=["method", "model.depth"])
    labels = {**METRIC_LABELS, **LABELS}
    for m in ("w2_diag_full", "w_error"):  # each beside its companion
        _, caption = metric_figure(
            summary, "model.depth", m, "method", companion=COMPANIONS[m], labels=labels
        )
        assert caption.startswith(f"Left: {labels[m][0]}")
        assert f"; right: {labels[COMPANIONS[m]][0]}" in caption
    _, caption = metric_figure(
        summary, "model.depth", "w2_diag_full", "method", companion="w_error", labels=labels
    )
    assert caption.startswith("Left: W2(q_diag, q_full) of the Gaussian fits, closed form")
    assert "empirical Wasserstein error of samples" in caption


def test_the_tables_follow_the_summarys_rule_for_grades(spec) -> None:
    """A cell graded failed is left out of the section's means and counted, as in the
    summary; a bronze row's weight-space entries are marked, since bronze cannot carry a
    weight-space KL."""
    res = _results(new=True)
    res["reference_grade"] = ["silver", "silver", "failed", "bronze", "silver", "silver", None]
    res.loc[2, "kl_diag_full"] = 100.0  # the failed cell's KL would move the mean a lot
    (sec,) = price_of_mf_sections(res, None, spec)
    header, rows = sec.tables[0]
    kl = header.index("KL(q_diag ‖ q_full) of the draws as sampled (kl_diag_full)")
    grade = header.index("grade")
    depth1 = next(r for r in rows if r[1] == "1")
    # seeds 0 and 1 only: mean 8.05, half-width 12.71 x 0.05 = 0.64, 2 of the row's 3 cells
    assert depth1[kl] == "8.05 ± 0.64 [2/3]"
    assert depth1[grade] == "silver; 1 failed left out"
    depth2 = next(r for r in rows if r[1] == "2")
    assert depth2[grade] == "bronze" and depth2[kl].endswith("(bronze; needs silver)")
    assert "needs" not in depth1[kl]
