r"""A block of the product-matrix covariance: some outputs x some inputs, exact and sampled.

For a linear network with 784 inputs and 10 outputs the covariance of
:math:`\operatorname{vec}(W)`, :math:`W = W_L \cdots W_1`, has :math:`7840^2` entries. A
block of it, outputs :math:`A` x inputs :math:`B`, needs none of the rest: the rows
:math:`A` of :math:`W` are :math:`W_L[A, :]\, W_{L-1} \cdots W_1` and its columns :math:`B`
are :math:`W_L \cdots W_2\, W_1[:, B]`, so

.. math::

    W[A, B] = W_L[A, :]\; W_{L-1} \cdots W_2\; W_1[:, B],

the product of the same layers with the last one cut to the rows :math:`A` and the first
to the columns :math:`B` (both cuts on the one layer at :math:`L = 1`). Cutting a mean-field
layer leaves a mean-field layer, so :func:`exact_block_covariance` is
:func:`reports.product_matrix.exact_product_covariance` of the cut layers (Farquhar, Smith &
Gal 2020, Appendix A, eq. 14), and :func:`block_product_of_draws` is the product of the cut
draws. The biases of a linear network do not enter its product matrix (they add
:math:`W_L \cdots W_{l+1} b_l` to the output, a separate term), so the block needs only the
weights. Conventions are :mod:`reports.product_matrix`'s: layers input to output, row-major
:math:`\operatorname{vec}` of the ``(len(A), len(B))`` block.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from reports.product_matrix import (
    Layers,
    MeanFieldLayer,
    covariance_standard_error,
    exact_product_covariance,
    off_diagonal_mass,
    product_of_draws,
)

__all__ = [
    "BlockAgreement",
    "block_agreement",
    "block_layers",
    "block_product_of_draws",
    "check_block",
    "exact_block_covariance",
]


def check_block(n_out: int, n_in: int, outputs: Sequence[int], inputs: Sequence[int]) -> None:
    """Raise ``ValueError`` naming the field if an index lies outside ``W``'s shape."""
    for name, idx, n in (("outputs", outputs, n_out), ("inputs", inputs, n_in)):
        bad = [int(i) for i in idx if not 0 <= int(i) < n]
        if bad or len(idx) == 0:
            raise ValueError(
                f"block.{name}: indices must lie in 0..{n - 1} (the product matrix is "
                f"{n_out} outputs x {n_in} inputs), got {bad or 'none'}"
            )


def block_layers(
    layers: Layers, outputs: Sequence[int], inputs: Sequence[int]
) -> list[MeanFieldLayer]:
    """The layers (input to output) with the first cut to the columns ``inputs`` and the
    last to the rows ``outputs``: their product is ``W[outputs][:, inputs]``."""
    cut = [
        MeanFieldLayer(np.asarray(m, dtype=float), np.asarray(s, dtype=float)) for m, s in layers
    ]
    if not cut:
        raise ValueError("layers must hold at least one (mean, std) pair, got none")
    check_block(cut[-1].mean.shape[0], cut[0].mean.shape[1], outputs, inputs)
    cols, rows = list(inputs), list(outputs)
    cut[0] = MeanFieldLayer(cut[0].mean[:, cols], cut[0].std[:, cols])
    cut[-1] = MeanFieldLayer(cut[-1].mean[rows], cut[-1].std[rows])
    return cut


def exact_block_covariance(
    layers: Layers, outputs: Sequence[int], inputs: Sequence[int]
) -> np.ndarray:
    """Exact covariance of row-major ``vec(W[outputs][:, inputs])`` for independent Gaussian
    (mean-field) layers; equal to the block of the full exact covariance, without forming it.

    Shape ``(len(outputs) * len(inputs),) * 2``.
    """
    return exact_product_covariance(block_layers(layers, outputs, inputs))


def block_product_of_draws(
    weight_draws: Sequence[np.ndarray], outputs: Sequence[int], inputs: Sequence[int]
) -> np.ndarray:
    """Per-draw ``W[outputs][:, inputs]`` from per-layer ``(S, n_l, n_{l-1})`` draws, input to
    output; shape ``(S, len(outputs), len(inputs))``."""
    draws = [np.asarray(w, dtype=float) for w in weight_draws]
    if not draws or draws[0].ndim != 3 or draws[-1].ndim != 3:
        raise ValueError("weight_draws must hold (S, n_out, n_in) arrays, input to output")
    check_block(draws[-1].shape[1], draws[0].shape[2], outputs, inputs)
    draws[0] = draws[0][:, :, list(inputs)]
    draws[-1] = draws[-1][:, list(outputs)]
    return product_of_draws(draws)


class BlockAgreement(NamedTuple):
    """Monte Carlo against exact for one covariance block.

    ``max_abs_difference`` is :math:`\\max_{pq} |\\hat c_{pq} - c_{pq}|`; ``max_z`` is
    :math:`\\max_{pq} |\\hat c_{pq} - c_{pq}| / \\operatorname{SE}(\\hat c_{pq})`
    (:func:`reports.product_matrix.covariance_standard_error`; entries with zero SE left out)
    and ``share_within_3se`` the share of entries with :math:`|z| \\le 3`. For ``P`` entries
    of Gaussian errors ``max_z`` is about :math:`\\sqrt{2 \\ln P}` (3.9 for ``P = 5184``); the
    SE is itself estimated from fourth moments, which heavy-tailed deep products make noisy.
    """

    offdiag_mass_mc: float
    offdiag_mass_exact: float
    max_abs_difference: float
    max_z: float
    share_within_3se: float


def block_agreement(samples: np.ndarray, exact: np.ndarray) -> tuple[np.ndarray, BlockAgreement]:
    """The sample covariance (``ddof=1``) of ``samples`` ``(S, P)`` and its agreement with
    the exact ``(P, P)`` covariance."""
    x = np.asarray(samples, dtype=float).reshape(len(samples), -1)
    exact = np.asarray(exact, dtype=float)
    if exact.shape != (x.shape[1], x.shape[1]):
        raise ValueError(f"exact must have shape {(x.shape[1],) * 2}, got {exact.shape}")
    cov = np.atleast_2d(np.cov(x, rowvar=False))
    se = covariance_standard_error(x)
    diff = np.abs(cov - exact)
    ok = se > 0
    z = diff[ok] / se[ok]
    return cov, BlockAgreement(
        offdiag_mass_mc=off_diagonal_mass(cov),
        offdiag_mass_exact=off_diagonal_mass(exact),
        max_abs_difference=float(diff.max()),
        max_z=float(z.max()) if z.size else 0.0,
        share_within_3se=float(np.mean(z <= 3.0)) if z.size else 1.0,
    )
