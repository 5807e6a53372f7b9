"""Report sections of the k-tied study (Swiatkowski et al. 2020), from the cells' artifacts.

Reads the cells' ``.ktied.npz`` artifacts (written by :mod:`zoo.studies.ktied.probe`) and builds
:class:`reports.document.Section` objects: spectra of the posterior mean and std matrices
(Figure 3) with a shuffled null (the centred top-k fractions of each std matrix beside
those of shuffled copies of it), post-training rank-k truncation (Tables 2 and 3) beside the
shuffled-std control, per-draw beside mixture NLL, parameter counts (Figure 6 left),
gradient SNR at chosen steps (Figure 6 top right), -ELBO at chosen steps (Figure 6 bottom
right, Figure 7) and heat maps of a std matrix and its low-rank approximations (Figure 4).
The math is in :mod:`reports.spectrum` and :mod:`reports.calibration`.

Conventions that differ from the paper's, said where the numbers are: the paper's SNR
(footnote 3, E[g^2] / Var[g]) is ours plus 1; its Brier score (TensorFlow Probability's,
footnote 2) is ours minus 1; its NLL and accuracy are means over weight draws of each
draw's own metric (``nll_per_draw``), not the predictive mixture's.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from reports.document import section
from reports.spectrum import (
    elbo_curve_figure,
    heatmap_figure,
    snr_noise_floor,
    spectrum_figure,
    top_fraction_null,
)
from zoo.spec.sections.studies import KTiedStudy
from zoo.studies.base import ArtifactReader
from zoo.studies.ktied.probe import ARTIFACT, load_artifact

__all__ = ["ktied_sections"]

_TRUNC_COLS = ["neg_elbo", "nll", "accuracy", "brier", "ece", "clamped_entries"]
#: Shuffled copies per std matrix in the spectrum's null, their seed, and the k of top-k.
NULL_SHUFFLES = 10
NULL_SEED = 0
NULL_KS = (1, 2)
#: A centred top-1 fraction this many null sds above the shuffled mean counts as structure.
NULL_Z = 3.0


def _f(v: Any, digits: int = 4) -> str:
    if v is None or (isinstance(v, float) and not np.isfinite(v)):
        return ""
    return f"{v:.{digits}g}" if isinstance(v, float) else str(v)


def _axis_value(v: Any) -> str:
    """A sweep value as in the spec (a results column with missing values stores ints as floats)."""
    return str(int(v)) if isinstance(v, float) and v.is_integer() else str(v)


def _load(run: ArtifactReader, results, spec) -> list[tuple[str, int, str, dict, dict]]:
    """(label, seed, cell id, record, arrays) of every ok cell with a k-tied artifact.

    The label is the method name plus the cell's values of the other sweep axes (e.g.
    ``k_tied rank=2``), so cells of one method swept over a setting stay apart.
    """
    out = []
    axes = [a for a in spec.sweep if a != "seed" and a in results.columns]
    ok = results[results["status"] == "ok"] if "status" in results.columns else results
    for _, r in ok.iterrows():
        data = run.read_artifact(str(r["cell_id"]), ARTIFACT)
        if data is not None:
            rec, arrays = load_artifact(data)
            extra = [f"{a.split('.')[-1]}={_axis_value(r[a])}" for a in axes if r[a] == r[a]]
            label = " ".join([str(r["method"]), *extra])
            out.append((label, int(r["seed"]), str(r["cell_id"]), rec, arrays))
    return out


def _label(method: str, seed: int, seeds: set[int]) -> str:
    return method if len(seeds) == 1 else f"{method} (seed {seed})"


def _spectrum_section(cells, seeds):
    header = [
        "method",
        "layer",
        "shape",
        "mean top-1",
        "mean top-2",
        "std top-1",
        "std top-2",
        "std top-1 at init",
    ]
    rows, figs = [], []
    for method, seed, _, rec, _ in cells:
        fr = {}
        for site, info in rec["layers"].items():
            m, s = np.asarray(info["mean_fractions"]), np.asarray(info["std_fractions"])
            rows.append(
                [
                    _label(method, seed, seeds),
                    site,
                    "x".join(map(str, info["shape"])),
                    _f(m[0]),
                    _f(m[:2].sum()),
                    _f(s[0]),
                    _f(s[:2].sum()),
                    _f(info.get("init_std_top1")),
                ]
            )
            fr[site] = {"posterior mean": m, "posterior std": s}
        if len(figs) < 4:
            figs.append(
                (
                    f"spectrum_{method.replace(' ', '_').replace('=', '')}_seed{seed}",
                    spectrum_figure(
                        fr,
                        title=f"fraction of variance per singular value: "
                        f"{_label(method, seed, seeds)}",
                    ),
                )
            )
    paras = [
        "Fraction of variance explained by each singular value, gamma_k^2 / sum gamma^2, of "
        "each layer's matrix of posterior means and of posterior standard deviations "
        "(Swiatkowski et al. 2020, Figure 3; uncentred, as in the paper). Conv kernels are "
        "viewed as (filters, in x kh x kw). A k-tied guide's std matrix has rank <= k by "
        "construction; the mean-field rows are the observation. 'std top-1 at init' is the "
        "same fraction for the std matrix before the first step: the mean-field guide starts "
        "with every std equal to init_scale (a rank-1 matrix, fraction 1), so a top-1 "
        "fraction near 1 after training says little unless training moved the stds. The "
        "next section sets each std matrix's centred spectrum beside shuffled copies of it "
        "(the null), and the truncation section tests whether the structure matters.",
    ]
    return section(
        "k-tied study: spectra of posterior means and standard deviations",
        paras,
        [(header, rows)],
        figs,
    )


def _pm(mean: float, sd: float, digits: int = 3) -> str:
    return f"{mean:.{digits}g} ± {sd:.2g}"


def _spectrum_null_section(cells, seeds):
    """Centred top-k fractions of each untied std matrix beside shuffled copies of it."""
    header = ["method", "layer"]
    for k in NULL_KS:
        header += [f"centred std top-{k}", "shuffled: mean ± sd (max)"]
    header += ["top-1 z", "uncentred std top-1 (paper)", "shuffled uncentred: mean ± sd"]
    rows, above, total = [], 0, 0
    for method, seed, _, rec, arrays in cells:
        if rec.get("rank") is not None:
            continue  # a k-tied std matrix has rank <= k by construction
        for site in rec["layers"]:
            a = arrays.get(f"{site}/std")
            if a is None or a.ndim < 2 or min(a.shape[0], a[0].size) < 2:
                continue
            c = top_fraction_null(a, NULL_KS, shuffles=NULL_SHUFFLES, seed=NULL_SEED)
            u = top_fraction_null(a, (1,), shuffles=NULL_SHUFFLES, seed=NULL_SEED, centre=False)
            row = [_label(method, seed, seeds), site]
            for i in range(len(NULL_KS)):
                row += [
                    _f(float(c.observed[i])),
                    f"{_pm(c.null_mean[i], c.null_sd[i])} ({c.null_max[i]:.3g})",
                ]
            z = float(c.z[0])
            row += [f"{z:.1f}", _f(float(u.observed[0])), _pm(u.null_mean[0], u.null_sd[0])]
            rows.append(row)
            above += int(z > NULL_Z)
            total += 1
    if not rows:
        return None
    paras = [
        "The spectrum claim needs a null. A matrix of standard deviations has positive "
        "entries around a common level, and that level alone is a rank-1 component: the "
        "paper's uncentred top-1 fraction is near 1 for any such matrix whose entries vary "
        "little around their level (last two columns: the same entries shuffled keep most "
        "of it). Here each mean-field std matrix is "
        "centred on its grand mean and its top-k fraction of variance (sum of the k largest "
        "squared singular values over all of them) is set beside the same fraction of "
        f"{NULL_SHUFFLES} shuffled copies: the same entries in random positions (seed "
        f"{NULL_SEED}), so the same mean and total variance with the row and column "
        "structure destroyed (reports.spectrum.top_fraction_null). Mean ± sd over the "
        "shuffles and, in brackets, the largest; z is (centred top-1 - shuffled mean) / "
        "shuffled sd. Low-rank structure shows as a centred fraction well above the "
        "shuffled ones; a fraction at the shuffled level is what a structureless matrix of "
        "the same numbers gives (z of order 1).",
        f"Centred top-1 fraction more than {NULL_Z:g} shuffled sds above the shuffled mean: "
        f"{above} of {total} (method, layer) std matrices.",
    ]
    return section(
        "k-tied study: the std spectrum against a shuffled null", paras, [(header, rows)]
    )


def _control_stats(runs: list[dict], col: str) -> tuple[float, float] | None:
    vals = [r[col] for r in runs if r.get(col) is not None]
    if not vals:
        return None
    v = np.asarray(vals, dtype=float)
    return float(v.mean()), float(v.std(ddof=1)) if len(v) > 1 else 0.0


def _truncation_section(cells, seeds):

    header = ["method", "std matrices", *_TRUNC_COLS, "NLL per draw", "NLL vs none"]
    rows, checks = [], []
    ctl_header = [
        "method",
        "std matrices",
        "NLL",
        "shuffled stds: NLL",
        "NLL per draw",
        "shuffled stds: NLL per draw",
        "accuracy",
        "shuffled stds: accuracy",
    ]
    ctl_rows, ctl_checks, shuffles = [], [], 0
    for method, seed, _, rec, _ in cells:
        trunc = rec.get("truncation") or {}
        if not trunc:
            continue
        control = rec.get("truncation_control") or {}
        shuffles = max(shuffles, int(rec.get("control_shuffles") or 0))
        base = trunc["none"]["nll"]
        lab = _label(method, seed, seeds)
        for k in sorted(trunc, key=lambda k: -1 if k == "none" else int(k)):
            res = trunc[k]
            rel = (res["nll"] - base) / abs(base) if k != "none" else 0.0
            what = "no truncation" if k == "none" else f"rank-{k} truncation"
            rows.append(
                [
                    lab,
                    what,
                    *[_f(res.get(c)) for c in _TRUNC_COLS],
                    _f(res.get("nll_per_draw")),
                    f"{100 * rel:+.2f}%",
                ]
            )
            if k != "none":
                checks.append(
                    f"{lab}: rank-{k} NLL {res['nll']:.4f} vs "
                    f"{base:.4f} untruncated ({100 * rel:+.2f}%)"
                )
            runs = control.get(k)
            if not runs:
                continue
            cells_ = [lab, what]
            for col in ("nll", "nll_per_draw", "accuracy"):
                st = _control_stats(runs, col)
                cells_ += [_f(res.get(col)), _pm(*st, digits=4) if st else ""]
            ctl_rows.append(cells_)
            st = _control_stats(runs, "nll")
            if st is not None:
                ctl_checks.append(
                    f"{lab}, {what}: NLL {res['nll']:.4f}, shuffled stds {st[0]:.4f} ± {st[1]:.2g}"
                )
    if not rows:
        return None
    floor = cells[0][3].get("kl_std_floor")
    paras = [
        "Post-training rank-k truncation (Tables 2 and 3 of the paper): every weight std "
        "matrix is replaced by its rank-k SVD approximation clamped at 0, biases and means "
        "are kept, and the posterior is evaluated on the test set like the method itself "
        "with the same weight-noise draws for every row. NLL, accuracy, Brier and ECE are "
        "those of the predictive mixture over the draws; 'NLL per draw' is the mean over "
        "draws of each draw's own NLL, the paper's convention (next section). -ELBO per "
        "example is the expected NLL under q plus KL(q || prior) / n_train, with clamped "
        f"stds counted as {floor:g} inside the KL (clamped_entries says how many). Brier is "
        "sum_k (p_k - [y = k])^2; the paper's (TensorFlow Probability's brier_score, its "
        "footnote 2) is ours minus 1: subtract 1 before comparing with its Table 3.",
        "; ".join(checks) + ".",
    ]
    tables = []
    if ctl_rows:
        paras.append(
            "The truncation test says the std matrices are low-rank only if their "
            "arrangement matters: the control replaces every weight std matrix by a "
            f"shuffled copy (the same entries in random positions; mean ± sd over {shuffles} "
            "shuffles, the same weight-noise draws) and then truncates that copy like the "
            "real one (second table). If the shuffled stds predict as well as the real ones, "
            "the predictions do not depend on where the stds sit and a harmless truncation "
            "is no evidence of low rank; if the rank-k truncation of the shuffled stds is "
            "as harmless as that of the real ones, neither is. " + "; ".join(ctl_checks) + "."
        )
        tables.append((ctl_header, ctl_rows))
    return section(
        "k-tied study: post-training low-rank truncation", paras, [(header, rows), *tables]
    )


def _per_draw_section(cells, seeds):
    """Per-draw NLL (the paper's convention) beside the NLL of the predictive mixture."""
    header = [
        "method",
        "draws",
        "NLL per draw ± s.e.",
        "NLL of the mixture",
        "accuracy per draw",
        "accuracy of the mixture",
    ]
    rows, gaps = [], []
    for method, seed, _, rec, _ in cells:
        res = rec.get("predictive")
        if not res or res.get("nll_per_draw") is None:
            continue
        lab = _label(method, seed, seeds)
        rows.append(
            [
                lab,
                _f(rec.get("predictive_draws")),
                f"{res['nll_per_draw']:.4g} ± {res['nll_per_draw_sem']:.2g}",
                _f(res["nll"]),
                _f(res["accuracy_per_draw"]),
                _f(res["accuracy"]),
            ]
        )
        gaps.append(f"{lab} {res['nll_per_draw'] - res['nll']:+.4f}")
    if not rows:
        return None
    paras = [
        "Two NLLs of the same posterior on the test set, from the same weight draws: per "
        "draw, the mean over draws of each draw's own NLL (each weight sample scored as a "
        "network of its own), and of the mixture, the NLL of the averaged predictive "
        "(the Bayesian model average, as the `nll` column of the results, which uses the "
        "method's predictive_samples draws). By Jensen's "
        "inequality the per-draw NLL is never below the mixture's "
        "(reports.calibration.per_draw_metrics). The paper's Table 2 and Figure 6 most "
        "likely report per draw: they give 'mean and SEM of each metric across 100 weights "
        "samples', a spread that exists only for per-draw metrics (a mixture is one "
        "number). Compare the paper's NLLs and accuracies with the per-draw columns. "
        "Per-draw minus mixture NLL: " + "; ".join(gaps) + ".",
    ]
    return section("k-tied study: per-draw and mixture NLL", paras, [(header, rows)])


def _counts_section(cells, results, seeds):
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
                _label(method, seed, seeds),
                _f(int(v)) if v == v and v is not None else "",
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


def _snr_section(cells, seeds):

    header = ["method", "layer", "step", "mean SNR", "median SNR"]
    rows, curves = [], {}
    window = None
    for method, seed, _, rec, _ in cells:
        window = rec.get("snr_window", window)
        for site, by_step in rec.get("snr", {}).items():
            for step, s in sorted(by_step.items(), key=lambda kv: int(kv[0])):
                rows.append(
                    [_label(method, seed, seeds), site, step, _f(s["mean"]), _f(s["median"])]
                )
        sites = [s for s, v in rec.get("snr", {}).items() if v]
        if len(sites) >= 2:  # the paper's "Dense 2" layer: the second weight site
            by_step = rec["snr"][sites[1]]
            st = sorted(by_step, key=int)
            curves[_label(method, seed, seeds)] = (
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
                    f"{_label(*base[:2], seeds)} in {wins} of {total} (layer, step, k) "
                    f"comparisons; by layer: {by}."
                )
    return out


def _elbo_section(cells, seeds):

    curves = {}
    split = "validation"
    for method, seed, _, rec, _ in cells:
        e = rec.get("elbo_steps") or {}
        if e:
            split = rec.get("elbo_split", split)
            st = sorted(e, key=int)
            curves[_label(method, seed, seeds)] = ([int(s) for s in st], [e[s] for s in st])
    if not curves:
        return None
    steps = sorted({s for st, _ in curves.values() for s in st})
    header = ["method", *[f"step {s}" for s in steps]]
    rows = [
        [lab, *[_f(dict(zip(st, v, strict=True)).get(s)) for s in steps]]
        for lab, (st, v) in curves.items()
    ]
    paras = [
        f"-ELBO per example on the {split} split at chosen training steps (Figure 6 "
        "bottom right, Figure 7): expected NLL under q plus KL(q || prior) / n_train."
    ]
    fig = elbo_curve_figure(curves, title=f"-ELBO per example ({split})")
    return section("k-tied study: convergence", paras, [(header, rows)], [("neg_elbo_steps", fig)])


def _heatmap_section(cells, spec):
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


def ktied_sections(results, run: ArtifactReader, spec) -> list:
    """The k-tied study sections of a run (empty if no cell stored a k-tied artifact)."""
    cells = _load(run, results, spec)
    if not cells:
        return []
    seeds = {c[1] for c in cells}
    found = [
        _spectrum_section(cells, seeds),
        _spectrum_null_section(cells, seeds),
        _truncation_section(cells, seeds),
        _per_draw_section(cells, seeds),
        _heatmap_section(cells, spec),
        _snr_section(cells, seeds),
        _elbo_section(cells, seeds),
        _counts_section(cells, results, seeds),
    ]
    return [s for s in found if s is not None]
