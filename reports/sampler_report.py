"""The sampler diagnostics of a run's report, from the numbers its cells recorded.

A sampled cell records its convergence diagnostics once, when it runs (``zoo.execution.evaluate``
with :func:`reports.diagnostics.diagnostic_gates`): the largest R-hat, the smallest bulk
and tail ESS, the 5% quantile of the bulk ESS, its worst-mixing parameter, the gates it
failed, the divergent transitions and those at the maximum tree depth. Here those records
become the report's tables (:func:`sampler_tables`), the advice for the gates that failed
(:func:`sampler_advice`) and the order in which cells are worst (:func:`worst_cells`); the
ArviZ files are read only for the trace and rank plots of the worst cells.

The gates are Stan's and ArviZ's: r_hat <= 1.01 (a non-finite r_hat fails), bulk ESS >=
100, no divergence, no transition at the maximum tree depth. Each cell's ``reference_grade``
(gold, silver, bronze, failed: :mod:`reports.grade`) and the gates that kept it from the next
grade up are shown beside them, with the grades' gate table and uses (:func:`grade_blocks`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import pandas as pd

from reports.grade import GRADES, USES, gate_table
from reports.labels import fmt_cell, is_missing

__all__ = [
    "CONVERGENCE_COLUMNS",
    "SAMPLER_COLUMNS",
    "SAMPLER_INTRO",
    "SamplerRecord",
    "grade_blocks",
    "grade_counts",
    "grade_lines",
    "sampler_advice",
    "sampler_record",
    "sampler_tables",
    "worst_cells",
]

#: Columns of the convergence table (after the cell's sweep axes).
CONVERGENCE_COLUMNS = [
    "max_r_hat",
    "min_ess_bulk",
    "min_ess_tail",
    "ess_bulk_q05",
    "worst param (bulk ESS)",
    "max_r_hat_pred",
    "min_ess_bulk_pred",
    "rhat_nested",
    "rhat_nested_pred",
    "kl_rhat",
    "kl_rhat_nested",
]
#: Columns of the sampler table (after the cell's sweep axes).
SAMPLER_COLUMNS = [
    "divergent",
    "at max tree depth",
    "mean steps",
    "step size",
    "gates failed",
    "grade",
    "kept from the next grade by",
]
#: What the two tables show.
SAMPLER_INTRO = (
    "Convergence of every sampled cell, as the cell recorded it from its posterior "
    "(arviz-stats on the stored draws): the largest R-hat (rank-normalized split R-hat, two "
    "or more chains; NaN when a parameter did not move), the smallest bulk and tail ESS, the "
    "5% quantile of the bulk ESS over parameters and the parameter with the smallest bulk "
    "ESS, and the largest R-hat and smallest bulk ESS of the predictive class probabilities "
    "at the test points (weights are not identified, predictions are: chains can agree on "
    "the function while some weights do not mix); then the divergent transitions, the "
    "transitions whose NUTS tree reached max_tree_depth, the mean leapfrog steps per draw "
    "and the adapted step size. The gates are Stan's and ArviZ's: r_hat <= 1.01 (a "
    "non-finite r_hat fails), bulk ESS >= 100, no divergence, no transition at the maximum "
    "tree depth. Where the chains run in superchains (ChEES's init_fits blocks, each from its "
    "own fit of init_from), rhat_nested and rhat_nested_pred are the nested R-hat of the "
    "weights and of the predictions (Margossian et al. 2024; n/a with one superchain). With "
    "the price-of-mean-field study, kl_rhat and kl_rhat_nested are the split and nested R-hat "
    "of the KL itself (of its per-draw influence values, reports.kl_rhat). Each "
    "cell's grade and the gates that kept it from the next grade up close the second table; "
    "the gates of the grades follow."
)


class SamplerRecord(NamedTuple):
    """What a sampled cell recorded of its convergence (a row of results.csv).

    Attributes
    ----------
    max_r_hat : float or None
        Largest R-hat; None with one chain, NaN when some parameter has none.
    min_ess_bulk : float
        Smallest bulk ESS (NaN when some parameter has none).
    failed : tuple of str
        The gates failed: ``r_hat``, ``ess_bulk``, ``divergences``, ``tree_depth``.
    n_divergent : int or None
        Divergent transitions; None when not recorded.
    n_max_tree_depth : int or None
        Transitions that reached ``max_tree_depth``; None when the sampler has no tree.
    n_transitions : int or None
        Transitions after warm-up (chains times draws per chain), when known.
    max_tree_depth : int or None
        The method's tree-depth limit.
    grade : str or None
        ``reference_grade`` (:mod:`reports.grade`); None for a cell recorded before grades.
    grade_failed : tuple of str
        The gates that kept it from the next grade up.
    trajectory_at_cap : bool or None
        ChEES: whether the adapted trajectory length sat at ``max_leapfrog`` steps (the
        adaptation wanted longer); None for the other samplers.
    """

    max_r_hat: float | None
    min_ess_bulk: float
    failed: tuple[str, ...]
    n_divergent: int | None = None
    n_max_tree_depth: int | None = None
    n_transitions: int | None = None
    max_tree_depth: int | None = None
    grade: str | None = None
    grade_failed: tuple[str, ...] = ()
    trajectory_at_cap: bool | None = None

    @property
    def stuck(self) -> bool:
        """Whether some parameter never moved (R-hat or bulk ESS not finite)."""
        r = self.max_r_hat
        return (r is not None and r != r) or self.min_ess_bulk != self.min_ess_bulk


def _number(v: Any) -> float | None:
    return None if v is None or (isinstance(v, str) and not v) or is_missing(v) else float(v)


def sampler_record(
    row: Mapping[str, Any], *, chains: int | None = None, max_tree_depth: int | None = None
) -> SamplerRecord:
    """The :class:`SamplerRecord` of a results.csv row of a sampled cell.

    A blank ``max_r_hat`` is None (one chain) unless the row's ``nonfinite`` list names it
    (then NaN, a failed gate); ``chains`` (the method's, or the archived ones the cell's file
    holds) times ``draws_per_chain`` (or ``kept_per_chain``) gives the transitions.
    """
    named = row.get("nonfinite")
    named = set(named.split(",")) if isinstance(named, str) else set()
    r = _number(row.get("max_r_hat"))
    if r is None and "max_r_hat" in named:
        r = math.nan
    ess = _number(row.get("min_ess_bulk"))
    kept = _number(row.get("kept_per_chain"))  # the file's draws, when the sampler thins
    draws = kept if kept is not None else _number(row.get("draws_per_chain"))
    archived = _number(row.get("archived_chains"))  # the file's chains, when it holds fewer
    chains = int(archived) if archived is not None else chains
    gates, grade, kept = (
        row.get("gates_failed"),
        row.get("reference_grade"),
        row.get("grade_failed"),
    )
    hits, div = _number(row.get("n_max_tree_depth")), _number(row.get("n_divergent"))
    at_cap = _number(row.get("trajectory_at_cap"))
    return SamplerRecord(
        max_r_hat=r,
        min_ess_bulk=math.nan if ess is None else ess,
        failed=tuple(g for g in gates.split(",") if g) if isinstance(gates, str) else (),
        n_divergent=None if div is None else int(div),
        n_max_tree_depth=None if hits is None else int(hits),
        n_transitions=None if chains is None or draws is None else int(chains * draws),
        max_tree_depth=max_tree_depth,
        grade=grade if isinstance(grade, str) and grade else None,
        grade_failed=tuple(g for g in kept.split(",") if g) if isinstance(kept, str) else (),
        trajectory_at_cap=None if at_cap is None else bool(at_cap),
    )


def _recorded(row: Mapping[str, Any], column: str) -> str:
    """A metric of a results.csv row: ``n/a`` when blank (None: it does not apply), ``NaN``
    only when the cell's record lists it as non-finite."""
    v = row.get(column)
    if v is None or (isinstance(v, float) and v != v):
        named = row.get("nonfinite")
        return "NaN" if isinstance(named, str) and column in named.split(",") else "n/a"
    return fmt_cell(v)


