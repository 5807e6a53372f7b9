"""Report sections of the over-pruning study (Trippe & Turner 2018).

Built from ``results.csv`` rows and the cells' ``.pruning.npz`` artifacts only:

- the pruned fraction per method (and per hidden layer for deeper MLPs), mean and standard
  error over the UCI splits (or seeds);
- their Table 1: test log-likelihood and RMSE per method in original units, mean and
  standard error over splits, with the paper's numbers beside ours (quoted, labelled);
- the rule-free functional measure beside the rule: per hidden layer, the effective number
  of units (participation ratio of the units' shares of output variance,
  :func:`reports.pruning.effective_units`) against the fraction the rule leaves active, and
  the share of output variance that the rule-pruned units carry (left out for runs stored
  before the measure existed);
- per-unit figures (their Figures 2 and 5), the sorted variance shares and the optimization
  trajectories (Figure 4).
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np

from reports.document import section
from reports.figures.pruning import (
    trajectory_figure,
    unit_posterior_figure,
    unit_scatter_figure,
    variance_share_figure,
)
from reports.pruning import PAPER_TABLE1
from zoo.spec.sections.inference import (
    FixedVarianceGuide,
    FullRankGuide,
    HMCMethod,
    MAPMethod,
    MeanFieldGuide,
    MLEMethod,
    NUTSMethod,
)
from zoo.spec.sections.studies import PruningStudy
from zoo.studies.base import ArtifactReader
from zoo.studies.pruning.function_report import function_section
from zoo.studies.pruning.probe import ARTIFACT

__all__ = ["PAPER_NAMES", "pruning_sections"]

#: Which column of the paper's Table 1 a method (or an svi method's guide) corresponds to.
PAPER_NAMES: dict[type, str] = {
    MLEMethod: "ES",
    MAPMethod: "MAP",
    MeanFieldGuide: "MF",
    FixedVarianceGuide: "GD",
    FullRankGuide: "FC",
    NUTSMethod: "HMC",
    HMCMethod: "HMC",
}


def _paper_name(m: Any) -> str | None:
    return PAPER_NAMES.get(type(m)) or PAPER_NAMES.get(type(getattr(m, "guide", None)))


def _mean_se(v) -> tuple[float, float, int]:
    v = np.asarray(v, dtype=np.float64)
    v = v[np.isfinite(v)]
    if len(v) == 0:
        return float("nan"), float("nan"), 0
    se = float(v.std(ddof=1) / np.sqrt(len(v))) if len(v) > 1 else float("nan")
    return float(v.mean()), se, len(v)


def _pm(m: float, se: float, digits: int = 2) -> str:
    if m != m:
        return ""
    return f"{m:.{digits}f}" + ("" if se != se else f" ± {se:.{digits}f}")


def _load(run: ArtifactReader, cell_id: str) -> dict[str, np.ndarray] | None:
    data = run.read_artifact(cell_id, ARTIFACT)
    if data is None:
        return None
    with np.load(io.BytesIO(data)) as z:
        return {k: z[k] for k in z.files}


def pruning_sections(results, run: ArtifactReader, spec: Any) -> list:
    """The report sections of the pruning study, or [] when the spec has none."""
    p = next((s for s in spec.studies if isinstance(s, PruningStudy)), None)
    if p is None or "status" not in results.columns:
        return []
    ok = results[results["status"] == "ok"]
    if ok.empty:
        return []
    over = "split" if "split" in ok.columns else "seed"
    methods = [m for m in spec.inference if m.name in set(ok["method"])]
    groups = [
        a
        for a in spec.sweep
        if a not in ("split", "seed") and a in ok.columns and not a.startswith("inference.")
    ]
    keys = list(ok[groups].drop_duplicates().itertuples(index=False, name=None)) if groups else [()]

    def rows_of(key: tuple, method: str):
        r = ok[ok["method"] == method]
        for g, v in zip(groups, key, strict=True):
            r = r[r[g] == v]
        return r

    depth_cols = sorted(c for c in ok.columns if c.startswith("pruned_frac.layer"))
    sections = []

    # ---------------------------------------------------------------- pruned fractions
    rows = []
    for key in keys:
        for m in methods:
            r = rows_of(key, m.name)
            if r.empty:
                continue
            lead = [*map(str, key), m.name, _paper_name(m) or ""]
            if "pruned_frac" not in r.columns or r["pruned_frac"].isna().all():
                rows.append(
                    [*lead, "n/a (point estimate)", "", *[""] * len(depth_cols), str(len(r))]
                )
                continue
            cells = [
                _pm(*_mean_se(r["pruned_frac"])[:2]),
                _pm(*_mean_se(r["in_at_prior_frac"])[:2]),
            ]
            cells += [_pm(*_mean_se(r[c])[:2]) for c in depth_cols]
            rows.append([*lead, *cells, str(len(r))])
    header = [
        *groups,
        "method",
        "paper's name",
        "pruned fraction",
        "incoming at prior",
        *[c.replace("pruned_frac.", "pruned ") for c in depth_cols],
        f"{over}s",
    ]
    paras = [
        "A hidden unit is pruned when its outgoing weights are confidently near zero (every "
        f"outgoing weight has |mean|/std < {p.out_snr_max:g}) and its incoming weights and "
        f"bias sit at the prior (mean KL to the prior <= {p.in_kl_max:g} nats per weight and "
        f"mean posterior std >= {p.in_std_ratio_min:g} x the prior std; thresholds: "
        "the pruning study's settings). 'incoming at prior' is the second condition alone. Means and "
        f"stds are the guide's (MF, GD; the marginals for FC) or moments of all kept draws "
        "(samplers); MAP and ES are point estimates without a posterior std: no rule-based "
        f"statistics. Mean ± standard error over {over}s.",
        "GD's posterior std is fixed (guide.scale) and far below the prior std, so under "
        "this rule it cannot prune by construction, as the paper argues; the rule-free "
        "effective number of units (next table, where the run has it) measures it.",
    ]
    sections.append(section("Over-pruning: pruned hidden units", paras, [(header, rows)]))

    # ---------------------------------------------------------------- effective units
    table = _effective_units_table(ok, methods, keys, groups, rows_of, over)
    if table is not None:
        paras = [
            "A rule-free functional measure that applies to every method, point estimates "
            "and GD included: each hidden unit's share of output variance, the variance of "
            "its contribution (activation x outgoing weights) to the next layer's "
            "pre-activations (the network's output for the last hidden layer) over the test "
            "inputs and posterior draws (one draw for MAP and ES), normalised over the "
            "layer. The effective number of units is the participation ratio "
            "(sum of shares)^2 / (sum of squared shares): n when all n units carry equal "
            "shares, 1 when one unit carries everything. 'active fraction (rule)' is 1 - "
            "the rule's pruned fraction of the layer; 'variance share of rule-pruned units' "
            "is the share of the layer's output variance that the units the rule calls "
            f"pruned carry. Mean ± standard error over {over}s.",
            "Agreement between the two is the check on the rule: the units it prunes should "
            "carry (almost) none of the output variance, and the effective fraction should "
            "sit near the active fraction (below it when the active units carry unequal "
            "shares, never far above it). A large share on rule-pruned units, or many more "
            "effective than active units, means the rule's thresholds call units pruned "
            "that the network still uses.",
            "The measure's nulls. An untrained network is far from n effective "
            "units: a tanh layer of 50 units with N(0, 1) weights has about 15-18, because "
            "its activations and outgoing weights are unequal by chance. So the effective "
            "units of one posterior draw's network (the pooled measure above averages "
            "functions over draws, which evens out shares) are read against 'one prior "
            "network', the same measure on networks drawn from the prior (mean ± spread "
            "over draws, the null of no training); and the pooled measure of the first 16 "
            "draws against the same draws with the layer's incoming weights, biases and "
            "outgoing weights each permuted over all positions (mean over 10 shuffles): "
            "pruning is a property of whole units (a row and a column small together), "
            "which the shuffle removes while keeping every weight. With one output the "
            "outgoing weights are one per unit and the shuffle only moves them among units, "
            "so there the prior null is the one to read. Only a value clearly below its "
            "nulls shows pruning by this measure.",
        ]
        sections.append(
            section("Over-pruning: effective number of units (rule-free)", paras, [table])
        )

    # ---------------------------------------------------------------- Table 1
    rows = []
    for key in keys:
        name = dict(zip(groups, key, strict=True)).get(
            "data.name", getattr(spec.data, "name", None)
        )
        depth = dict(zip(groups, key, strict=True)).get("model.depth", spec.model.depth)
        paper = PAPER_TABLE1.get(name or "", {}) if depth == 1 else {}  # theirs: 1 layer
        for m in methods:
            r = rows_of(key, m.name)
            if r.empty:
                continue
            nan = (float("nan"), float("nan"), 0)
            ll = _mean_se(-r["nll"]) if "nll" in r.columns else nan
            rmse = _mean_se(r["rmse"]) if "rmse" in r.columns else nan
            pn = _paper_name(m)
            ref = paper.get(pn or "")
            rows.append(
                [
                    *map(str, key),
                    m.name,
                    _pm(ll[0], ll[1]),
                    _pm(rmse[0], rmse[1]),
                    str(ll[2]),
                    f"{pn}: {_pm(*ref)}" if ref else "",
                ]
            )
        if paper:
            for extra in ("HMC", "SGLD"):
                if extra not in {_paper_name(m) for m in methods}:
                    rows.append(
                        [
                            *map(str, key),
                            f"({extra}, not run)",
                            "",
                            "",
                            "",
                            f"{extra}: {_pm(*paper[extra])}",
                        ]
                    )
    header = [
        *groups,
        "method",
        "test log-lik (nats)",
        "test RMSE",
        f"{over}s",
        "Trippe & Turner 2018, Table 1 (quoted)",
    ]
    paras = [
        "Held-out mean log-likelihood per test point (log-mean-exp over posterior draws, in "
        "the original units of the target) and RMSE of the predictive mean, mean ± "
        f"standard error over {over}s. The last column quotes the paper's Table 1 where it "
        "has the data set (Boston, concrete) and the network (one hidden layer; 20 splits, "
        "hyper-parameters tuned per method by Bayesian optimization); it is not computed "
        "here. The paper reports no RMSE."
    ]
    sections.append(
        section("Test log-likelihood beside Trippe & Turner's Table 1", paras, [(header, rows)])
    )

    # ---------------------------------------------------------------- figures
    figs = []
    for key in keys[:3]:
        stats = {}
        for m in methods:
            r = rows_of(key, m.name)
            if len(r) and over in r.columns:
                r = r[r[over] == r[over].iloc[0]]
            if len(r):
                z = _load(run, str(r["cell_id"].iloc[0]))
                if z is not None:
                    stats[m.name] = z
                    first = r[over].iloc[0] if over in r.columns else ""
        if not stats:
            continue
        tag = ", ".join(
            [*(f"{g}={v}" for g, v in zip(groups, key, strict=True)), f"{over} {first}"]
        )
        stem = "_".join(str(v) for v in key)
        stem = f"_{stem}" if stem else ""
        n_layers = max(_n_layers(z) for z in stats.values())
        for k in range(n_layers):
            ruled = {name: z for name, z in stats.items() if f"layer{k}.in_kl" in z}
            if ruled:
                figs.append(
                    (f"pruning_units{stem}_layer{k}", _scatter(ruled, k, tag, p.out_snr_max))
                )
            shared = {name: z for name, z in stats.items() if f"layer{k}.var_share" in z}
            if shared:
                figs.append(
                    (
                        f"pruning_shares{stem}_layer{k}",
                        variance_share_figure(
                            shared, k, title=f"hidden layer {k} ({tag}): shares of output variance"
                        ),
                    )
                )
        for name, z in stats.items():
            units = _representative(z)
            if units:
                figs.append(
                    (
                        f"pruning_unit_posteriors{stem}_{name}",
                        unit_posterior_figure(
                            z, units, 0, title=f"{name}, {tag}: units of the first hidden layer"
                        ),
                    )
                )
        if any("traj.step" in z for z in stats.values()):
            figs.append(
                (
                    f"pruning_trajectories{stem}",
                    trajectory_figure(stats, title=f"optimization trajectories ({tag})"),
                )
            )
    if figs:
        paras = [
            f"Per-unit statistics of the first stored {over}: each hidden unit at (mean KL "
            "of its incoming weights to the prior, max |mean|/std of its outgoing weights), "
            "red if pruned; and each method's units sorted by their share of output "
            "variance (log scale; rule-pruned units red, the equal share 1/n dotted), with "
            "the effective number of units in the panel's title. Then, as in the paper's "
            "Figures 2 and 5, units with the lowest "
            "and highest incoming KL: the posterior of the outgoing weight (top), of the "
            "incoming weights with the N(0, 1) prior dashed (middle), and a histogram of the "
            "activation over the training inputs and posterior draws (bottom). Last, their "
            "Figure 4: KL, -ELBO and expected train NLL per training point (standardized "
            "units) and the predictive NLL of train (dashed) and test data (original units) "
            "during optimization."
        ]
        sections.append(section("Over-pruning: hidden units and trajectories", paras, figures=figs))
    return sections + function_section(ok, methods, groups, over, lambda c: _load(run, c))


def _scatter(stats, layer: int, tag: str, snr: float):
    return unit_scatter_figure(stats, layer, title=f"hidden layer {layer} ({tag})", rule_snr=snr)


def _representative(z: dict[str, np.ndarray], n_each: int = 3) -> list[int]:
    """Units of layer 0 with the lowest and the highest incoming KL (pruned and active)."""
    if "layer0.in_kl" not in z:
        return []
    order = np.argsort(z["layer0.in_kl"], kind="stable")
    picks = [*order[:n_each].tolist(), *order[-n_each:].tolist()]
    return list(dict.fromkeys(int(j) for j in picks))


def _n_layers(z: dict[str, np.ndarray]) -> int:
    """Hidden layers in a cell's npz (rule statistics or variance shares)."""
    return len({k.split(".")[0] for k in z if k.endswith((".pruned", ".var_share"))})


