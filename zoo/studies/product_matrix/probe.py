"""The product-matrix study of a trained linear network (Farquhar et al. 2020, section 2).

For a network with linear activations the function is the product ``W_L ... W_1`` of its
weight matrices. :class:`ProductMatrixProbe` takes ``draws`` posterior draws of the fitted
posterior (stream :attr:`~zoo.seeds.Stream.PRODUCT_MATRIX`), the covariance of
``vec(W_L ... W_1)`` over them
(:func:`reports.product_matrix.product_covariance_from_draws`), its off-diagonal share as a
metric, and the covariance as the cell artifact ``.product_cov.npz``. Every layer of a
mean-field posterior is diagonal, yet from three layers on the product can carry
covariance between all its entries.
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np

from reports.product_matrix import off_diagonal_mass, product_covariance_from_draws
from zoo.inference.base import Fit, Hooks
from zoo.runtime import Runtime
from zoo.seeds import Stream, seed_for
from zoo.studies.base import CellContext

__all__ = ["ARTIFACT", "ProductMatrixProbe"]

#: Suffix of the cell artifact: ``cov`` (float32) and ``shape`` (outputs, inputs).
ARTIFACT = ".product_cov.npz"


class ProductMatrixProbe:
    """Covariance of the product of the weight matrices over posterior draws."""

    def __init__(self, section: Any, ctx: CellContext) -> None:
        self.section, self.ctx = section, ctx

    @property
    def hooks(self) -> Hooks:
        return Hooks()

    def finish(self, fit: Fit) -> tuple[dict[str, Any], dict[str, bytes]]:
        """``product_offdiag_mass`` and ``{ARTIFACT: npz}``."""
        draws = fit.posterior.sample(
            self.section.draws, seed=seed_for(self.ctx.seed, Stream.PRODUCT_MATRIX)
        )
        weights = [
            Runtime.numpy(draws[w]).astype(np.float64) for w, _ in self.ctx.model.layer_sites()
        ]
        cov = product_covariance_from_draws(weights)
        buf = io.BytesIO()
        shape = np.array(weights[-1].shape[1:2] + weights[0].shape[2:3])
        np.savez_compressed(buf, cov=cov.astype(np.float32), shape=shape)
        return {"product_offdiag_mass": off_diagonal_mass(cov)}, {ARTIFACT: buf.getvalue()}
