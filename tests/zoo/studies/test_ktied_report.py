"""The k-tied report's SNR comparison: tied against mean field, only between alike fits."""

from __future__ import annotations

from zoo.studies.ktied.report import _snr_comparison


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
    cells = [no_snr, _cell("mf_early", None, 0.001, {"l0": 1.0}),
             _cell("k_tied rank=1", 1, 0.001, {"l0": 9.0})]  # fmt: skip
    lines = _snr_comparison(cells, {0})
    assert lines and "above mf_early in 1 of 1" in lines[0]


def test_snr_comparison_needs_both_kinds_in_a_group() -> None:
    cells = [
        _cell("mean_field", None, 0.01, {"l0": 5.0}),
        _cell("k_tied rank=1", 1, 0.001, {"l0": 1.0}),
    ]
    assert _snr_comparison(cells, {0}) == []
