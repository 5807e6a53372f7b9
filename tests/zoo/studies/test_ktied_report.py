"""The k-tied report: SNR comparison between alike fits, the spectrum's shuffled null, the
truncation's shuffled-std control and per-draw against mixture NLL (hand-made records)."""

from __future__ import annotations

import numpy as np

from zoo.studies.ktied.report import (
    _per_draw_section,
    _spectrum_null_section,
    _truncation_section,
)
from zoo.studies.ktied.report_training import _snr_comparison, snr_section


def _cell(name: str, rank, lr: float, snr_by_site: dict[str, float]):
    rec = {
        "rank": rank,
        "optim": {"lr": lr, "batch_size": 250},
        "snr": {site: {"100": {"median": v, "mean": 10 * v}} for site, v in snr_by_site.items()},
    }
    return (name, 0, f"{name}-{lr}", rec, {})


def test_snr_comparison_pairs_fits_with_the_same_optimizer_settings() -> None:
    cells = [
        # lr 0.01: tied below mean field in both layers
        _cell("mean_field", None, 0.01, {"l0": 5.0, "l1": 5.0}),
        _cell("k_tied rank=1", 1, 0.01, {"l0": 1.0, "l1": 1.0}),
        # lr 0.001: tied above mean field in l0 only
        _cell("mf_slow", None, 0.001, {"l0": 1.0, "l1": 1.0}),
        _cell("tied_slow rank=1", 1, 0.001, {"l0": 100.0, "l1": 0.5}),
    ]
    lines = _snr_comparison(cells, {0})
    fast = [ln for ln in lines if "lr 0.01" in ln and ln.startswith("median")]
    slow = [ln for ln in lines if "lr 0.001" in ln and ln.startswith("median")]
    assert len(fast) == 1 and len(slow) == 1
    assert "above mean_field in 0 of 2" in fast[0]
    assert "above mf_slow in 1 of 2" in slow[0]
    assert "l0 1/1; l1 0/1" in slow[0]


def test_snr_comparison_skips_fits_without_snr_steps() -> None:
    no_snr = _cell("mean_field", None, 0.001, {"l0": 5.0})
    no_snr[3]["snr"] = {"l0": {}}  # the recorder's layout when snr_steps is empty
    cells = [
        no_snr,
        _cell("mf_early", None, 0.001, {"l0": 1.0}),
        _cell("k_tied rank=1", 1, 0.001, {"l0": 9.0}),
    ]
    lines = _snr_comparison(cells, {0})
    assert lines and "above mf_early in 1 of 1" in lines[0]


def test_snr_comparison_needs_both_kinds_in_a_group() -> None:
    cells = [
        _cell("mean_field", None, 0.01, {"l0": 5.0}),
        _cell("k_tied rank=1", 1, 0.001, {"l0": 1.0}),
    ]
    assert _snr_comparison(cells, {0}) == []


# --------------------------------------------------------------------------- controls


def _res(nll: float, per_draw: float, acc: float = 0.9) -> dict:
    return {
        "neg_elbo": nll + 0.1,
        "nll": nll,
        "accuracy": acc,
        "brier": 0.2,
        "ece": 0.05,
        "clamped_entries": 0,
        "nll_per_draw": per_draw,
        "nll_per_draw_sem": 0.01,
        "accuracy_per_draw": acc - 0.01,
        "accuracy_per_draw_sem": 0.001,
    }


def _mf_cell(std: np.ndarray, *, controls: bool = True, predictive: bool = True):
    rec = {
        "rank": None,
        "layers": {"l0.weight": {"shape": list(std.shape)}},
        "truncation": {"none": _res(0.30, 0.35), "1": _res(0.33, 0.38)},
        "kl_std_floor": 1e-6,
    }
    if controls:
        rec["truncation_control"] = {
            "none": [_res(0.40, 0.45), _res(0.42, 0.47)],
            "1": [_res(0.41, 0.46), _res(0.43, 0.48)],
        }
        rec["control_shuffles"] = 2
    if predictive:
        rec["predictive"], rec["predictive_draws"] = rec["truncation"]["none"], 100
    return ("mean_field", 0, "mf-0", rec, {"l0.weight/std": std})


