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
from reports.figures.spectrum import spectrum_figure
from reports.labels import fmt_g
from reports.spectrum import sign_flip_null, top_fraction_null
from zoo.studies.base import ArtifactReader
from zoo.studies.ktied.probe import ARTIFACT, load_artifact
from zoo.studies.ktied.report_training import (
    cell_label,
    counts_section,
    elbo_section,
    heatmap_section,
    snr_section,
)

__all__ = ["ktied_sections"]

_TRUNC_COLS = ["neg_elbo", "nll", "accuracy", "brier", "ece", "clamped_entries"]
#: Shuffled copies per std matrix in the spectrum's null, their seed, and the k of top-k.
NULL_SHUFFLES = 10
#: sign-flipped copies of the residual in the structure-beyond-rank-1 null
NULL_FLIPS = 20
NULL_SEED = 0
NULL_KS = (1, 2)
#: A centred top-1 fraction this many null sds above the shuffled mean counts as structure.
NULL_Z = 3.0


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
                    cell_label(method, seed, seeds),
                    site,
                    "x".join(map(str, info["shape"])),
                    fmt_g(m[0]),
                    fmt_g(m[:2].sum()),
                    fmt_g(s[0]),
                    fmt_g(s[:2].sum()),
                    fmt_g(info.get("init_std_top1")),
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
                        f"{cell_label(method, seed, seeds)}",
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
    header += ["log std: row+column share", "residual top-1", "residual sign-flipped", "residual z"]
    rows, above, beyond, total = [], 0, 0, 0
    for method, seed, _, rec, arrays in cells:
        if rec.get("rank") is not None:
            continue  # a k-tied std matrix has rank <= k by construction
        for site in rec["layers"]:
            a = arrays.get(f"{site}/std")
            if a is None or a.ndim < 2 or min(a.shape[0], a[0].size) < 2:
                continue
            c = top_fraction_null(a, NULL_KS, shuffles=NULL_SHUFFLES, seed=NULL_SEED)
            u = top_fraction_null(a, (1,), shuffles=NULL_SHUFFLES, seed=NULL_SEED, centre=False)
            row = [cell_label(method, seed, seeds), site]
            for i in range(len(NULL_KS)):
                row += [
                    fmt_g(float(c.observed[i])),
                    f"{_pm(c.null_mean[i], c.null_sd[i])} ({c.null_max[i]:.3g})",
                ]
            z = float(c.z[0])
            row += [f"{z:.1f}", fmt_g(float(u.observed[0])), _pm(u.null_mean[0], u.null_sd[0])]
            rc = sign_flip_null(a, (1,), flips=NULL_FLIPS, seed=NULL_SEED)
            rz = float(rc.z[0])
            row += [
                fmt_g(rc.additive_share),
                fmt_g(float(rc.observed[0])),
                _pm(rc.null_mean[0], rc.null_sd[0]),
                f"{rz:.1f}",
            ]
            rows.append(row)
            above += int(z > NULL_Z)
            beyond += int(rz > NULL_Z)
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
        "Beating whole-matrix shuffles is not yet structure of rank 2 or more: dead units "
        "make whole rows or columns of stds large, and log sigma_ij = mu + a_i + b_j is "
        "the rank-1 k-tied family itself (sigma = u v^T). The last four columns fit that "
        "row-plus-column model to the log stds (the share of their variance it explains), "
        "then set the top-1 fraction of the residual, standardized by its fitted row and "
        f"column noise size, beside {NULL_FLIPS} copies of the residual with random signs "
        "(every entry's magnitude kept, so noise whose size varies by row or column is not "
        "taken for structure; reports.spectrum.sign_flip_null). Residual top-1 more than "
        f"{NULL_Z:g} sds above its sign-flipped copies, i.e. structure beyond rank 1: "
        f"{beyond} of {total}.",
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


#: What the truncation table is; formatted with the std floor inside the KL.
TRUNCATION_TEXT = (
    "Post-training rank-k truncation (Tables 2 and 3 of the paper): every weight std "
    "matrix is replaced by its rank-k SVD approximation clamped at 0, biases and means "
    "are kept, and the posterior is evaluated on the test set like the method itself "
    "with the same weight-noise draws for every row. NLL, accuracy, Brier and ECE are "
    "those of the predictive mixture over the draws; 'NLL per draw' is the mean over "
    "draws of each draw's own NLL, the paper's convention (next section). -ELBO per "
    "example is the expected NLL under q plus KL(q || prior) / n_train, with clamped "
    "stds counted as {floor:g} inside the KL (clamped_entries says how many). Brier is "
    "sum_k (p_k - [y = k])^2; the paper's (TensorFlow Probability's brier_score, its "
    "footnote 2) is ours minus 1: subtract 1 before comparing with its Table 3."
)
#: What the shuffled-stds control shows; formatted with the number of shuffles.
CONTROL_TEXT = (
    "The truncation test says the std matrices are low-rank only if their "
    "arrangement matters: the control replaces every weight std matrix by a "
    "shuffled copy (the same entries in random positions; mean ± sd over {shuffles} "
    "shuffles, the same weight-noise draws) and then truncates that copy like the "
    "real one (second table). If the shuffled stds predict as well as the real ones, "
    "the predictions do not depend on where the stds sit and a harmless truncation "
    "is no evidence of low rank; if the rank-k truncation of the shuffled stds is "
    "as harmless as that of the real ones, neither is."
)


def _truncation_section(cells, seeds):
    """Rank-k truncation of the std matrices beside the shuffled-stds control, per cell."""

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
        lab = cell_label(method, seed, seeds)
        for k in sorted(trunc, key=lambda k: -1 if k == "none" else int(k)):
            res = trunc[k]
            rel = (res["nll"] - base) / abs(base) if k != "none" else 0.0
            what = "no truncation" if k == "none" else f"rank-{k} truncation"
            rows.append(
                [
                    lab,
                    what,
                    *[fmt_g(res.get(c)) for c in _TRUNC_COLS],
                    fmt_g(res.get("nll_per_draw")),
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
                cells_ += [fmt_g(res.get(col)), _pm(*st, digits=4) if st else ""]
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
        TRUNCATION_TEXT.format(floor=floor),
        "; ".join(checks) + ".",
    ]
    tables = []
    if ctl_rows:
        paras.append(CONTROL_TEXT.format(shuffles=shuffles) + " " + "; ".join(ctl_checks) + ".")
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
        lab = cell_label(method, seed, seeds)
        rows.append(
            [
                lab,
                fmt_g(rec.get("predictive_draws")),
                f"{res['nll_per_draw']:.4g} ± {res['nll_per_draw_sem']:.2g}",
                fmt_g(res["nll"]),
                fmt_g(res["accuracy_per_draw"]),
                fmt_g(res["accuracy"]),
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
        heatmap_section(cells, spec),
        snr_section(cells, seeds),
        elbo_section(cells, seeds),
        counts_section(cells, results, seeds),
    ]
    return [s for s in found if s is not None]