def _of(k: int | None, n: int | None) -> str:
    return "" if k is None else (f"{k} of {n}" if n is not None else str(k))


def sampler_tables(
    rows: pd.DataFrame, axes: Sequence[str], records: Mapping[str, SamplerRecord]
) -> tuple[tuple[list[str], list[list[str]]], tuple[list[str], list[list[str]]]]:
    """The convergence and the sampler tables, one row per sampled cell of ``rows``.

    Parameters
    ----------
    rows : pd.DataFrame
        The results.csv rows of the sampled ok cells.
    axes : sequence of str
        The sweep axes that identify a cell (first columns of both tables).
    records : mapping of cell id to SamplerRecord
    """
    conv, samp = [], []
    for _, r in rows.iterrows():
        key = [fmt_cell(r[a]) for a in axes]
        d = records[r["cell_id"]]
        conv.append(
            key
            + [_recorded(r, c) for c in CONVERGENCE_COLUMNS[:4]]
            + [fmt_cell(r.get("worst_ess_bulk"))]
            + [_recorded(r, c) for c in CONVERGENCE_COLUMNS[5:]]
        )
        depth = (
            "n/a"
            if d.n_max_tree_depth is None
            else _of(d.n_max_tree_depth, d.n_transitions)
            + ("" if d.max_tree_depth is None else f" (D={d.max_tree_depth})")
        )
        samp.append(
            key
            + [
                _of(d.n_divergent, d.n_transitions),
                depth,
                fmt_cell(r.get("mean_tree_steps")),
                fmt_cell(r.get("step_size")),
                ", ".join(d.failed),
                d.grade or "-",
                ", ".join(d.grade_failed),
            ]
        )
    return (list(axes) + CONVERGENCE_COLUMNS, conv), (list(axes) + SAMPLER_COLUMNS, samp)