def _rank1_std(seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.exp(rng.normal(size=(40, 1))) * np.exp(rng.normal(size=(1, 60)))


def test_spectrum_null_section_sets_a_rank_one_std_matrix_against_its_shuffles() -> None:
    sec = _spectrum_null_section([_mf_cell(_rank1_std())], {0})
    header, rows = sec.tables[0]
    (row,) = rows
    observed = float(row[header.index("centred std top-1")])
    shuffled = row[header.index("centred std top-1") + 1]
    null_mean, null_max = float(shuffled.split(" ± ")[0]), float(shuffled.split("(")[1][:-1])
    # centred on its grand mean, a positive rank-1 matrix has rank <= 2
    assert observed > 0.8 and null_max < 0.3 and null_mean <= null_max
    assert float(row[header.index("centred std top-2")]) == 1.0
    assert "above the shuffled mean: 1 of 1" in sec.paragraphs[1]
    assert float(row[header.index("top-1 z")]) > 10
    # ... but it is the k = 1 family: all of its log is rows plus columns
    assert float(row[header.index("log std: row+column share")]) == 1.0
    # dead-unit-like rows and columns times noise: no structure beyond rank 1; a rank-2
    # term in the log stds: found beyond the rows and columns
    rng = np.random.default_rng(2)
    noisy = _rank1_std() * np.exp(0.1 * rng.normal(size=(40, 60)))
    sec = _spectrum_null_section([_mf_cell(noisy)], {0})
    assert "structure beyond rank 1: 0 of 1" in sec.paragraphs[2]
    two = noisy * np.exp(0.3 * np.outer(rng.normal(size=40), rng.normal(size=60)))
    sec = _spectrum_null_section([_mf_cell(two)], {0})
    assert "structure beyond rank 1: 1 of 1" in sec.paragraphs[2]
    # i.i.d. entries have no structure: the centred fraction is within the null's spread
    iid = np.random.default_rng(1).uniform(0.5, 1.5, size=(40, 60))
    sec = _spectrum_null_section([_mf_cell(iid)], {0})
    assert "above the shuffled mean: 0 of 1" in sec.paragraphs[1]
    # a k-tied cell's std matrix has rank <= k by construction: no null row
    tied = _mf_cell(_rank1_std())
    tied[3]["rank"] = 1
    assert _spectrum_null_section([tied], {0}) is None


def test_truncation_section_shows_the_shuffled_control_and_old_runs_without_it() -> None:
    sec = _truncation_section([_mf_cell(_rank1_std())], {0})
    text = " ".join(sec.paragraphs)
    assert "ours minus 1" in text  # the paper's (TFP's) Brier convention
    assert "mean_field, rank-1 truncation: NLL 0.3300, shuffled stds 0.4200 ± 0.014" in text
    ((ctl_header, ctl_rows),) = sec.tables[1:]
    assert ctl_header[3] == "shuffled stds: NLL" and len(ctl_rows) == 2
    assert ctl_rows[0][3] == "0.41 ± 0.014" and ctl_rows[1][1] == "rank-1 truncation"
    header, rows = sec.tables[0]
    assert rows[0][header.index("NLL per draw")] == "0.35"
    old = _truncation_section([_mf_cell(_rank1_std(), controls=False)], {0})
    assert not old.tables[1:] and "shuffled" not in " ".join(old.paragraphs)


def test_per_draw_section_says_which_nll_the_paper_reports_and_skips_old_runs() -> None:
    sec = _per_draw_section([_mf_cell(_rank1_std())], {0})
    text = sec.paragraphs[0]
    assert "most likely report per draw" in text and "Jensen" in text
    assert "mean_field +0.0500" in text
    header, rows = sec.tables[0]
    assert rows[0][header.index("NLL per draw ± s.e.")] == "0.35 ± 0.01"
    assert rows[0][header.index("NLL of the mixture")] == "0.3"
    assert _per_draw_section([_mf_cell(_rank1_std(), predictive=False)], {0}) is None


def test_snr_section_says_the_papers_ratio_is_ours_plus_one() -> None:
    rec = {"rank": None, "snr_window": 10, "snr": {"a": {"5": {"mean": 1.0, "median": 0.5}}}}
    sec = snr_section([("mf", 0, "c", rec, {})], {0})
    assert "E[g^2] / Var[g], which is this one + 1" in sec.paragraphs[0]
    assert "1/7" in sec.paragraphs[0]
