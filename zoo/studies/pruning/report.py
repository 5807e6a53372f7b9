"""Report sections of the over-pruning study (Trippe & Turner 2018).

Built from ``results.csv`` rows and the cells' ``.pruning.npz`` artifacts only:

- the pruned fraction per method (and per hidden layer for deeper MLPs) over the UCI
  splits (or seeds);
- their Table 1: test log-likelihood and RMSE per method in original units, with the
  paper's numbers beside ours (quoted, labelled);
- the rule-free functional measure beside the rule: per hidden layer, the effective number
  of units (participation ratio of the units' shares of output variance,
  :func:`reports.pruning.effective_units`) against the fraction the rule leaves active, and
  the share of output variance that the rule-pruned units carry (left out for runs stored
  before the measure existed);
- per-unit figures (their Figures 2 and 5), the sorted variance shares and the optimization
  trajectories (Figure 4).

The tables are declared as data (:func:`pruned_table`, :func:`table1`,
:func:`effective_table`) and rendered by :func:`reports.study_table.render`: every entry
the mean ± the half-width of its 95% t-interval over the splits, cells graded failed left
out and counted. The prose is the module's templates (``RULE_TEXT``, ...).
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import pandas as pd

from reports.document import section
from reports.figures.pruning import (
    trajectory_figure,
    unit_posterior_figure,
    unit_scatter_figure,
    variance_share_figure,
)
from reports.pruning import PAPER_TABLE1
from reports.study_table import Column, StudyTable, render
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

__all__ = ["PAPER_NAMES", "effective_table", "pruned_table", "pruning_sections", "table1"]

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


def _quote(ref: tuple[float, float]) -> str:
    """A quoted paper number, ``mean ± se`` as the paper prints it (2 decimals)."""
    return f"{ref[0]:.2f} ± {ref[1]:.2f}"


def _load(run: ArtifactReader, cell_id: str) -> dict[str, np.ndarray] | None:
    data = run.read_artifact(cell_id, ARTIFACT)
    if data is None:
        return None
    with np.load(io.BytesIO(data)) as z:
        return {k: z[k] for k in z.files}


# ------------------------------------------------------------------------- the prose
#: What the rule-based table shows; formatted with the study's thresholds and the repeat.
RULE_TEXT = (
    "A hidden unit is pruned when its outgoing weights are confidently near zero (every "
    "outgoing weight has |mean|/std < {out_snr_max:g}) and its incoming weights and bias sit "
    "at the prior (mean KL to the prior <= {in_kl_max:g} nats per weight and mean posterior "
    "std >= {in_std_ratio_min:g} x the prior std; thresholds: the pruning study's settings). "
    "'incoming at prior' is the second condition alone. Means and stds are the guide's (MF, "
    "GD; the marginals for FC) or moments of all kept draws (samplers); MAP and ES are point "
    "estimates without a posterior std: no rule-based statistics. {entries}"
)
GD_TEXT = (
    "GD's posterior std is fixed (guide.scale) and far below the prior std, so under this "
    "rule it cannot prune by construction, as the paper argues; the rule-free effective "
    "number of units (next table, where the run has it) measures it."
)
#: What every entry is: the report's one rule (reports.study_table).
ENTRIES_TEXT = (
    "Each entry is the mean ± the half-width of its 95% Student-t interval over {over}s "
    "({over}s: how many per row); [k/n] marks a mean over only k of the row's n cells."
)
EFFECTIVE_TEXT = (
    "A rule-free functional measure that applies to every method, point estimates and GD "
    "included: each hidden unit's share of output variance, the variance of its "
    "contribution (activation x outgoing weights) to the next layer's pre-activations (the "
    "network's output for the last hidden layer) over the test inputs and posterior draws "
    "(one draw for MAP and ES), normalised over the layer. The effective number of units is "
    "the participation ratio (sum of shares)^2 / (sum of squared shares): n when all n units "
    "carry equal shares, 1 when one unit carries everything. 'active fraction (rule)' is 1 - "
    "the rule's pruned fraction of the layer; 'variance share of rule-pruned units' is the "
    "share of the layer's output variance that the units the rule calls pruned carry. "
    "{entries}",
    "Agreement between the two is the check on the rule: the units it prunes should carry "
    "(almost) none of the output variance, and the effective fraction should sit near the "
    "active fraction (below it when the active units carry unequal shares, never far above "
    "it). A large share on rule-pruned units, or many more effective than active units, "
    "means the rule's thresholds call units pruned that the network still uses.",
    "The measure's nulls. An untrained network is far from n effective units: a tanh layer "
    "of 50 units with N(0, 1) weights has about 15-18, because its activations and outgoing "
    "weights are unequal by chance. So the effective units of one posterior draw's network "
    "(the pooled measure above averages functions over draws, which evens out shares) are "
    "read against 'one prior network', the same measure on networks drawn from the prior "
    "(its mean over draws, the null of no training); and the pooled measure of the first 16 "
    "draws against the same draws with the layer's incoming weights, biases and outgoing "
    "weights each permuted over all positions (mean over 10 shuffles): pruning is a "
    "property of whole units (a row and a column small together), which the shuffle removes "
    "while keeping every weight. With one output the outgoing weights are one per unit and "
    "the shuffle only moves them among units, so there the prior null is the one to read. "
    "Only a value clearly below its nulls shows pruning by this measure.",
)
TABLE1_TEXT = (
    "Held-out mean log-likelihood per test point (log-mean-exp over posterior draws, in the "
    "original units of the target) and RMSE of the predictive mean. {entries} The quoted "
    "column gives the paper's Table 1 where it has the data set (Boston, concrete) and the "
    "network (one hidden layer; 20 splits, hyper-parameters tuned per method by Bayesian "
    "optimization), mean ± its standard error as the paper prints it; it is not computed "
    "here. The paper reports no RMSE."
)
FIGURES_TEXT = (
    "Per-unit statistics of the first stored {over}: each hidden unit at (mean KL of its "
    "incoming weights to the prior, max |mean|/std of its outgoing weights), red if pruned; "
    "and each method's units sorted by their share of output variance (log scale; "
    "rule-pruned units red, the equal share 1/n dotted), with the effective number of units "
    "in the panel's title. Then, as in the paper's Figures 2 and 5, units with the lowest "
    "and highest incoming KL: the posterior of the outgoing weight (top), of the incoming "
    "weights with the N(0, 1) prior dashed (middle), and a histogram of the activation over "
    "the training inputs and posterior draws (bottom). Last, their Figure 4: KL, -ELBO and "
    "expected train NLL per training point (standardized units) and the predictive NLL of "
    "train (dashed) and test data (original units) during optimization."
)
#: The header of the quoted column of Table 1.
QUOTE = "Trippe & Turner 2018, Table 1 (quoted)"
#: The null columns of the effective-units table: the npz-free metric stem and its label.
_NULLS = (
    ("units_eff_sub", "effective units of the first 16 draws"),
    ("units_eff_shuffled", "null: their weights shuffled over units"),
    ("units_eff_draw", "one draw's network"),
    ("units_eff_prior", "null: one prior network"),
)


# ------------------------------------------------------------------------- the tables
def _paper_note(spec: Any) -> tuple[str, Any]:
    """The 'paper's name' note column: the method's name in Trippe & Turner's Table 1."""
    names = {m.name: _paper_name(m) or "" for m in spec.inference}
    return ("paper's name", lambda key: names.get(key["method"], ""))


