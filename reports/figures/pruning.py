"""Figures of the over-pruning study (Trippe & Turner 2018, Figures 2, 4 and 5), and the
units' shares of output variance (the rule-free measure of :mod:`reports.pruning`).

Each function takes NumPy arrays (as stored in a cell's ``.pruning.npz``) and returns a
matplotlib Figure (object-oriented API, no pyplot state); :mod:`reports.document` renders it.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from matplotlib.figure import Figure

from reports.pruning import effective_units

__all__ = [
    "posterior_function_figure",
    "trajectory_figure",
    "unit_posterior_figure",
    "unit_scatter_figure",
    "variance_share_figure",
]


def unit_scatter_figure(
    per_method: Mapping[str, Mapping[str, np.ndarray]],
    layer: int = 0,
    title: str = "",
    rule_snr: float | None = None,
):
    """One panel per method: each hidden unit at (incoming KL, outgoing |mean|/std).

    ``per_method[name]`` holds ``layer{k}.in_kl``, ``layer{k}.out_snr`` and
    ``layer{k}.pruned``. Pruned units are drawn in red; ``rule_snr`` draws the rule's
    outgoing threshold as a dotted line.
    """
    names = list(per_method)
    fig = Figure(figsize=(3.6 * len(names), 3.3))
    axes = fig.subplots(1, len(names), squeeze=False)
    for ax, name in zip(axes[0], names, strict=True):
        z = per_method[name]
        kl = np.maximum(z[f"layer{layer}.in_kl"], 1e-4)
        snr = np.minimum(z[f"layer{layer}.out_snr"], 1e3)
        pruned = z[f"layer{layer}.pruned"].astype(bool)
        ax.scatter(kl[~pruned], snr[~pruned], s=14, c="tab:blue", label="active")
        ax.scatter(kl[pruned], snr[pruned], s=14, c="tab:red", label="pruned")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(5e-4, max(10.0, 1.5 * float(kl.max())))
        if rule_snr:
            ax.axhline(rule_snr, c="gray", lw=0.8, ls=":")
        ax.set_xlabel("mean KL of incoming weights to prior")
        ax.set_title(f"{name}: {int(pruned.sum())} of {len(pruned)} pruned")
    axes[0][0].set_ylabel("max |mean|/std of outgoing weights")
    axes[0][0].legend(fontsize=7)
    fig.suptitle(title or f"hidden units of layer {layer}")
    fig.tight_layout()
    return fig


def _normal_pdf(x: np.ndarray, m: float, s: float) -> np.ndarray:
    return np.exp(-0.5 * ((x - m) / s) ** 2) / (s * np.sqrt(2 * np.pi))


def unit_posterior_figure(
    z: Mapping[str, np.ndarray], units: list[int], layer: int = 0, title: str = ""
):
    """Their Figures 2 and 5: per unit, the outgoing weight posterior (top), the incoming
    weight posteriors with the prior dashed (middle) and the activation histogram over the
    training inputs and posterior draws (bottom)."""
    fig = Figure(figsize=(2.4 * len(units), 6))
    axes = fig.subplots(3, len(units), squeeze=False)
    grid = np.linspace(-3, 3, 400)
    pruned = z[f"layer{layer}.pruned"].astype(bool)
    for c, j in enumerate(units):
        om, os_ = z[f"layer{layer}.out_mean"][:, j], z[f"layer{layer}.out_std"][:, j]
        lo = min(-1.0, float((om - 4 * os_).min()))
        hi = max(1.0, float((om + 4 * os_).max()))
        g = np.linspace(lo, hi, 600)
        for m, s in zip(om, os_, strict=True):
            if s > 0:
                axes[0][c].plot(g, _normal_pdf(g, m, s), c="tab:red")
            else:
                axes[0][c].axvline(m, c="tab:red")
        axes[0][c].set_title(f"unit {j} ({'pruned' if pruned[j] else 'active'})", fontsize=9)
        for m, s in zip(z[f"layer{layer}.in_mean"][j], z[f"layer{layer}.in_std"][j], strict=True):
            if s > 0:
                axes[1][c].plot(grid, _normal_pdf(grid, m, s), lw=0.8)
        axes[1][c].plot(grid, _normal_pdf(grid, 0.0, 1.0), "k--", lw=1)
        axes[1][c].set_ylim(0, 2.5)
        hist = z[f"layer{layer}.act_hist"][j]
        edges = np.linspace(-1, 1, len(hist) + 1)
        axes[2][c].bar(
            edges[:-1],
            hist / max(hist.sum(), 1),
            width=np.diff(edges),
            align="edge",
            color="tab:gray",
        )
    axes[0][0].set_ylabel("outgoing weight")
    axes[1][0].set_ylabel("incoming weights")
    axes[2][0].set_ylabel("activation")
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def trajectory_figure(per_method: Mapping[str, Mapping[str, np.ndarray]], title: str = ""):
    """Their Figure 4: KL, -ELBO, expected train NLL and predictive train/test NLL per step.

    ``per_method[name]`` holds ``traj.step``, ``traj.kl``, ``traj.neg_elbo``,
    ``traj.exp_nll_train``, ``traj.nll_train`` and ``traj.nll_test`` (per point).
    """
    fig = Figure(figsize=(15, 3.4))
    axes = fig.subplots(1, 4)
    panels = [
        ("kl", "A. KL / n (standardized units)"),
        ("neg_elbo", "B. -ELBO / n"),
        ("exp_nll_train", "C. expected train NLL / n"),
        ("nll_test", "D. predictive NLL (original units)"),
    ]
    seen: dict[str, list[np.ndarray]] = {key: [] for key, _ in panels}
    for name, z in per_method.items():
        if "traj.step" not in z:
            continue
        step = z["traj.step"]
        for key, _ in panels:
            seen[key].append(z[f"traj.{key}"][2:])
        seen["nll_test"].append(z["traj.nll_train"][2:])
        for ax, (key, label) in zip(axes, panels, strict=True):
            (line,) = ax.plot(
                step, z[f"traj.{key}"], label=f"{name}" if key != "nll_test" else f"{name} test"
            )
            ax.set_title(label, fontsize=9)
            if key == "nll_test":
                ax.plot(
                    step, z["traj.nll_train"], ls="--", c=line.get_color(), label=f"{name} train"
                )
    for ax, (key, _) in zip(axes, panels, strict=True):
        ax.set_xlabel("step")
        if key == "kl":
            ax.set_yscale("log")
        elif seen[key]:  # linear, the first steps (very small init std) clipped off
            v = np.concatenate(seen[key])
            v = v[np.isfinite(v)]
            if len(v):
                pad = 0.05 * (v.max() - v.min() + 1e-9)
                ax.set_ylim(v.min() - pad, v.max() + pad)
    axes[0].legend(fontsize=7)
    axes[3].legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def variance_share_figure(
    per_method: Mapping[str, Mapping[str, np.ndarray]], layer: int = 0, title: str = ""
):
    """One panel per method: the units of a hidden layer sorted by share of output variance.

    ``per_method[name]`` holds ``layer{k}.var_share`` and, for methods the pruning rule
    applies to, ``layer{k}.pruned`` (those units are drawn in red). Log scale; the equal
    share 1/n is dotted and the panel's title gives the effective number of units
    (:func:`reports.pruning.effective_units`).
    """
    names = list(per_method)
    fig = Figure(figsize=(3.6 * len(names), 3.1))
    axes = fig.subplots(1, len(names), squeeze=False, sharey=True)
    floor = 1e-8
    for ax, name in zip(axes[0], names, strict=True):
        z = per_method[name]
        share = np.asarray(z[f"layer{layer}.var_share"], np.float64)
        pruned = np.asarray(z.get(f"layer{layer}.pruned", np.zeros(len(share))), bool)
        order = np.argsort(-np.nan_to_num(share, nan=0.0), kind="stable")
        x = np.arange(1, len(share) + 1)
        y = np.maximum(np.nan_to_num(share[order], nan=floor), floor)
        colors = np.where(pruned[order], "tab:red", "tab:blue")
        ax.bar(x, y, width=0.9, color=colors)
        ax.axhline(1.0 / max(len(share), 1), c="gray", lw=0.8, ls=":")
        ax.set_yscale("log")
        ax.set_ylim(floor, 1.5)
        ax.set_xlabel("unit (sorted by share)")
        ax.set_title(f"{name}: {effective_units(share):.1f} effective of {len(share)}", fontsize=9)
    axes[0][0].set_ylabel("share of output variance")
    fig.suptitle(title or f"hidden layer {layer}")
    fig.tight_layout()
    return fig


def posterior_function_figure(
    panels: Mapping[tuple[str, str], Mapping[str, np.ndarray]],
    rows: list[str],
    cols: list[str],
    title: str = "",
) -> Figure:
    """Posterior functions on one input (Trippe & Turner 2018, Figure 3), one panel per
    ``(row, col)`` (e.g. training-set size x method).

    ``panels[(row, col)]`` holds the arrays of
    :func:`zoo.studies.pruning.probe.function_arrays`: ``fn.x``, ``fn.draws``, ``fn.mean``,
    ``fn.sd``, ``fn.x_train``, ``fn.y_train`` and, for teacher data, ``fn.true``. Each panel
    draws the teacher's function (black), the posterior mean with +-2 std of the function
    (shaded; no observation noise), up to 20 posterior draws (thin) and the training points.
    A missing panel is left blank.
    """
    fig = Figure(figsize=(3.2 * len(cols), 2.5 * len(rows) + 0.6), layout="constrained")
    axes = fig.subplots(len(rows), len(cols), squeeze=False, sharex=True)
    for i, row in enumerate(rows):
        for j, col in enumerate(cols):
            ax, z = axes[i, j], panels.get((row, col))
            if i == 0:
                ax.set_title(col, fontsize=9)
            if j == 0:
                ax.set_ylabel(row, fontsize=8)
            if z is None:
                ax.set_axis_off()
                continue
            x, mean, sd = z["fn.x"], z["fn.mean"], z["fn.sd"]
            ax.fill_between(x, mean - 2 * sd, mean + 2 * sd, color="C0", alpha=0.2, lw=0)
            for f in z["fn.draws"]:
                ax.plot(x, f, color="C0", lw=0.4, alpha=0.5)
            ax.plot(x, mean, color="C0", lw=1.2, label="posterior mean +-2 sd")
            if "fn.true" in z:
                ax.plot(x, z["fn.true"], color="k", lw=1.0, ls="--", label="teacher")
            ax.scatter(z["fn.x_train"], z["fn.y_train"], s=8, color="C3", zorder=3, label="data")
            ax.tick_params(labelsize=7)
    axes[0, 0].legend(fontsize=6, loc="best")
    if title:
        fig.suptitle(title, fontsize=10)
    return fig
