"""Names for people and the one set of number formatters of every report.

A metric column gets a label with its unit (:func:`metric_label`) from a label table: the
metrics every cell records (:data:`METRIC_LABELS`: test metrics, fit numbers, sampler
diagnostics, sizes) plus the ones a study declares beside its probe (``zoo.studies``: the
caller merges them into the table it passes). A sweep axis gets its label from
:data:`AXIS_LABELS`. Numbers in tables and sentences are written by the formatters here
(:func:`fmt_value`, :func:`fmt_mean_error`, :func:`fmt_num`, :func:`fmt_cell`), so every
table of a report writes a number the same way.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

__all__ = [
    "AXIS_LABELS",
    "METRIC_LABELS",
    "METRIC_SUPPORT",
    "PSIS_NOTE",
    "Labels",
    "axis_label",
    "axis_word",
    "fmt_cell",
    "fmt_g",
    "fmt_mean_error",
    "fmt_num",
    "fmt_value",
    "is_labelled",
    "is_missing",
    "metric_label",
    "metric_support",
    "plural",
    "repeat_word",
]

#: Metric column -> (what it is, for people; unit or None).
Labels = Mapping[str, tuple[str, str | None]]

#: Labels of the metrics every cell may record, whatever its studies (a study's own metrics
#: are labelled by the study). Columns not labelled keep their name.
METRIC_LABELS: dict[str, tuple[str, str | None]] = {
    "accuracy": ("test accuracy", None),
    "nll": ("test negative log-likelihood per point", "nats"),
    "brier": ("test Brier score", None),
    "ece": ("expected calibration error", None),
    "rmse": ("test RMSE", "target units"),
    "neg_elbo": ("negative ELBO", "nats"),
    "elbo": ("ELBO", "nats"),
    "agreement_vi": ("agreement of predicted classes, VI vs sampler", None),
    "tv_vi": ("total variation between VI and sampler predictives", None),
    "n_params": ("parameters", None),
    "width": ("hidden width", "units"),
    "max_r_hat": ("largest R-hat", None),
    "min_ess_bulk": ("smallest bulk ESS", "draws"),
    "min_ess_tail": ("smallest tail ESS", "draws"),
    "n_divergent": ("divergent transitions", None),
    "draws_per_chain": ("draws per chain", "draws"),
    "mass_ratio_q05": ("adapted inverse mass over the draws' variance, 5% quantile", None),
    "mass_ratio_median": ("adapted inverse mass over the draws' variance, median", None),
    "psis_khat": ("PSIS k-hat of log p(w, y) - log q(w)", None),
}
#: Where a metric's values can lie: ``(pattern of its name, (low, high))``, the first match
#: wins; a metric matched by none is unbounded. Fractions, agreements and total variations
#: lie in [0, 1], a multi-class Brier score in [0, 2]; an RMSE, a KL, a W2, an entropy, a
#: spread or a count is not negative (a debiased KL or an excess over a null may be).
METRIC_SUPPORT: tuple[tuple[str, tuple[float, float]], ...] = (
    (r"_(debiased|excess|error)(_|$)|^(w_|nll)", (-math.inf, math.inf)),
    (
        r"^(accuracy|ece|agreement_vi|tv_vi|pred_agree_|pred_tv_(?!inflation)|ece_)"
        r"|_frac$|_frac_|_share$",
        (0.0, 1.0),
    ),
    (r"^brier", (0.0, 2.0)),
    (
        r"^(rmse|kl_|laplace_kl|laplace_w2|w2_|pred_kl_|pred_entropy_|units_eff|n_)"
        r"|_(sd|se)$",
        (0.0, math.inf),
    ),
)


def metric_support(metric: str) -> tuple[float, float]:
    """``(low, high)`` between which ``metric``'s values lie (:data:`METRIC_SUPPORT`):
    a figure's error band is clipped to it, since a t-interval of a bounded metric can
    reach past its bounds (an RMSE band below 0, an agreement above 1)."""
    for pattern, support in METRIC_SUPPORT:
        if re.search(pattern, metric):
            return support
    return (-math.inf, math.inf)


#: The report's note on ``psis_khat`` (Vehtari et al. 2024; Yao et al. 2018).
PSIS_NOTE = (
    "psis_khat: the Pareto k-hat of the importance ratios p(w, y) / q(w) over 256 draws of a "
    "variational posterior q on the training set (Yao et al. 2018; Vehtari et al. 2024, "
    "Pareto smoothed importance sampling). Below 0.5 q is close to the posterior; below 0.7 "
    "importance sampling from q is reliable, so q is close enough for PSIS to correct it; "
    "above 0.7 it is not, and expectations under q can be far from the posterior's in ways "
    "q's own draws do not show (with 256 draws the paper's sample-size bound is 0.59). For "
    "the thousands of weights of a neural network a mean-field q gives k-hat above 0.7 "
    "almost always: that measures its distance from the posterior, it is not a failure of "
    "the fit or of the check."
)
#: Sweep axis -> (axis label; short word used in sentences, e.g. "at depth 2").
AXIS_LABELS: dict[str, tuple[str, str]] = {
    "model.depth": ("hidden layers (model.depth)", "depth"),
    "model.width": ("hidden units per layer (model.width)", "width"),
    "model.param_budget": ("parameter budget (model.param_budget)", "budget"),
    "data.n_train": ("training points (data.n_train)", "n_train"),
    "seed": ("seed", "seed"),
    "split": ("train/test split", "split"),
    "method": ("method", "method"),
}
#: ``<metric>.layerK`` or ``<metric>_layerK``: a metric within hidden layer K.
_LAYER = re.compile(r"^(?P<base>.+?)[._]layer(?P<k>\d+)$")
#: ``<metric>.<site>``: a metric of one parameter site (``std_top1.layer0.weight``).
_SITE = re.compile(r"^(?P<base>[^.]+)\.(?P<site>.+)$")


def _lookup(metric: str, labels: Labels) -> tuple[str, str | None] | None:
    """The label and unit of ``metric``: its own, or its base's within a layer or site."""
    if metric in labels:
        return labels[metric]
    m = _LAYER.match(metric)
    if m and m["base"] in labels:
        text, u = labels[m["base"]]
        return f"{text} within layer {m['k']}", u
    m = _SITE.match(metric)
    if m and m["base"] in labels:
        text, u = labels[m["base"]]
        return f"{text} of {m['site']}", u
    return None