def _badness(d: SamplerRecord) -> tuple:
    """Sort key: worst first (non-finite or larger R-hat, smaller ESS, more failed gates)."""
    r = d.max_r_hat if d.max_r_hat is not None else 0.0
    r = math.inf if r != r else r
    e = -math.inf if d.min_ess_bulk != d.min_ess_bulk else d.min_ess_bulk
    return (-r, e, -len(d.failed))


def worst_cells(records: Mapping[str, SamplerRecord], k: int) -> list[str]:
    """The ``k`` worst cells: largest R-hat (a non-finite one first), then smallest bulk ESS."""
    return sorted(records, key=lambda c: _badness(records[c]))[:k]


def sampler_advice(records: Sequence[SamplerRecord]) -> list[str]:
    """One paragraph per failed gate, with what it measured and what helps."""
    n = len(records)
    by_gate: dict[str, list[SamplerRecord]] = {}
    for d in records:
        for g in d.failed:
            by_gate.setdefault(g, []).append(d)
    out = []
    if "r_hat" in by_gate or "ess_bulk" in by_gate:
        cells = {id(d) for g in ("r_hat", "ess_bulk") for d in by_gate.get(g, [])}
        stuck = sum(1 for d in records if d.stuck)
        text = (
            f"{len(cells)} of {n} sampled cells have an r_hat above 1.01 or a bulk ESS "
            "below 100: their chains have not mixed, so their KL and Wasserstein numbers "
            "describe where the chains happened to be, not the posterior. More warm-up "
            "and draws (or more chains) are the fix."
        )
        if stuck:
            text += (
                f" In {stuck} of them some parameter never moved within its chains "
                "(r_hat or ESS not finite): the sampler is stuck, e.g. a step size that "
                "collapsed during warm-up."
            )
        out.append(text)
    if "divergences" in by_gate:
        ds = by_gate["divergences"]
        total = sum(d.n_divergent or 0 for d in ds)
        trans = sum(d.n_transitions or 0 for d in ds)
        out.append(
            f"{len(ds)} of {n} sampled cells have divergent transitions ({total} of "
            f"{trans}): the sampler met curvature its step size cannot follow, and "
            "the draws may miss part of the posterior. Raise target_accept (smaller "
            "steps) or reparameterize."
        )
    if "tree_depth" in by_gate:
        ds = by_gate["tree_depth"]
        hits = sum(d.n_max_tree_depth or 0 for d in ds)
        trans = sum(d.n_transitions or 0 for d in ds)
        depths = sorted({d.max_tree_depth for d in ds if d.max_tree_depth is not None})
        out.append(
            f"{len(ds)} of {n} sampled cells hit the maximum tree depth: {hits} of "
            f"{trans} transitions ({100 * hits / max(trans, 1):.0f}%) reached "
            f"max_tree_depth ({', '.join(map(str, depths))}), so their trajectories "
            "were cut at 2^D - 1 leapfrog steps before they could turn. The draws are "
            "still valid but explore slowly (low ESS per gradient); the usual causes "
            "are a step size or mass matrix that adapted poorly, or strong "
            "correlations. Raise max_tree_depth, lengthen warm-up so the step size "
            "and mass matrix adapt, or reparameterize (a dense mass matrix, "
            "mass_matrix: dense, helps with correlations)."
        )
    capped = [d for d in records if d.trajectory_at_cap]
    if capped:
        out.append(
            f"{len(capped)} of {n} sampled cells are ChEES cells whose adapted trajectory "
            "length sits at its cap of max_leapfrog steps: the adaptation wanted longer "
            "trajectories and was clipped, so the chains move less per draw than ChEES "
            "would have them (the jitter hides this from the saturation count). Raise "
            "max_leapfrog; each draw then costs up to that many gradients."
        )
    return out


