"""Report section of the product-matrix study of trained networks: the covariance heat maps.

Reads the cells' ``.product_cov.npz`` artifacts (:mod:`zoo.studies.product_matrix.probe`)
of the first cells per method and x value (at most six): the Monte Carlo and, where
computed, the exact covariance side by side, and a table of the off-diagonal shares and
their agreement.
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np

from reports.document import Section, section
from reports.figures.product_matrix import product_covariance_figure
from zoo.spec.sections.studies import ProductMatrixStudy
from zoo.studies.base import ArtifactReader
from zoo.studies.product_matrix.probe import ARTIFACT

__all__ = ["product_sections"]

#: Columns of the agreement table, in order, where the results have them.
AGREEMENT = (
    "product_offdiag_mass",
    "product_offdiag_mass_exact",
    "product_cov_max_abs_diff",
    "product_cov_max_z",
    "product_cov_within_3se",
)


def product_sections(results, run: ArtifactReader, spec: Any) -> list[Section]:
    """The trained networks' product-matrix section, or [] when no cell has the metric."""
    metric = next(
        (m for m in AGREEMENT[:2] if m in results.columns and results[m].notna().any()), None
    )
    if metric is None:
        return []
    done = results[results[metric].notna() & (results["status"] == "ok")]
    x = spec.report.x if spec.report.x in done.columns else "method"
    first = done.drop_duplicates(subset=[c for c in ("method", x) if c in done.columns])
    covs = {}
    for _, r in first.head(6).iterrows():
        data = run.read_artifact(str(r["cell_id"]), ARTIFACT)
        if data is None:
            continue
        label = f"{r['method']}, {x}={r[x]}, seed {r['seed']}"
        with np.load(io.BytesIO(data)) as f:
            if "cov" in f:
                covs[label + (" (MC)" if "cov_exact" in f else "")] = f["cov"]
            if "cov_exact" in f:
                covs[label + " (exact)"] = f["cov_exact"]
    studies = [s for s in spec.studies if isinstance(s, ProductMatrixStudy)]
    draws = sorted({s.draws for s in studies if s.method != "exact"})
    blocks = {_block_words(s) for s in studies}
    paras = [
        f"The covariance of vec(W_L ... W_1) restricted to {' / '.join(sorted(blocks))}, the "
        "product of the posterior's weight matrices (row-major: entry a*n_in + b is W[a, b] "
        "of the block; model.depth d has d + 1 weight matrices; the biases do not enter the "
        "product matrix of a linear network). "
        + (
            f"Monte Carlo (MC): over {', '.join(map(str, draws))} draws of the fitted "
            "variational posterior. "
            if draws
            else ""
        )
        + "Exact: the closed form for independent Gaussian layers with the mean-field "
        "guide's locations and scales (Farquhar et al. 2020, Appendix A). Every layer is "
        "mean-field, yet from three layers on the product can carry covariance between all "
        "its entries (section 2). product_offdiag_mass is the share of the squared Frobenius "
        "norm off the diagonal (MC; _exact: exact); max_z is the largest |MC - exact| in MC "
        "standard errors (about 4 expected from noise alone over a few thousand entries), "
        "within_3se the share of entries within 3 standard errors."
    ]
    cols = [c for c in AGREEMENT if c in done.columns]
    keys = [c for c in ("method", x, "seed") if c in done.columns]
    rows = [
        [str(r[k]) for k in keys] + [f"{r[c]:.4g}" for c in cols]
        for _, r in done.sort_values(keys).iterrows()
    ]
    header = keys + [c.replace("product_", "") for c in cols]
    figs = (
        [
            (
                "product_covariance_trained",
                product_covariance_figure(
                    covs,
                    title="posterior product-matrix covariance",
                    ncols=2 if any(k.endswith("(exact)") for k in covs) else None,
                ),
            )
        ]
        if covs
        else []
    )
    title = "Product-matrix covariance of the trained networks"
    return [section(title, paras, [(header, rows)], figures=figs)]


def _block_words(study: ProductMatrixStudy) -> str:
    """The block in words: 'outputs [0, 1] x 36 inputs' or 'every entry'."""
    if study.block is None:
        return "every entry"
    return f"outputs {study.block.outputs} x {len(study.block.input_indices())} inputs"
