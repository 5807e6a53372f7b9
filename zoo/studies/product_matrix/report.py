"""Report section of the product-matrix study of trained networks: the covariance heat maps.

Reads the cells' ``.product_cov.npz`` artifacts (:mod:`zoo.studies.product_matrix.probe`)
of the first cells per method and x value (at most six).
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


def product_sections(results, run: ArtifactReader, spec: Any) -> list[Section]:
    """The trained networks' product-matrix section, or [] when no cell has the metric."""
    if "product_offdiag_mass" not in results.columns:
        return []
    done = results[results["product_offdiag_mass"].notna() & (results["status"] == "ok")]
    x = spec.report.x if spec.report.x in done.columns else "method"
    first = done.drop_duplicates(subset=[c for c in ("method", x) if c in done.columns])
    covs = {}
    for _, r in first.head(6).iterrows():
        data = run.read_artifact(str(r["cell_id"]), ARTIFACT)
        if data is not None:
            with np.load(io.BytesIO(data)) as f:
                covs[f"{r['method']}, {x}={r[x]}, seed {r['seed']}"] = f["cov"]
    draws = sorted({s.draws for s in spec.studies if isinstance(s, ProductMatrixStudy)})
    paras = [
        "The covariance of vec(W_L ... W_1), the product of the posterior's weight matrices, "
        f"over {', '.join(map(str, draws))} draws of the fitted variational posterior "
        "(row-major: entry a*n_in + b is W[a, b]; model.depth d has d + 1 weight matrices). "
        "Every layer is mean-field, yet from three layers on the product can carry covariance "
        "between all its entries (Farquhar et al. 2020, section 2). product_offdiag_mass is "
        "the share of its squared Frobenius norm off the diagonal."
    ]
    figs = (
        [
            (
                "product_covariance_trained",
                product_covariance_figure(covs, title="posterior product-matrix covariance"),
            )
        ]
        if covs
        else []
    )
    return [section("Product-matrix covariance of the trained networks", paras, figures=figs)]
