"""The rows of the depth tables that ``make_tables.py`` writes: how each depth's cell of a
recorded summary reads (a mean with its 95% interval, an extreme over the seeds, the per-seed
values), declared once per table in :data:`ROWS`."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd


def markdown(header: list[str], rows: list[list[str]]) -> str:
    """A Markdown table (``|`` inside a cell escaped)."""

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"

    out = [line(header), "|" + "---|" * len(header)] + [line(r) for r in rows]
    return "\n".join(out) + "\n"


def _num(rec: pd.Series, col: str, dec: int) -> str:
    v = rec.get(col)
    return "-" if v is None or pd.isna(v) else f"{float(v):.{dec}f}"


def ci(metric: str, dec: int) -> Callable[[pd.Series], str]:
    """``mean ± 95% half-width`` at ``dec`` decimals, ``[k/n]`` when cells were left out."""

    def cell(rec: pd.Series) -> str:
        text = _num(rec, f"{metric}_mean", dec)
        if not pd.isna(rec.get(f"{metric}_ci95", np.nan)):
            text += f" ± {_num(rec, f'{metric}_ci95', dec)}"
        k, n = rec.get(f"{metric}_n", np.nan), rec.get("n", np.nan)
        if not (pd.isna(k) or pd.isna(n)) and int(k) < int(n):
            text += f" [{int(k)}/{int(n)}]"
        return text

    return cell


def val(col: str, dec: int) -> Callable[[pd.Series], str]:
    """A value alone (a mean without its interval, or an extreme over the seeds)."""
    return lambda rec: _num(rec, col, dec)


def pct(col: str) -> Callable[[pd.Series], str]:
    """A fraction as a percentage to 3 significant digits."""
    return lambda rec: "-" if pd.isna(rec.get(col)) else f"{100 * float(rec[col]):.3g}%"


def seeds(col: str, sep: str = " / ") -> Callable[[pd.Series], str]:
    """The per-seed values; ``x (3)`` when every seed has the same."""

    def cell(rec: pd.Series) -> str:
        vals = str(rec.get(f"{col}_seeds", "")).split()
        if len(set(vals)) == 1 and len(vals) > 1:
            return f"{vals[0]} ({len(vals)})"
        return sep.join(vals) or "-"

    return cell


def span(col: str) -> Callable[[pd.Series], str]:
    """The range of the per-seed values, ``lo-hi``."""

    def cell(rec: pd.Series) -> str:
        vals = str(rec.get(f"{col}_seeds", "")).split()
        if not vals:
            return "-"
        nums = sorted(vals, key=float)
        return nums[0] if nums[0] == nums[-1] else f"{nums[0]}-{nums[-1]}"

    return cell


def joined(*parts: Callable[[pd.Series], str], sep: str = " / ") -> Callable[[pd.Series], str]:
    return lambda rec: sep.join(p(rec) for p in parts)


def _width(rec: pd.Series) -> str:
    return f"{_num(rec, 'width_mean', 0)} ({_num(rec, 'n_params_mean', 0)})"


def _tv(rec: pd.Series) -> str:
    tv = joined(val("pred_tv_mfvi_mean", 3), val("pred_tv_mfvi_ood_mean", 3))(rec)
    floor = joined(val("pred_tv_floor_mfvi_mean", 3), val("pred_tv_floor_mfvi_ood_mean", 3))
    return f"{tv} [{floor(rec)}]"


Row = tuple[str, Callable[[pd.Series], str]]
_KL, _DEB = ci("kl_diag_full", 2), ci("kl_debiased", 2)
_W2 = joined(ci("w2sq_plugin", 1), ci("w2sq_debiased", 1))
_DIV = joined(val("n_divergent_mean", 0), pct("saturated_frac_mean"))
#: The rows every depth table opens with: the network, the headline and its parts.
_KL_ROWS: list[Row] = [
    ("width (D = weights and biases)", _width),
    (
        "**headline**: KL with the hidden units aligned, less its bias and its alignment "
        "null (`kl_aligned_debiased`)",
        ci("kl_aligned_debiased", 2),
    ),
    ("its s.e. within one cell", span("kl_aligned_debiased_se")),
    ("the alignment null subtracted (`kl_alignment_null`)", ci("kl_alignment_null", 2)),
    ("KL(q_diag || q_full) of the draws as sampled, plug-in", _KL),
    ("the same less its sampling bias (`kl_debiased`)", _DEB),
    ("W2(q_diag, q_full)², plug-in / less its sampling bias (`w2sq_debiased`)", _W2),
]
#: The tables rendered from a depth summary (``make_tables.SUMMARIES``): (row label, how a
#: depth's cell reads); a label's ``{n}`` is the number of seeds and ``{seeds}`` their list.
ROWS: dict[str, list[Row]] = {
    "default_depth": [
        *_KL_ROWS,
        ("the KL's own R-hat (largest of {n})", val("kl_rhat_max", 3)),
        ("TV of MF-VI's predictive to the samples', test / far [its floor]", _tv),
        (
            "largest R-hat of the weights aligned / of their orbit coordinates / as sampled",
            joined(
                val("weights_rhat_aligned_max", 3),
                val("orbit_rhat_max", 3),
                val("weights_rhat_raw_max", 2),
            ),
        ),
        ("largest R-hat of the test predictions", val("max_r_hat_pred_max", 3)),
        ("divergent transitions per cell / trees cut at max_tree_depth 8", _DIV),
        (
            "tempering: lowest swap rate of a neighbouring pair / fewest round trips "
            "(of {n} cells)",
            joined(val("tempering_swap_rate_min_min", 2), val("tempering_round_trips_min", 0)),
        ),
        ("reference grade of the {n} NUTS cells", seeds("reference_grade", ", ")),
    ],
    "default_depth_detail": [
        ("the KL's effective n (chain-group spread, `kl_ess_n`)", ci("kl_ess_n", 0)),
        ("exact Wishart bias at that n (`kl_bias_ess`)", ci("kl_bias_ess", 2)),
        (
            "`kl_debiased_se` of each cell (chain-group jackknife), seeds {seeds}",
            seeds("kl_debiased_se"),
        ),
        ("the shift null (same chains, parameters made independent)", ci("kl_null", 2)),
        (
            "closed-form W2(q_diag, q_full) / its shift-null floor",
            joined(val("w2_diag_full_mean", 2), val("w2_null_mean", 2)),
        ),
        ("Laplace KL at the MF-VI mode (Gauss-Newton, no sampling)", ci("laplace_kl", 1)),
        (
            "predictive TV to the samples on test points: q_diag / q_full / MF-VI",
            joined(
                val("pred_tv_qdiag_mean", 2),
                val("pred_tv_qfull_mean", 2),
                val("pred_tv_mfvi_mean", 3),
            ),
        ),
        (
            "each TV's own floor (draw noise of both sides): q_diag / q_full / MF-VI",
            joined(*(val(f"pred_tv_floor_{q}_mean", 3) for q in ("qdiag", "qfull", "mfvi"))),
        ),
        (
            "test NLL: samples / q_full / q_diag / MF-VI",
            joined(
                val("nll_samples_mean", 3),
                val("nll_qfull_mean", 2),
                val("nll_qdiag_mean", 2),
                val("nll_mfvi_mean", 3),
            ),
        ),
        (
            "draws per chain where the stopping rule stopped, seeds {seeds}",
            seeds("draws_per_chain"),
        ),
        (
            "smallest bulk ESS / largest R-hat of the weights",
            joined(val("min_ess_bulk_min", 0), val("max_r_hat_max", 2)),
        ),
        (
            "excess over the shift null (a cross-check, biased low where chains mix slowly)",
            ci("kl_excess", 2),
        ),
        ("the aligned KL, plug-in (`kl_aligned`)", ci("kl_aligned", 2)),
    ],
    "fixed_width_depth": [
        *_KL_ROWS,
        (
            "the KL's own R-hat, split / nested (largest of {n})",
            joined(val("kl_rhat_max", 3), val("kl_rhat_nested_max", 3)),
        ),
        ("TV of MF-VI's predictive to the samples', test / far [its floor]", _tv),
        (
            "largest R-hat of the weights aligned, split / nested (superchains)",
            joined(val("weights_rhat_aligned_max", 3), val("weights_rhat_nested_aligned_max", 3)),
        ),
        (
            "largest R-hat of the orbit coordinates, split / nested / of the weights as sampled",
            joined(
                val("orbit_rhat_max", 3),
                val("orbit_rhat_nested_max", 3),
                val("weights_rhat_raw_max", 2),
            ),
        ),
        (
            "largest R-hat of the test predictions, split / nested",
            joined(val("max_r_hat_pred_max", 3), val("rhat_nested_pred_max", 3)),
        ),
        ("smallest bulk ESS of the aligned weights", val("weights_ess_bulk_aligned_min", 0)),
        ("divergent transitions per cell / trajectories at max_leapfrog", _DIV),
        ("Laplace KL at the MF-VI mode (Gauss-Newton, no sampling)", ci("laplace_kl", 1)),
        ("draws per chain, seeds {seeds}", seeds("draws_per_chain")),
        ("reference grade of the {n} ChEES cells", seeds("reference_grade", ", ")),
    ],
}
#: The fixed-width spec's ablations, and the default's networks under its sampler, read as
#: its own table.
for _name in (
    "fixed_width_ess_stop",
    "fixed_width_keep20",
    "fixed_width_1600",
    "fixed_width_prior_starts",
    "fixed_width_seeds6",
    "fixed_width_long",
    "fixed_width_long_accept",
    "default_chees",
):
    ROWS[_name] = ROWS["fixed_width_depth"]
#: The default before its sampler was tempered: its rows but the ladder's.
ROWS["default_untempered"] = [r for r in ROWS["default_depth"] if "tempering" not in r[0]]
#: The default's depths 3 and 4 with 6 seeds, in its own rows.
ROWS["default_seeds6"] = ROWS["default_depth"]