def pruned_table(groups: list[str], depth_cols: list[str], over: str, spec: Any) -> StudyTable:
    """The rule's pruned fractions per method (and per hidden layer)."""
    point = "n/a (point estimate)"
    cols = [
        Column("pruned_frac", "pruned fraction", "weights", missing=point),
        Column("in_at_prior_frac", "incoming at prior", "weights", missing=""),
        *(
            Column(c, c.replace("pruned_frac.", "pruned "), "weights", missing="")
            for c in depth_cols
        ),
    ]
    return StudyTable((*groups, "method"), cols, over, (_paper_note(spec),), keep_empty=True)


def table1(groups: list[str], over: str, spec: Any) -> StudyTable:
    """Test log-likelihood and RMSE per method, Trippe & Turner's Table 1 quoted beside."""

    def quoted(key: dict) -> str:
        ref = _paper_row(key, spec).get(_paper_names(spec).get(key["method"]) or "")
        return f"{_paper_names(spec)[key['method']]}: {_quote(ref)}" if ref else ""

    cols = (
        Column("loglik", "test log-lik (nats)", "predictions", values=lambda r: -r["nll"]),
        Column("rmse", "test RMSE", "predictions"),
    )
    return StudyTable((*groups, "method"), cols, over, ((QUOTE, quoted),))


