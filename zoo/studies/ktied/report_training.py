"""The k-tied study's report sections about training: parameter counts, gradient SNR, -ELBO.

Swiatkowski et al. (2020): parameter counts (Figure 6 left), gradient signal-to-noise ratio
at chosen steps (Figure 6 top right; ours is the paper's minus 1, see
:func:`reports.spectrum.gradient_snr`), -ELBO at chosen steps (Figure 6 bottom right,
Figure 7) and heat maps of a std matrix and its low-rank approximations (Figure 4). The
sections of the spectra and truncation are :mod:`zoo.studies.ktied.report`.
"""

from __future__ import annotations

from typing import Any

from reports.document import section
from reports.figures.spectrum import elbo_curve_figure, heatmap_figure
from reports.labels import fmt_g
from reports.spectrum import snr_noise_floor
from zoo.spec.sections.studies import KTiedStudy

__all__ = ["cell_label", "counts_section", "elbo_section", "heatmap_section", "snr_section"]


def cell_label(method: str, seed: int, seeds: set[int]) -> str:
    """A cell's name in a table: its method, and its seed when there are several."""
    return method if len(seeds) == 1 else f"{method} (seed {seed})"


def counts_section(cells, results, seeds):
    nvar = dict(
        zip(results["cell_id"], results.get("n_var_params", [None] * len(results)), strict=True)
    )
    header = [
        "method",
        "variational parameters",
        "std parameters (weights)",
        "std parameters if mean field",
    ]
    rows = []
    for method, seed, cid, rec, _ in cells:
        std = sum(i["std_params"] for i in rec["layers"].values())
        mf = sum(i["std_params_mean_field"] for i in rec["layers"].values())
        v = nvar.get(cid)
        rows.append(
            [
                cell_label(method, seed, seeds),
                fmt_g(int(v)) if v == v and v is not None else "",
                str(std),
                str(mf),
            ]
        )
    paras = [
        "Variational parameter counts (Figure 6 left, Table 1): a k-tied std matrix of "
        "an m x n layer has k(m + n) parameters instead of mn."
    ]
    return section("k-tied study: parameter counts", paras, [(header, rows)])


def _floor(window: Any) -> str:
    """The SNR noise floor of a ``window``-batch window, as text ("1/7"), or "?" if unknown."""
    try:
        return f"1/{round(1 / snr_noise_floor(int(window)))}"
    except (TypeError, ValueError):
        return "?"


def snr_section(cells, seeds):

    header = ["method", "layer", "step", "mean SNR", "median SNR"]
    rows, curves = [], {}
    window = None
    for method, seed, _, rec, _ in cells:
        window = rec.get("snr_window", window)
        for site, by_step in rec.get("snr", {}).items():
            for step, s in sorted(by_step.items(), key=lambda kv: int(kv[0])):
                rows.append(
                    [
                        cell_label(method, seed, seeds),
                        site,
                        step,
                        fmt_g(s["mean"]),
                        fmt_g(s["median"]),
                    ]
                )
        sites = [s for s, v in rec.get("snr", {}).items() if v]
        if len(sites) >= 2:  # the paper's "Dense 2" layer: the second weight site
            by_step = rec["snr"][sites[1]]
            st = sorted(by_step, key=int)
            curves[cell_label(method, seed, seeds)] = (
                [int(s) for s in st],
                [by_step[s]["median"] for s in st],
            )
    if not rows:
        return None
    comparison = _snr_comparison(cells, seeds)
    paras = [
        f"Gradient signal-to-noise ratio E[g]^2 / Var[g] of each standard-deviation "
        f"parameter over the last {window} batches before the given step (Figure 6 top "
        "right): log sigma for mean field (use guide.scale_transform: exp, as the paper "
        "optimizes log stds), log U and log V for k-tied. Mean over a layer's parameters "
        "(the paper's summary) and the median. With the closed-form KL, a weight that the "
        "data barely reaches (into or out of a ReLU unit dead on the batch) has the "
        "deterministic KL gradient alone, an enormous SNR that dominates the mean of a "
        "mean-field layer; a tied factor sums such weights with active ones. The median is "
        "the robust summary. Variance with ddof=0. The paper's footnote 3 writes the "
        "ratio as E[g^2] / Var[g], which is this one + 1 (E[g^2] = E[g]^2 + Var[g]): add 1 "
        "to these numbers before comparing with the paper's. Each row's method carries its own "
        "optimizer settings; SNRs are compared only between fits trained alike, early in "
        "training while the stds still move (at a stationary point E[g] = 0 and every "
        "guide sits at the noise floor of the window: for Gaussian noise the SNR averages "
        f"1/(window - 3) = {_floor(window)}; reports.spectrum.snr_noise_floor).",
        *comparison,
    ]
    figs = (
        [
            (
                "snr_layer2",
                elbo_curve_figure(
                    curves, ylabel="median gradient SNR", title="second weight layer", log_y=True
                ),
            )
        ]
        if curves
        else []
    )
    return section("k-tied study: gradient signal-to-noise ratio", paras, [(header, rows)], figs)


