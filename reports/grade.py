r"""The grade of a sampled cell's reference posterior: gold, silver, bronze or failed.

A sampled cell's draws are the reference every other method of its spec is read against, so
how far they can be trusted is part of every number read against them. posteriordb grades
its reference posteriors by stated checks; here each sampled cell gets a grade from the
gates of :data:`GATES`, data that the report prints as its table (:func:`gate_table`):

- **gold**: every gate at its strictest: rank-normalized split :math:`\hat R \le 1.01`
  of the weights and of the predictions (Vehtari et al. 2021), nested :math:`\hat R \le 1.01`
  of both where the cell has superchains (Margossian et al. 2024), the same of the hidden
  units' rescaling-orbit coordinates where the cell records them, bulk ESS :math:`\ge 400`
  of both (Vehtari et al.'s 400 per quantity of interest), no divergent transition, at most
  1% of trajectories saturated (NUTS at its maximum tree depth, ChEES at ``max_leapfrog``),
  ChEES's adapted trajectory length below its cap of ``max_leapfrog`` steps (the jitter
  hides a clipped :math:`T` from the per-transition count),
  and, where the cell records it, an ESS of the centred squares (``kl_ess_n``, what the
  sampling bias of the plug-in KL depends on) :math:`\ge 400`, and the split and nested
  :math:`\hat R \le 1.01` of the KL itself (:mod:`reports.kl_rhat`: Vehtari et al.'s
  :math:`\hat R` per quantity of interest, here of the KL's per-draw influence values);
- **silver**: :math:`\hat R \le 1.05` (split and nested) of weights, predictions and,
  where recorded, the KL, bulk
  ESS :math:`\ge 100` of both, divergences at most 0.1% of the transitions;
- **bronze**: the prediction gates alone pass (:math:`\hat R_\mathrm{pred} \le 1.05`,
  split and nested, bulk ESS of the predictions :math:`\ge 100`): the chains agree on the
  function but not (yet) on the weights;
- **failed**: not even that (a stuck chain: a non-finite :math:`\hat R` or ESS).

What each grade may be used for is :data:`USES`: the weight-space KL and W2 need silver or
better (their reference is the weights' covariance), the predictive study needs bronze or
better. Each higher grade's thresholds are at least as strict as the lower one's, so a grade
implies the ones below it.

The weights' :math:`\hat R` and ESS gates read the weights *aligned* to a pivot
(``weights_rhat_aligned``, ``weights_rhat_nested_aligned``, ``weights_ess_bulk_aligned``:
every draw's hidden units relabelled to the pivot's, :mod:`reports.alignment`) and the
orbit coordinates' R-hat (``orbit_rhat``, ``orbit_rhat_nested``: each unit's log balance
and rescaling invariant, :mod:`reports.orbit`) where the cell records them (sampled MLPs
with the price-of-mean-field study), and the raw ``max_r_hat``, ``rhat_nested`` and
``min_ess_bulk`` otherwise (other models, Gaussian targets): the reference is the posterior
modulo hidden-unit permutations, and a chain that visits another labelling of the same
mode has not failed to converge to it. The raw weights' R-hat stays in the record and in
the gate table (:data:`SHOWN`): it measures how the chains mix the units' labels, not
whether the quotient posterior converged.

A gate reads one metric of the cell's record (the first of its metric and its fallbacks
that the record has). A value that is not a finite number fails it
(NaN: some quantity never moved). A missing value means the gate does not apply when the
gate is optional (nested :math:`\hat R` of a cell with one superchain, saturation of HMC's
fixed trajectories, the trajectory cap of every sampler but ChEES, ``kl_ess_n`` of a cell
without the price-of-mean-field study); for a
required gate a ``None`` (recorded, not measurable: :math:`\hat R` of one chain) fails, and
a metric the cell does not record at all (prediction diagnostics of a regression cell) is
not applicable. A grade none of whose gates applies is not reached. Pure Python; the cell
records its grade when it runs (:mod:`zoo.execution.evaluate`) and the report reads it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

__all__ = [
    "GATES",
    "GRADES",
    "NEEDS",
    "SHOWN",
    "USES",
    "Gate",
    "Grade",
    "gate_metrics",
    "gate_table",
    "gates_pass",
    "reference_grade",
    "usable_for",
    "worst_grade",
]

#: The grades, best first.
GRADES: tuple[str, ...] = ("gold", "silver", "bronze", "failed")


class Gate(NamedTuple):
    """One gate: a metric of the cell's record against a threshold per grade.

    Attributes
    ----------
    name : str
        The gate's name in ``grade_failed``.
    metric : str
        The metric it reads.
    op : str
        ``"<="`` (the value must be at most the threshold) or ``">="``.
    thresholds : mapping of str to float
        Grade -> threshold, for the grades that need the gate.
    required : bool
        Whether a recorded ``None`` (not measurable) fails it; else it does not apply.
    what : str
        What the metric is, for the report's table.
    fallback : tuple of str, default ()
        Metrics read, in order, when the record has no ``metric`` at all (a cell without
        hidden-unit alignment reads the raw R-hat).
    """

    name: str
    metric: str
    op: str
    thresholds: Mapping[str, float]
    required: bool
    what: str
    fallback: tuple[str, ...] = ()


_ALL = {"gold": 1.01, "silver": 1.05, "bronze": 1.05}
_WEIGHTS = {"gold": 1.01, "silver": 1.05}

#: The gates, as the report prints them (:func:`gate_table`).
GATES: tuple[Gate, ...] = (
    Gate(
        "r_hat",
        "weights_rhat_aligned",
        "<=",
        _WEIGHTS,
        True,
        "largest split R-hat of the weights, hidden units aligned to a pivot (without "
        "alignment: as sampled)",
        ("max_r_hat",),
    ),
    Gate(
        "r_hat_nested",
        "weights_rhat_nested_aligned",
        "<=",
        _WEIGHTS,
        False,
        "largest nested R-hat of the weights (superchains), aligned (without alignment: as "
        "sampled)",
        ("rhat_nested",),
    ),
    Gate(
        "orbit_r_hat",
        "orbit_rhat",
        "<=",
        _WEIGHTS,
        False,
        "largest split R-hat of the aligned ReLU units' log balances and rescaling invariants",
    ),
    Gate(
        "orbit_r_hat_nested",
        "orbit_rhat_nested",
        "<=",
        _WEIGHTS,
        False,
        "largest nested R-hat of the orbit coordinates (superchains)",
    ),
    Gate(
        "ess_bulk",
        "weights_ess_bulk_aligned",
        ">=",
        {"gold": 400, "silver": 100},
        True,
        "smallest bulk ESS of the weights, aligned (without alignment: as sampled)",
        ("min_ess_bulk",),
    ),
    Gate("r_hat_pred", "max_r_hat_pred", "<=", _ALL, True, "largest split R-hat of predictions"),
    Gate(
        "r_hat_nested_pred",
        "rhat_nested_pred",
        "<=",
        _ALL,
        False,
        "largest nested R-hat of predictions (superchains)",
    ),
    Gate(
        "ess_bulk_pred",
        "min_ess_bulk_pred",
        ">=",
        {"gold": 400, "silver": 100, "bronze": 100},
        True,
        "smallest bulk ESS of predictions",
    ),
    Gate(
        "divergences",
        "divergent_frac",
        "<=",
        {"gold": 0.0, "silver": 0.001},
        True,
        "divergent transitions / transitions",
    ),
    Gate(
        "saturation",
        "saturated_frac",
        "<=",
        {"gold": 0.01},
        False,
        "trajectories at max tree depth / max_leapfrog",
    ),
    Gate(
        "trajectory_cap",
        "trajectory_at_cap",
        "<=",
        {"gold": 0.0},
        False,
        "ChEES's adapted trajectory length at max_leapfrog steps (1: it wanted longer)",
    ),
    Gate("kl_ess", "kl_ess_n", ">=", {"gold": 400}, False, "ESS of the centred squares (KL)"),
    Gate("kl_r_hat", "kl_rhat", "<=", _WEIGHTS, False, "split R-hat of the KL itself"),
    Gate(
        "kl_r_hat_nested",
        "kl_rhat_nested",
        "<=",
        _WEIGHTS,
        False,
        "nested R-hat of the KL itself (superchains)",
    ),
)

#: Metrics the gate table shows that no gate reads where the cell has the aligned ones:
#: metric -> what it measures.
SHOWN: Mapping[str, str] = {
    "max_r_hat": "largest split R-hat of the weights as sampled: how the chains mix the hidden "
    "units' labels, not whether the posterior modulo those labels converged (gated only in "
    "cells without alignment)",
}

#: What each grade may be used for.
USES: Mapping[str, str] = {
    "gold": "everything: weight-space KL and W2, the predictive study, headline claims",
    "silver": "weight-space KL and W2 (quoted with their Monte Carlo error) and the "
    "predictive study",
    "bronze": "the predictive study only (TV, agreement, predictive KL): the chains agree "
    "on the predictions, not on the weights",
    "failed": "nothing: left out of every mean and listed",
}
#: The worst grade each use accepts.
NEEDS = {"weights": "silver", "predictions": "bronze"}


class Grade(NamedTuple):
    """A cell's grade and the gates that kept it from the next grade up.

    Attributes
    ----------
    grade : str
        One of :data:`GRADES`.
    failed : tuple of str
        Gates of the next grade up that failed (empty for gold), e.g. ``("r_hat",)``
        for a silver cell whose weights' R-hat is above 1.01.
    """

    grade: str
    failed: tuple[str, ...]


def _status(gate: Gate, grade: str, metrics: Mapping[str, Any]) -> str | None:
    """``"pass"``, ``"fail"`` or None (the gate does not apply) for ``grade``."""
    name = next((m for m in (gate.metric, *gate.fallback) if m in metrics), None)
    if name is None:
        return None
    v = metrics[name]
    if v is None or (isinstance(v, str) and not v):
        return "fail" if gate.required else None
    try:
        v = float(v)
    except (TypeError, ValueError):
        return "fail"
    if not math.isfinite(v):
        return "fail"
    t = gate.thresholds[grade]
    return "pass" if (v <= t if gate.op == "<=" else v >= t) else "fail"


def _check(grade: str, metrics: Mapping[str, Any], gates: Iterable[Gate]) -> tuple[bool, list]:
    """Whether ``grade`` is reached, and the gates of it that failed."""
    statuses = [(g.name, _status(g, grade, metrics)) for g in gates if grade in g.thresholds]
    failed = [n for n, s in statuses if s == "fail"]
    return not failed and any(s == "pass" for _, s in statuses), failed


def reference_grade(metrics: Mapping[str, Any], gates: Iterable[Gate] = GATES) -> Grade:
    """The best grade whose gates all pass (at least one of them applying).

    Parameters
    ----------
    metrics : mapping
        A sampled cell's record (``max_r_hat``, ``min_ess_bulk``, ``divergent_frac``, ...:
        the metrics :data:`GATES` read).
    gates : iterable of Gate, default GATES

    Returns
    -------
    Grade
        A NaN metric of an optional gate fails it like a required one: NaN is a numerical
        failure, never "does not apply". A grade none of whose gates applies is not reached
        and says so in ``failed`` (``"no bronze gate applies"``: a regression cell has no
        prediction diagnostics).
    """
    gates = tuple(gates)
    above: list[str] = []
    for grade in GRADES[:-1]:
        ok, failed = _check(grade, metrics, gates)
        if ok:
            return Grade(grade, tuple(above))
        above = failed or [*above, f"no {grade} gate applies"]
    return Grade("failed", tuple(above))


def gates_pass(grade: str, metrics: Mapping[str, Any], names: Iterable[str]) -> bool:
    """Whether the gates called ``names`` all pass at ``grade`` on ``metrics`` (at least one
    of them applying): a stopping rule's question, asked of part of a cell's record
    (:mod:`zoo.studies.price_of_mf.stopping`) with the thresholds the cell is graded by."""
    wanted = set(names)
    unknown = wanted - {g.name for g in GATES}
    if unknown:
        raise ValueError(f"no gate named {sorted(unknown)}; gates: {[g.name for g in GATES]}")
    return _check(grade, metrics, (g for g in GATES if g.name in wanted))[0]


def usable_for(grade: str | None, use: str) -> bool:
    """Whether a cell of ``grade`` may serve ``use`` (``"weights"``: weight-space KL and W2;
    ``"predictions"``: the predictive study); an ungraded cell (None) is not a sampled one."""
    if grade is None:
        return True
    return grade in GRADES and GRADES.index(grade) <= GRADES.index(NEEDS[use])


def worst_grade(grades: Iterable[Any]) -> str | None:
    """The worst of ``grades`` (blanks and unknown values ignored), None when none."""
    known = [g for g in grades if isinstance(g, str) and g in GRADES]
    return max(known, key=GRADES.index) if known else None


def _threshold(x: float) -> str:
    return f"{x:g}" if x >= 1 or x == 0 else f"{100 * x:g}%"


def gate_metrics(gates: Iterable[Gate] = GATES) -> tuple[str, ...]:
    """Every metric the gates may read (each gate's metric, then its fallbacks), once."""
    return tuple(dict.fromkeys(m for g in gates for m in (g.metric, *g.fallback)))


def gate_table(gates: Iterable[Gate] = GATES) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the gate table: per gate, its metric (``a (else b)`` with a
    fallback) and threshold per grade; then the metrics of :data:`SHOWN`, shown, not gated."""
    header = ["gate", "metric", "what", *GRADES[:-1], "if not recorded"]
    rows = []
    for g in gates:
        cells = [
            f"{g.op} {_threshold(g.thresholds[k])}" if k in g.thresholds else "-"
            for k in GRADES[:-1]
        ]
        metric = " (else ".join([g.metric, *g.fallback]) + ")" * len(g.fallback)
        rows.append([g.name, metric, g.what, *cells, "fails" if g.required else "n/a"])
    for metric, what in SHOWN.items():
        rows.append(["(shown)", metric, what, *["-"] * len(GRADES[:-1]), "n/a"])
    return header, rows
