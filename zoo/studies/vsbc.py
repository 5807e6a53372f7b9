"""The VSBC study: variational simulation-based calibration of an svi method's guide.

Yao, Vehtari, Simpson & Gelman (2018), "Yes, but did it work?", section 3. For each of
``replications`` replications (stream :attr:`~zoo.seeds.Stream.VSBC` ``+ r``), the probe
draws the weights from the cell's prior and targets from its likelihood at the training
inputs, refits the method (its settings, the cell's seed, ``steps`` from the study when
given) to the simulated targets, and takes q's marginal CDF at the true weights
(:func:`guides.checks.vsbc`; closed form from ``guide.loc_scale``). The cell records the
share of weights whose p-values fail, at 5%, Yao et al.'s symmetry test
(``vsbc_asym_frac``: q biased) and the Kolmogorov-Smirnov test against the uniform
(``vsbc_nonuniform_frac``: q biased, too narrow or too wide); with calibrated posteriors
both are near 0.05. The p-values are the cell artifact ``.vsbc.npz`` (site -> array
``(replications, *site shape)``), drawn by the report as histograms per site.
"""

from __future__ import annotations

import io
from typing import Any, NamedTuple

import numpy as np
import pandas as pd
import torch
from pyro.util import get_rng_state, set_rng_state

from guides.checks import vsbc
from reports.document import Section, section
from reports.figures.vsbc import vsbc_histograms
from zoo.inference.base import Fit, FitContext, Hooks
from zoo.inference.svi import fit_svi_method
from zoo.seeds import Stream, seed_for
from zoo.spec.sections.studies import VSBCStudy
from zoo.studies.base import ArtifactReader, CellContext, StudyPlugin

__all__ = ["ARTIFACT", "LABELS", "LEVEL", "STUDY", "VSBCProbe"]

#: Suffix of the cell artifact: one array of p-values per site.
ARTIFACT = ".vsbc.npz"
#: Level of the per-weight tests behind the recorded shares.
LEVEL = 0.05
#: The study's columns for people: metric -> (what it is; unit or None).
LABELS: dict[str, tuple[str, str | None]] = {
    "vsbc_asym_frac": ("share of weights whose VSBC p-values are asymmetric at 5% (bias)", None),
    "vsbc_nonuniform_frac": (
        "share of weights whose VSBC p-values are not uniform at 5% (miscalibrated)",
        None,
    ),
}
#: Most rows (cells) of the report's figure.
MAX_ROWS = 6


class _Simulated(NamedTuple):
    """Training data of one replication: the cell's inputs and the simulated targets."""

    x_train: torch.Tensor
    y_train: torch.Tensor
    true_params: None = None


class VSBCProbe:
    """VSBC p-values of an svi cell's method, after its own fit (no hooks)."""

    def __init__(self, section: VSBCStudy, ctx: CellContext) -> None:
        self.section, self.ctx = section, ctx

    @property
    def hooks(self) -> Hooks:
        return Hooks()

    def _refit(self, model: Any, y_star: dict[str, torch.Tensor]) -> Any:
        """The method refitted to simulated targets, with the cell's seed: its guide."""
        ctx, method = self.ctx, self.ctx.cell.method
        if self.section.steps is not None:
            method = method.model_copy(update={"steps": self.section.steps, "epochs": None})
        data = _Simulated(ctx.data.x_train, y_star["obs"])
        fit = fit_svi_method(method, ctx.model, data, FitContext(ctx.seed, ctx.runtime), Hooks())
        return fit.posterior.guide

    def finish(self, fit: Fit) -> tuple[dict[str, Any], dict[str, bytes]]:
        """``vsbc_asym_frac``, ``vsbc_nonuniform_frac`` and ``{ARTIFACT: npz}``."""
        state = get_rng_state()  # the refits seed Python's, NumPy's and torch's generators
        try:
            res = vsbc(
                self.ctx.model,
                self._refit,
                self.ctx.data.x_train,
                observed=["obs"],
                replications=self.section.replications,
                seed=seed_for(self.ctx.seed, Stream.VSBC),
            )
        finally:
            set_rng_state(state)
        asym = np.concatenate([v.ravel() for v in res.symmetry().values()])
        nonuniform = np.concatenate([v.ravel() for v in res.uniformity().values()])
        buf = io.BytesIO()
        np.savez_compressed(buf, **{k: v.astype(np.float32) for k, v in res.pvalues.items()})
        metrics = {
            "vsbc_asym_frac": float(np.mean(asym < LEVEL)),
            "vsbc_nonuniform_frac": float(np.mean(nonuniform < LEVEL)),
        }
        return metrics, {ARTIFACT: buf.getvalue()}


def vsbc_sections(results: pd.DataFrame, run: ArtifactReader, spec: Any) -> list[Section]:
    """The VSBC section: how to read it and the p-value histograms of the first cells per
    method and x value; [] when no cell has the study's metrics."""
    if "vsbc_nonuniform_frac" not in results.columns:
        return []
    done = results[results["vsbc_nonuniform_frac"].notna() & (results["status"] == "ok")]
    x = spec.report.x if spec.report.x in done.columns else "method"
    first = done.drop_duplicates(subset=[c for c in ("method", x) if c in done.columns])
    rows: dict[str, dict[str, np.ndarray]] = {}
    for _, r in first.head(MAX_ROWS).iterrows():
        data = run.read_artifact(str(r["cell_id"]), ARTIFACT)
        if data is not None:
            with np.load(io.BytesIO(data)) as f:
                label = str(r["method"]) if x == "method" else f"{r['method']}, {x}={r[x]}"
                rows[label] = {k: f[k] for k in f.files}
    reps = sorted({s.replications for s in spec.studies if isinstance(s, VSBCStudy)})
    paras = [
        "Variational simulation-based calibration (Yao, Vehtari, Simpson & Gelman 2018, "
        f"section 3): {' or '.join(map(str, reps))} times, weights drawn from the prior and "
        "targets from the likelihood at the training inputs, the method refitted to them, "
        "and p = q's marginal CDF at the true weight, for every weight. If q were the exact "
        "posterior every histogram below would be flat (dashed): a U shape is a q too narrow "
        "(overconfident: mean field's usual shape), a hump a q too wide, a slope a biased q.",
        f"vsbc_asym_frac is the share of weights whose p-values fail, at {LEVEL:.0%}, the "
        "paper's symmetry test (Kolmogorov-Smirnov of p against 1 - p): it detects bias only, "
        "a centred q too narrow or too wide passes it. vsbc_nonuniform_frac is the share "
        f"that fail the Kolmogorov-Smirnov test against the uniform at {LEVEL:.0%}: it "
        f"detects both. A calibrated q gives about {LEVEL:.2f} for each; with few "
        "replications the tests have little power.",
    ]
    figs = [("vsbc_pvalues", vsbc_histograms(rows, title="VSBC p-values"))] if rows else []
    return [section("Variational simulation-based calibration (VSBC)", paras, figures=figs)]


STUDY = StudyPlugin(
    "vsbc",
    VSBCProbe,
    vsbc_sections,
    labels=LABELS,
    headline=("vsbc_nonuniform_frac", "vsbc_asym_frac"),
)
