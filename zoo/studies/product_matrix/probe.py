"""The product-matrix study (Farquhar et al. 2020, section 2) of trained linear networks.

For a network with linear activations the function is the product ``W_L ... W_1`` of its
weight matrices (the biases do not enter it). :class:`ProductMatrixProbe` computes the
covariance of ``vec(W_L ... W_1)``, or of a block of it (``block``: some outputs x some
inputs, :mod:`reports.product_block`), by ``method``:

- ``mc``: over ``draws`` posterior draws of the fitted posterior (stream
  :attr:`~zoo.seeds.Stream.PRODUCT_MATRIX`), metric ``product_offdiag_mass``;
- ``exact``: in closed form from the mean-field guide's locations and scales (independent
  Gaussian layers, :func:`reports.product_block.exact_block_covariance`), metric
  ``product_offdiag_mass_exact``;
- ``both``: the two, and their agreement: ``product_cov_max_abs_diff``,
  ``product_cov_max_z`` (the largest difference in Monte Carlo standard errors) and
  ``product_cov_within_3se``.

The covariances are the cell artifact ``.product_cov.npz`` (``cov`` and/or ``cov_exact``).
Every layer of a mean-field posterior is diagonal, yet from three layers on the product
can carry covariance between all its entries.
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np

from reports.product_block import (
    block_agreement,
    block_product_of_draws,
    check_block,
    exact_block_covariance,
)
from reports.product_matrix import (
    off_diagonal_mass,
    product_covariance_from_draws,
    product_of_draws,
)
from zoo.inference.base import Fit, Hooks
from zoo.runtime import Runtime
from zoo.seeds import Stream, seed_for
from zoo.studies.base import CellContext

__all__ = ["ARTIFACT", "CHUNK", "ProductMatrixProbe"]

#: Suffix of the cell artifact: ``cov`` (Monte Carlo) and/or ``cov_exact`` (float32),
#: ``shape`` (outputs, inputs) of the block.
ARTIFACT = ".product_cov.npz"

#: Posterior draws held at once when a block is asked for (a 784-100-...-10 network's
#: draws take 0.7 MB each); chunk ``k`` is seeded from ``SeedSequence([seed, k])``.
CHUNK = 250


class ProductMatrixProbe:
    """Covariance of the product of the weight matrices: sampled, exact or both."""

    def __init__(self, section: Any, ctx: CellContext) -> None:
        self.section, self.ctx = section, ctx

    @property
    def hooks(self) -> Hooks:
        return Hooks()

    def finish(self, fit: Fit) -> tuple[dict[str, Any], dict[str, bytes]]:
        """The metrics of ``method`` and ``{ARTIFACT: npz}``."""
        sec = self.section
        sites = [w for w, _ in self.ctx.model.layer_sites()]
        info = self.ctx.model.site_info()
        n_out, n_in = info[sites[-1]][0][0], info[sites[0]][0][1]
        block = sec.block
        rows = list(block.outputs) if block else list(range(n_out))
        cols = block.input_indices() if block else list(range(n_in))
        check_block(n_out, n_in, rows, cols)
        seed = seed_for(self.ctx.seed, Stream.PRODUCT_MATRIX)
        metrics: dict[str, Any] = {}
        arrays: dict[str, np.ndarray] = {"shape": np.array([len(rows), len(cols)])}
        samples = None
        if sec.method != "exact":
            if block is None:  # the whole matrix from one call, as before blocks existed
                draws = fit.posterior.sample(sec.draws, seed=seed)
                weights = [Runtime.numpy(draws[w]).astype(np.float64) for w in sites]
                cov = product_covariance_from_draws(weights)
                samples = product_of_draws(weights).reshape(sec.draws, -1)
            else:
                samples = self._block_samples(fit, sites, rows, cols, seed)
                cov = np.atleast_2d(np.cov(samples, rowvar=False))
            metrics["product_offdiag_mass"] = off_diagonal_mass(cov)
            arrays["cov"] = cov.astype(np.float32)
        if sec.method != "mc":
            guide = fit.posterior.guide
            layers = [
                tuple(Runtime.numpy(t.detach()).astype(np.float64) for t in guide.loc_scale(w))
                for w in sites
            ]
            exact = exact_block_covariance(layers, rows, cols)
            metrics["product_offdiag_mass_exact"] = off_diagonal_mass(exact)
            arrays["cov_exact"] = exact.astype(np.float32)
        if samples is not None and sec.method == "both":
            _, agree = block_agreement(samples, exact)
            metrics["product_cov_max_abs_diff"] = agree.max_abs_difference
            metrics["product_cov_max_z"] = agree.max_z
            metrics["product_cov_within_3se"] = agree.share_within_3se
        buf = io.BytesIO()
        np.savez_compressed(buf, **arrays)
        return metrics, {ARTIFACT: buf.getvalue()}

    def _block_samples(
        self, fit: Fit, sites: list[str], rows: list[int], cols: list[int], seed: int
    ) -> np.ndarray:
        """``(draws, len(rows) * len(cols))`` draws of the block, sampled in chunks."""
        out, k, left = [], 0, self.section.draws
        while left > 0:
            n = min(CHUNK, left)
            chunk_seed = int(np.random.SeedSequence([seed, k]).generate_state(1)[0])
            draws = fit.posterior.sample(n, seed=chunk_seed)
            weights = [Runtime.numpy(draws[w]).astype(np.float64) for w in sites]
            out.append(block_product_of_draws(weights, rows, cols).reshape(n, -1))
            del draws, weights
            k, left = k + 1, left - n
        return np.concatenate(out)