def metric_label(metric: str, labels: Labels = METRIC_LABELS, *, unit: bool = True) -> str:
    """A metric's name for people, with its unit: ``kl_diag_full`` -> ``KL(q_diag ‖ q_full) [nats]``.

    Parameters
    ----------
    metric : str
        Column name; ``<metric>.layerK`` (or ``_layerK``) is the metric within layer K,
        ``<metric>.<site>`` the metric of one parameter site.
    labels : mapping, default METRIC_LABELS
        The label table (the caller merges the studies' labels into it).
    unit : bool, default True
        Append the unit in brackets when there is one.

    Returns
    -------
    str
        The label, or ``metric`` itself when it is not in ``labels``.
    """
    text, u = _lookup(metric, labels) or (metric, None)
    return f"{text} [{u}]" if unit and u else text


def is_labelled(metric: str, labels: Labels) -> bool:
    """Whether ``metric`` (or the base of a per-layer or per-site metric) has a label."""
    return _lookup(metric, labels) is not None


def axis_label(axis: str) -> str:
    """A sweep axis' name for people: ``model.depth`` -> ``hidden layers (model.depth)``."""
    return AXIS_LABELS.get(axis, (axis, axis))[0]


def axis_word(axis: str) -> str:
    """A sweep axis' short word for sentences: ``model.depth`` -> ``depth``."""
    return AXIS_LABELS.get(axis, (axis, axis.split(".")[-1]))[1]


def plural(word: str, n: int) -> str:
    """``word`` for one, its plural otherwise (``seed`` -> ``seeds``, ``class`` -> ``classes``)."""
    return word if n == 1 else (word + "es" if word.endswith("s") else word + "s")


def repeat_word(over: str | None) -> str:
    """What one repeat of a summary is: a seed, a split, or a cell (no repeat axis)."""
    return {"seed": "seed", "split": "split", None: "cell"}.get(over, str(over))


# --------------------------------------------------------------------------- numbers


def is_missing(value: Any) -> bool:
    """Whether a table value is missing (None, NaN, NaT); False for anything not scalar."""
    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):
        return False


def fmt_value(value: Any) -> str:
    """A group key or plain value for a table: integers as such, floats to 4 digits, ``-``
    when missing."""
    if is_missing(value):
        return "-"
    if isinstance(value, bool | np.bool_):
        return str(bool(value))
    if isinstance(value, int | np.integer):
        return str(int(value))
    if isinstance(value, float | np.floating):
        v = float(value)
        if v.is_integer() and abs(v) < 1e15:
            return str(int(v))
        return f"{v:.4g}"
    return str(value)


def fmt_mean_error(mean: Any, error: Any, n_finite: Any = None, n: Any = None) -> str:
    """``mean ± error`` (4 significant digits, 2 for the error: the tables pass the 95%
    t-interval's half-width); ``[k/n]`` when only ``k`` of the group's ``n`` values were
    finite; ``-`` when none was."""
    if is_missing(mean):
        return "-"
    text = f"{float(mean):.4g}"
    if not is_missing(error) and math.isfinite(float(error)):
        text += f" ± {float(error):.2g}"
    if not is_missing(n_finite) and not is_missing(n) and int(n_finite) < int(n):
        text += f" [{int(n_finite)}/{int(n)}]"
    return text


def fmt_num(mean: float, sem: float) -> str:
    """``mean ± sem`` for a sentence: 3 significant digits, no error when it is 0 or NaN."""
    text = f"{mean:.3g}"
    return text + (f" ± {sem:.2g}" if math.isfinite(sem) and sem > 0 else "")


def fmt_g(value: Any, digits: int = 4) -> str:
    """A number to ``digits`` significant digits, blank when missing or not finite."""
    if value is None or (isinstance(value, float) and not np.isfinite(value)):
        return ""
    return f"{value:.{digits}g}" if isinstance(value, float) else str(value)


def fmt_cell(value: Any) -> str:
    """A record's value in a table cell: floats to 4 digits (``NaN``), None as blank."""
    if isinstance(value, float | np.floating):
        return "NaN" if value != value else f"{float(value):.4g}"
    return "" if value is None else str(value)
