"""The price of mean field (Farquhar, Smith & Gal 2020) on the draws of sampled cells.

The study's table entry: its probe, its report section and the words of its columns.
"""

from zoo.studies.base import StudyPlugin
from zoo.studies.price_of_mf.probe import PriceOfMeanFieldProbe
from zoo.studies.price_of_mf.report import price_of_mf_sections

__all__ = ["COMPANIONS", "HIDDEN", "LABELS", "STUDY"]

#: The study's columns for people: metric -> (what it is; unit or None).
LABELS: dict[str, tuple[str, str | None]] = {
    "kl_diag_full": ("KL(q_diag ‖ q_full)", "nats"),
    "kl_null": ("KL shift null (chains with the correlations removed)", "nats"),
    "kl_null_sd": ("spread of the KL shift null", "nats"),
    "kl_excess": ("KL(q_diag ‖ q_full) above its shift null", "nats"),
    "kl_output_columns": ("KL of the output layer's columns", "nats"),
    "kl_null_draws": ("independent draws the chains are worth", "draws"),
    "stop_rule_met": (
        "whether the chains stopped on kl_target_draws (and stop_at_grade's gates), "
        "not at max_draws",
        None,
    ),
    "kl_bias_ess": ("exact KL sampling bias at the KL's effective n", "nats"),
    "kl_ess_n": ("the KL's effective n (chain groups' covariance spread)", "draws"),
    "kl_squares_n": ("centred squares' pooled ESS (per-coordinate reference)", "draws"),
    "kl_debiased": ("KL(q_diag ‖ q_full) less its exact sampling bias", "nats"),
    "kl_debiased_se": ("chain-group (jackknife) standard error of the debiased KL", "nats"),
    "kl_debiased_ci": ("half-width of the debiased KL's 95% t-interval", "nats"),
    "kl_bias_rho": ("lag-one correlation of the AR(1) chains that calibrate the bias", None),
    "kl_relabelled": ("KL(q_diag ‖ q_full) with every draw's hidden units relabelled", "nats"),
    "kl_aligned": ("KL(q_diag ‖ q_full) with every draw's hidden units aligned to a pivot", "nats"),
    "kl_alignment_null": ("KL the alignment adds to independent draws (alignment null)", "nats"),
    "kl_alignment_null_sd": ("the alignment null's spread over 4 sets of null draws", "nats"),
    "kl_aligned_debiased": (
        "KL(q_diag ‖ q_full) of the aligned draws less its sampling bias and alignment null",
        "nats",
    ),
    "kl_aligned_debiased_se": (
        "standard error of the aligned debiased KL (chain groups and the null's own)",
        "nats",
    ),
    "kl_aligned_bias": ("exact KL sampling bias at the aligned draws' effective n", "nats"),
    "kl_aligned_ess_n": ("the aligned KL's effective n", "draws"),
    "w2_aligned": ("W2(q_diag, q_full) of the aligned draws, closed form", "parameter units"),
    "w2sq_aligned_debiased": (
        "W2(q_diag, q_full)² of the aligned draws less its sampling bias",
        "squared parameter units",
    ),
    "w2sq_aligned_debiased_se": (
        "jackknife standard error of the aligned debiased W2²",
        "squared parameter units",
    ),
    "weights_rhat_raw": (
        "largest split R-hat of the weights as sampled (how the chains mix unit labels)",
        None,
    ),
    "weights_rhat_aligned": ("largest split R-hat of the weights aligned to the pivot", None),
    "weights_rhat_nested_aligned": ("largest nested R-hat of the aligned weights", None),
    "weights_ess_bulk_aligned": ("smallest bulk ESS of the aligned weights", "draws"),
    "orbit_rhat": ("largest split R-hat of the units' rescaling-orbit coordinates", None),
    "orbit_rhat_balance": ("largest split R-hat of the units' log balances", None),
    "orbit_rhat_invariant": ("largest split R-hat of the units' rescaling invariants", None),
    "orbit_rhat_nested": ("largest nested R-hat of the orbit coordinates", None),
    "label_switches": ("draws per chain whose hidden-unit labelling changed", "draws"),
    "ess_mean_n": ("median ESS of the weights' means (not the KL's n)", "draws"),
    "w2_diag_full": ("W2(q_diag, q_full) of the Gaussian fits, closed form", "parameter units"),
    "w2sq_debiased": (
        "W2(q_diag, q_full)² less its sampling bias (chain-group jackknife)",
        "squared parameter units",
    ),
    "w2sq_debiased_se": ("jackknife standard error of the debiased W2²", "squared parameter units"),
    "kl_rhat": ("split R-hat of the KL (of its per-draw influence values)", None),
    "kl_rhat_nested": ("nested R-hat of the KL over superchains", None),
    "w2_null": ("sampling floor of the closed-form W2 (shift-null draws)", "parameter units"),
    "w2_null_sd": ("spread of the closed-form W2's sampling floor", "parameter units"),
    "w_error": (
        "empirical Wasserstein error of samples W2(q_diag, draws) − W2(q_full, draws), "
        "an assignment-problem estimate biased below 0",
        "parameter units",
    ),
    "w_excess": (
        "Wasserstein excess of q_diag over q_full, self-terms removed",
        "squared parameter units",
    ),
}
#: Columns that describe the fit or the draws rather than a result: out of the tables.
HIDDEN = frozenset(
    {
        "jitter",
        "dim",
        "n_draws",
        "shrinkage",
        "kl_source",
        "ess_mean_n",
        "kl_squares_n",
        "kl_rhat",
        "kl_rhat_nested",
        "kl_bias_rho",
        "kl_aligned_ess_n",
        "w_diag",
        "w_full",
        "w_diag_self",
        "w_full_self",
        "w_draws",
    }
)
#: A metric never plotted alone -> its companion panel: ``w_error`` is biased below zero for
#: finite draws (``w_excess`` removes that bias); the closed-form ``w2_diag_full``, the
#: headline Wasserstein measure, gets the empirical ``w_error`` beside it.
COMPANIONS = {"w_error": "w_excess", "w2_diag_full": "w_error"}

STUDY = StudyPlugin(
    "price_of_mean_field",
    PriceOfMeanFieldProbe,
    price_of_mf_sections,
    labels=LABELS,
    hidden=HIDDEN,
    companions=COMPANIONS,
    # the quotient reference leads where the cell has it (sampled MLPs), the raw KL beside it
    headline=(
        "kl_aligned_debiased",
        "kl_alignment_null",
        "kl_diag_full",
        "kl_debiased",
        "w2_aligned",
        "w2_diag_full",
        "kl_null",
    ),
    weight_space=True,
)
