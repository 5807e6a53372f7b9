"""``simulation: {kind: permutation_target}``: the alignment pipeline on an exact quotient KL.

For each unit kind of :data:`reports.targets.UNIT_KINDS` the Gaussian of
:func:`reports.targets.permutation_target` is drawn as exact AR(1) chains with every draw's
units relabelled at random, once per seed, and each set of draws goes through the
alignment pipeline (:func:`reports.targets.aligned_run`: Stephens pivot, alignment, the
debiased KL and the alignment null) beside the exact quotient KL. The estimate is the
aligned debiased KL less the null, as a network's reference is made
(:func:`reports.alignment.aligned_reference`). It is compared with two answers: the exact
KL of the generating Gaussian, which it recovers within its 95% interval where the units
are told apart (distinct units; a dead unit at a centred prior with ``strength``), and the
rule's own answer (:func:`reports.targets.rule_answer`: the quotient KL that aligning
defines, from ``rule_draws`` independent draws, pivot at its fixed point), which it
recovers also where the units overlap: a near-identical pair's generating Gaussian is not
identifiable from symmetrised draws, and the gap between the two answers is the rule's
systematic error (``docs/notes/known_answers.md``). NumPy only: no sampler, seconds a seed.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from reports.targets import UNIT_KINDS, aligned_run, permutation_target, rule_answer
from zoo.studies.known_answers.report import write_known_answer
from zoo.studies.product_matrix.simulate import SimulationStore

__all__ = ["permutation_rows", "run_permutation_target"]


def permutation_rows(sim: Any, seed: int, kind: str) -> list[dict[str, Any]]:
    """One row per draw seed ``seed, seed + 1, ...`` of unit kind ``kind``: the exact KL and
    the rule's answer (with its s.e.), the raw and aligned debiased KL, the null, the
    estimate ``aligned - null`` with the aligned KL's s.e. and 95% half-width, whether the
    exact KL lies inside that interval and whether the rule's answer does (the half-width
    widened by twice the answer's own s.e.)."""
    target = permutation_target(
        sim.inputs,
        sim.hidden,
        sim.outputs,
        separation=float(sim.separation),
        dead_sd=float(sim.dead_sd),
        seed=sim.target_seed,
        **{"near_identical": float(sim.near_identical), **UNIT_KINDS[kind]},
    )
    rule = rule_answer(
        target,
        draws=sim.rule_draws,
        strength=float(sim.strength),
        pivot_iterations=max(sim.pivot_iterations, 100),
    )
    rows = []
    for draw_seed in range(seed, seed + sim.seeds):
        t0 = time.perf_counter()
        run = aligned_run(
            target,
            sim.chains,
            sim.draws,
            rho=float(sim.rho),
            groups=sim.groups,
            seed=draw_seed,
            strength=float(sim.strength),
            pivot_iterations=sim.pivot_iterations,
        )
        a = run.aligned
        estimate = np.nan if a.debiased is None else float(a.debiased) - run.null
        half = np.nan if a.half_width() is None else float(a.half_width())
        rows.append(
            {
                "kind": kind,
                "seed": draw_seed,
                "kl_exact": target.kl,
                "kl_rule": rule.estimate,
                "kl_rule_se": rule.se,
                "kl_raw": np.nan if run.raw.debiased is None else float(run.raw.debiased),
                "kl_aligned": np.nan if a.debiased is None else float(a.debiased),
                "null": run.null,
                "estimate": estimate,
                "se": np.nan if a.se is None else float(a.se),
                "half_width": half,
                "inside": bool(abs(estimate - target.kl) <= half),
                "inside_rule": bool(abs(estimate - rule.estimate) <= half + 2.0 * rule.se),
                "seconds": time.perf_counter() - t0,
            }
        )
    return rows