def grade_counts(records: Mapping[str, SamplerRecord]) -> dict[str, list[str]]:
    """The cells of each grade (best first; cells without a grade left out)."""
    out: dict[str, list[str]] = {g: [] for g in GRADES}
    for cid, d in records.items():
        if d.grade in out:
            out[d.grade].append(cid)
    return {g: cids for g, cids in out.items() if cids}


def grade_blocks(
    records: Mapping[str, SamplerRecord],
) -> tuple[list[str], list[tuple[list[str], list[list[str]]]]]:
    """Paragraphs and tables of the grades: how many cells per grade and which gates held
    them back, the gate table (:func:`reports.grade.gate_table`) and what each grade may be
    used for (:data:`reports.grade.USES`); nothing when no cell has a grade."""
    counts = grade_counts(records)
    if not counts:
        return [], []
    n = sum(len(c) for c in counts.values())
    parts = []
    for g, cids in counts.items():
        held: dict[str, int] = {}
        for cid in cids:
            for gate in records[cid].grade_failed:
                held[gate] = held.get(gate, 0) + 1
        why = ", ".join(f"{gate} in {k}" for gate, k in sorted(held.items(), key=lambda t: -t[1]))
        parts.append(f"{len(cids)} {g}" + (f" (kept from the next grade by {why})" if why else ""))
    paras = [
        f"Reference grades of the {n} graded sampled cells: {'; '.join(parts)}. A cell's "
        "grade is the best whose gates all pass, in the table below (a blank metric: the gate "
        "does not apply, e.g. nested R-hat with one superchain; a non-finite one fails). The "
        "weight-space KL and W2 need silver or better, the predictive study bronze or better; "
        "a failed cell is left out of the summary's means (docs/notes/grades.md says why "
        "these thresholds)."
    ]
    uses = (["grade", "may be used for"], [[g, USES[g]] for g in GRADES])
    return paras, [gate_table(), uses]


def grade_lines(records: Mapping[str, SamplerRecord]) -> list[str]:
    """Plain-text lines for ``zoo report`` / ``zoo status``: cells per grade, then each cell
    below gold with the gates that kept it from the next grade up; nothing without grades."""
    counts = grade_counts(records)
    if not counts:
        return []
    n = sum(len(c) for c in counts.values())
    lines = [
        f"grades of {n} sampled cells: " + ", ".join(f"{g} {len(c)}" for g, c in counts.items())
    ]
    for g, cids in counts.items():
        if g == "gold":
            continue
        up = GRADES[GRADES.index(g) - 1]
        for cid in cids:
            why = ", ".join(records[cid].grade_failed) or "?"
            lines.append(f"  {g:<7} {cid}: not {up}: {why}")
    return lines