def _paper_names(spec: Any) -> dict[str, str | None]:
    return {m.name: _paper_name(m) for m in spec.inference}


def _paper_row(key: dict, spec: Any) -> dict:
    """The paper's Table 1 entries for a row's data set, if its network is theirs."""
    name = key.get("data.name", getattr(spec.data, "name", None))
    depth = key.get("model.depth", spec.model.depth)
    return PAPER_TABLE1.get(name or "", {}) if depth == 1 else {}  # theirs: one layer


def _not_run(rendered, keys: list[tuple], groups: list[str], spec: Any) -> None:
    """Rows quoting the paper's HMC and SGLD where the run has neither."""
    header, rows = rendered
    ran = set(_paper_names(spec).values())
    at = header.index(QUOTE)
    for key in keys:
        paper = _paper_row(dict(zip(groups, key, strict=True)), spec)
        for extra in ("HMC", "SGLD"):
            if paper and extra not in ran:
                row = [*map(str, key), f"({extra}, not run)", *[""] * len(header)]
                row[at] = f"{extra}: {_quote(paper[extra])}"
                rows.append(row[: len(header)])


def effective_table(groups: list[str], over: str, spec: Any) -> StudyTable:
    """The effective number of units per hidden layer, beside the rule and the nulls (of
    the long frame :func:`_by_layer` makes)."""
    cols = [
        Column("units_eff", "effective units", "predictions"),
        Column("units", "units in the layer", kind="setting", missing=""),
        Column("units_eff_frac", "effective fraction", missing=""),
        Column("active", "active fraction (rule)", missing="n/a (no posterior std)"),
        Column("pruned_var_share", "variance share of rule-pruned units", missing=""),
        *(Column(stem, label, missing="") for stem, label in _NULLS),
    ]
    return StudyTable((*groups, "method", "hidden layer"), cols, over, (_paper_note(spec),))


def _by_layer(ok: pd.DataFrame) -> pd.DataFrame | None:
    """One row per cell and hidden layer, the per-layer columns under their stems, or None
    for runs without the effective units."""
    ks = sorted(
        (c.rsplit("layer", 1)[1] for c in ok.columns if c.startswith("units_eff.layer")), key=int
    )
    if not ks or ok[[f"units_eff.layer{k}" for k in ks]].isna().all().all():
        return None
    parts = []
    for k in ks:
        part = ok.assign(**{"hidden layer": k})
        for stem in ("units_eff", "units_eff_frac", "pruned_var_share", *(s for s, _ in _NULLS)):
            part[stem] = ok.get(f"{stem}.layer{k}", np.nan)
        part["units"] = part["units_eff"] / part["units_eff_frac"]
        pruned = ok.get(f"pruned_frac.layer{k}")
        if (pruned is None or pruned.isna().all()) and len(ks) == 1:
            pruned = ok.get("pruned_frac")  # one hidden layer: the network's fraction
        part["active"] = 1.0 - pruned if pruned is not None else np.nan
        parts.append(part[part["units_eff"].notna()])
    return pd.concat(parts, ignore_index=True)