def _effective_units_table(ok, methods, keys, groups, rows_of, over):
    """(header, rows) of the effective-units table, or None for runs without the metric."""
    layer_cols = sorted(
        (c for c in ok.columns if c.startswith("units_eff.layer")),
        key=lambda c: int(c.rsplit("layer", 1)[1]),
    )
    if not layer_cols or ok[layer_cols].isna().all().all():
        return None
    rows = []
    for key in keys:
        for m in methods:
            r = rows_of(key, m.name)
            present = [c for c in layer_cols if c in r.columns and r[c].notna().any()]
            for c in present:
                k = c.rsplit("layer", 1)[1]
                eff = _mean_se(r[c])
                frac = r.get(f"units_eff_frac.layer{k}")
                n_units = ""
                if frac is not None:
                    ratio = (r[c] / frac).to_numpy(dtype=np.float64)
                    ratio = ratio[np.isfinite(ratio)]
                    n_units = f" of {round(float(ratio[0]))}" if len(ratio) else ""
                # the rule's pruned fraction of this layer (one hidden layer: the network's)
                pruned = r.get(f"pruned_frac.layer{k}")
                if (pruned is None or pruned.isna().all()) and len(present) == 1:
                    pruned = r.get("pruned_frac")
                active = _mean_se(1.0 - pruned) if pruned is not None else (float("nan"),) * 2
                share = r.get(f"pruned_var_share.layer{k}")
                share = _mean_se(share) if share is not None else (float("nan"),) * 2
                nulls = [
                    _pm(*_mean_se(r[name])[:2], digits=1) if name in r.columns else ""
                    for name in (
                        f"units_eff_sub.layer{k}",
                        f"units_eff_shuffled.layer{k}",
                        f"units_eff_draw.layer{k}",
                        f"units_eff_prior.layer{k}",
                    )
                ]
                rows.append(
                    [
                        *map(str, key),
                        m.name,
                        _paper_name(m) or "",
                        k,
                        _pm(eff[0], eff[1], 1) + n_units if eff[2] else "",
                        _pm(*_mean_se(frac)[:2]) if frac is not None else "",
                        _pm(*active[:2]) or "n/a (no posterior std)",
                        _pm(*share[:2], digits=3) or "",
                        *nulls,
                        str(len(r)),
                    ]
                )
    header = [
        *groups,
        "method",
        "paper's name",
        "hidden layer",
        "effective units",
        "effective fraction",
        "active fraction (rule)",
        "variance share of rule-pruned units",
        "effective units of the first 16 draws",
        "null: their weights shuffled over units",
        "one draw's network",
        "null: one prior network",
        f"{over}s",
    ]
    return (header, rows) if rows else None