def _optim_key(rec: dict) -> str:
    o = rec.get("optim") or {}
    return ", ".join(f"{k} {o[k]}" for k in sorted(o)) if o else ""


def _snr_comparison(cells, seeds) -> list[str]:
    """Per layer and step: is each tied method's SNR above the untied (mean-field) one?

    Only fits with the same optimizer settings (lr, batch size, betas) are compared: the
    SNR at a step depends on how far the optimizer has moved the stds by then.
    """
    groups: dict[str, tuple[list, list]] = {}
    for c in cells:
        if any((c[3].get("snr") or {}).values()):  # SNRs recorded at one step or more
            untied, tied = groups.setdefault(_optim_key(c[3]), ([], []))
            (untied if c[3].get("rank") is None else tied).append(c)
    out = []
    for key, (untied, tied) in groups.items():
        if not untied or not tied:
            continue
        base = untied[0]
        where = f" (fits with {key})" if key else ""
        for stat in ("median", "mean"):
            per_site: dict[str, list[int]] = {}
            for site, by_step in base[3]["snr"].items():
                for step, s in by_step.items():
                    for c in tied:
                        other = c[3]["snr"].get(site, {}).get(step)
                        if other is not None:
                            w = per_site.setdefault(site, [0, 0])
                            w[0] += other[stat] > s[stat]
                            w[1] += 1
            if per_site:
                wins = sum(w for w, _ in per_site.values())
                total = sum(t for _, t in per_site.values())
                by = "; ".join(f"{site} {w}/{t}" for site, (w, t) in per_site.items())
                out.append(
                    f"{stat} SNR{where}: a tied guide is above "
                    f"{cell_label(*base[:2], seeds)} in {wins} of {total} (layer, step, k) "
                    f"comparisons; by layer: {by}."
                )
    return out


def elbo_section(cells, seeds):

    curves = {}
    split = "validation"
    for method, seed, _, rec, _ in cells:
        e = rec.get("elbo_steps") or {}
        if e:
            split = rec.get("elbo_split", split)
            st = sorted(e, key=int)
            curves[cell_label(method, seed, seeds)] = ([int(s) for s in st], [e[s] for s in st])
    if not curves:
        return None
    steps = sorted({s for st, _ in curves.values() for s in st})
    header = ["method", *[f"step {s}" for s in steps]]
    rows = [
        [lab, *[fmt_g(dict(zip(st, v, strict=True)).get(s)) for s in steps]]
        for lab, (st, v) in curves.items()
    ]
    paras = [
        f"-ELBO per example on the {split} split at chosen training steps (Figure 6 "
        "bottom right, Figure 7): expected NLL under q plus KL(q || prior) / n_train."
    ]
    fig = elbo_curve_figure(curves, title=f"-ELBO per example ({split})")
    return section("k-tied study: convergence", paras, [(header, rows)], [("neg_elbo_steps", fig)])


def heatmap_section(cells, spec):
    site_by_method = {
        m.name: next(
            (s.heatmap_site for s in spec.studies_for(m) if isinstance(s, KTiedStudy)), None
        )
        for m in spec.inference
    }
    for method, seed, _, rec, arrays in cells:
        if not rec.get("truncation") or rec.get("rank") is not None:
            continue  # the heat map is of a mean-field (untied) std matrix
        site = site_by_method.get(method.split(" ")[0]) or next(iter(rec["layers"]))
        if f"{site}/std" not in arrays:
            continue
        a = arrays[f"{site}/std"]
        fig = heatmap_figure(a, title=f"posterior std of {site} ({method}, seed {seed})")
        paras = [
            f"Heat maps of the posterior standard deviations of {site} "
            f"({'x'.join(map(str, a.shape))}, viewed as a matrix) of {method} and of its "
            "rank-1 and rank-2 approximations clamped at 0 (Figure 4), on one colour "
            "scale."
        ]
        return section(
            "k-tied study: std matrix heat maps",
            paras,
            figures=[(f"heatmap_{method.split(' ')[0]}", fig)],
        )
    return None