# ------------------------------------------------------------------------- the sections
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
    entries = ENTRIES_TEXT.format(over=over)
    depth_cols = sorted(c for c in ok.columns if c.startswith("pruned_frac.layer"))
    rule = RULE_TEXT.format(**_thresholds(p), entries=entries)
    pruned = render(results, pruned_table(groups, depth_cols, over, spec))
    tables = [pruned] if pruned is not None else []
    sections = [section("Over-pruning: pruned hidden units", [rule, GD_TEXT], tables)]
    long = _by_layer(ok)
    if long is not None:
        table = render(long, effective_table(groups, over, spec))
        paras = [EFFECTIVE_TEXT[0].format(entries=entries), *EFFECTIVE_TEXT[1:]]
        title = "Over-pruning: effective number of units (rule-free)"
        sections.append(section(title, paras, [t for t in [table] if t is not None]))
    t1 = render(results.assign(nll=results.get("nll", np.nan)), table1(groups, over, spec))
    if t1 is not None:
        _not_run(t1, keys, groups, spec)
        title = "Test log-likelihood beside Trippe & Turner's Table 1"
        sections.append(section(title, [TABLE1_TEXT.format(entries=entries)], [t1]))
    figs = _figures(ok, run, methods, groups, keys, over, p.out_snr_max)
    if figs:
        text = FIGURES_TEXT.format(over=over)
        sections.append(
            section("Over-pruning: hidden units and trajectories", [text], figures=figs)
        )
    return sections + function_section(ok, methods, groups, over, lambda c: _load(run, c))


def _thresholds(p: PruningStudy) -> dict[str, float]:
    return {
        "out_snr_max": p.out_snr_max,
        "in_kl_max": p.in_kl_max,
        "in_std_ratio_min": p.in_std_ratio_min,
    }


def _figures(ok, run, methods, groups, keys, over, snr) -> list:
    """The per-unit figures of the first stored repeat of up to three groups."""

    def rows_of(key: tuple, method: str):
        r = ok[ok["method"] == method]
        for g, v in zip(groups, key, strict=True):
            r = r[r[g] == v]
        return r

    figs = []
    for key in keys[:3]:
        stats, first = {}, ""
        for m in methods:
            r = rows_of(key, m.name)
            if len(r) and over in r.columns:
                r = r[r[over] == r[over].iloc[0]]
            if len(r):
                z = _load(run, str(r["cell_id"].iloc[0]))
                if z is not None:
                    stats[m.name] = z
                    first = r[over].iloc[0] if over in r.columns else ""
        if stats:
            tag = ", ".join(
                [*(f"{g}={v}" for g, v in zip(groups, key, strict=True)), f"{over} {first}"]
            )
            stem = "_".join(str(v) for v in key)
            figs += _key_figures(stats, f"_{stem}" if stem else "", tag, snr)
    return figs


def _key_figures(stats: dict, stem: str, tag: str, snr: float) -> list:
    """Figures of one group: unit scatter and variance shares per layer, unit posteriors,
    trajectories."""
    figs = []
    for k in range(max(_n_layers(z) for z in stats.values())):
        ruled = {name: z for name, z in stats.items() if f"layer{k}.in_kl" in z}
        if ruled:
            figs.append((f"pruning_units{stem}_layer{k}", _scatter(ruled, k, tag, snr)))
        shared = {name: z for name, z in stats.items() if f"layer{k}.var_share" in z}
        if shared:
            title = f"hidden layer {k} ({tag}): shares of output variance"
            fig = variance_share_figure(shared, k, title=title)
            figs.append((f"pruning_shares{stem}_layer{k}", fig))
    for name, z in stats.items():
        units = _representative(z)
        if units:
            title = f"{name}, {tag}: units of the first hidden layer"
            fig = unit_posterior_figure(z, units, 0, title=title)
            figs.append((f"pruning_unit_posteriors{stem}_{name}", fig))
    if any("traj.step" in z for z in stats.values()):
        fig = trajectory_figure(stats, title=f"optimization trajectories ({tag})")
        figs.append((f"pruning_trajectories{stem}", fig))
    return figs


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