def _summary(seeds: pd.DataFrame) -> pd.DataFrame:
    """One row per kind: the exact KL and the rule's answer, the mean (sd) of the estimates
    over the seeds, the mean null and the counts of seeds whose interval holds each."""
    g = seeds.groupby("kind", sort=False)
    out = g.agg(
        kl_exact=("kl_exact", "first"),
        kl_rule=("kl_rule", "first"),
        kl_raw_mean=("kl_raw", "mean"),
        kl_aligned_mean=("kl_aligned", "mean"),
        null_mean=("null", "mean"),
        estimate_mean=("estimate", "mean"),
        estimate_sd=("estimate", "std"),
        half_width_mean=("half_width", "mean"),
        inside=("inside", "sum"),
        inside_rule=("inside_rule", "sum"),
        seeds=("seed", "count"),
    ).reset_index()
    out["inside"] = out["inside"].astype(int)
    out["inside_rule"] = out["inside_rule"].astype(int)
    out["expected"] = out["kind"].map(EXPECTED)
    return out


#: What each kind should show (``docs/notes/known_answers.md``).
EXPECTED = {
    "distinct": "both answers inside",
    "near_identical": "the rule's answer inside (with a converged pivot); the exact one "
    "not (unidentifiable: the rule's systematic error)",
    "dead_at_prior": "by direction neither (the pivot cannot place the unit); with "
    "strength 0.5 both",
}


def run_permutation_target(
    spec: Any, store: SimulationStore, *, log: Callable[[str], None] | None = None
) -> dict[str, Path]:
    """Run ``spec.simulation`` (a permutation target): ``results.csv`` one row per unit kind,
    ``seeds.csv`` one per kind and seed, and the report."""
    log = log or (lambda msg: print(msg, file=sys.stderr))
    sim = spec.simulation
    store.prepare()
    store.write_spec(spec)
    rows = []
    for kind in sim.kinds:
        rows += permutation_rows(sim, spec.seed, kind)
        mine = [r for r in rows if r["kind"] == kind]
        log(
            f"{kind}: exact KL {mine[0]['kl_exact']:.4g}, aligned - null "
            + ", ".join(f"{r['estimate']:.4g} +- {r['half_width']:.2g}" for r in mine)
            + f": {sum(r['inside'] for r in mine)} of {len(mine)} inside; the rule's answer "
            + f"{mine[0]['kl_rule']:.4g}, {sum(r['inside_rule'] for r in mine)} inside"
        )
    seeds = pd.DataFrame(rows)
    return write_known_answer(
        spec,
        store,
        "Permutation target: alignment on a symmetrised Gaussian",
        [_text(spec)],
        {"results": _summary(seeds), "seeds": seeds},
    )


def _text(spec: Any) -> str:
    """The report's paragraph: the target, the draws and what each column is."""
    sim = spec.simulation
    return (
        f"A Gaussian over {sim.hidden} hidden units of {sim.inputs} inputs and {sim.outputs} "
        f"output(s), units independent, mean incoming vectors of length {sim.separation:g} sd "
        f"(target seed {sim.target_seed}); {sim.chains} exact AR(1) chains (rho {sim.rho:g}) "
        f"of {sim.draws} draws, every draw's units relabelled at random, {sim.seeds} seeds "
        f"from {spec.seed}. Kinds: distinct (every unit a signature of its own, the last "
        f"dead with a direction of its own), near_identical (units 0 and 1 "
        f"{sim.near_identical:g} sd apart), dead_at_prior (the dead unit's incoming weights "
        "at a centred prior). kl_exact: KL(q_diag || q_full) of the generating Gaussian; "
        f"kl_rule: the quotient KL that the alignment rule defines ({sim.rule_draws:,} "
        "independent draws, pivot at its fixed point, less its null); kl_raw: the "
        "symmetrised draws' debiased KL unaligned; kl_aligned: aligned to the Stephens "
        f"pivot (at most {sim.pivot_iterations} iterations), debiased; null: the alignment "
        "null; estimate = kl_aligned - null with the aligned KL's s.e. and 95% t half-width "
        f"over {sim.groups} chain groups; inside / inside_rule: the seeds whose interval "
        "holds kl_exact / kl_rule. Expected: see the column expected."
    )
