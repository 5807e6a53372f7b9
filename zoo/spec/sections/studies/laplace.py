"""The ``laplace`` study section: the price of mean field with no sampling, for the Laplace
Gaussian at a mode. No torch import here.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from zoo.spec.sections.bounds import Real
from zoo.spec.sections.studies.base import StudySection

__all__ = ["LaplaceStudy"]


class LaplaceStudy(StudySection):
    """The price of mean field for the Laplace approximation at a mode: no sampling.

    At the mode m of the posterior over all weights and biases (the point of a ``map`` or
    ``mle`` method, or the posterior mean of an svi method, refined by ``refine_steps``
    full-batch L-BFGS iterations on the negative log posterior), with H its Hessian
    (``curvature: hessian``) or generalized Gauss-Newton matrix J^T Lambda J plus the prior
    precision (``curvature: ggn``): q_full = N(m, H^-1), q_diag the KL-closest diagonal
    Gaussian (precisions H_ii), KL(q_diag || q_full) = (sum_i log H_ii - log det H) / 2 and
    the closed-form W2 between them, for the whole network and per layer (MacKay 1992;
    Farquhar, Smith & Gal 2020 measure the same KL on HMC draws). A learned noise is held at
    its estimate.
    """

    families: ClassVar[frozenset[str]] = frozenset({"point", "svi"})
    #: The curvature, its eigendecomposition and the covariance.
    dense_matrices: ClassVar[int] = 3

    kind: Literal["laplace"] = Field(description="Study kind.")
    curvature: Literal["ggn", "hessian"] = Field(
        "ggn",
        description="H: the generalized Gauss-Newton matrix (positive definite at any point) "
        "or the exact Hessian of the negative log posterior (positive definite only at a "
        "strict local minimum; otherwise the KL is NaN and laplace_min_eig says why).",
    )
    refine_steps: int = Field(
        100,
        ge=0,
        description="Full-batch L-BFGS iterations (float64, strong Wolfe line search) from "
        "the method's point (MAP estimate, svi posterior mean) to the mode; 0 uses the "
        "point as it is (laplace_grad_norm then says how far from a mode it is).",
    )
    refinements: int = Field(
        1,
        ge=1,
        le=32,
        description="Starts of the refinement: the method's point and refinements - 1 "
        "copies of it jittered by refine_jitter, each refined by refine_steps L-BFGS "
        "iterations. With two or more, laplace_kl_refine_sd (and its ratio to the mean, "
        "laplace_kl_refine_rel_sd) is the spread of the KL over the modes reached: how much "
        "the mode itself moves the number where none is exact (ReLU networks). The headline "
        "laplace_kl stays the unjittered start's.",
    )
    refine_jitter: Real = Field(
        0.01,
        gt=0,
        le=1,
        description="Std of the jitter of the extra starts, relative to the root mean "
        "square of each weight or bias site at the point.",
    )
    max_params: int = Field(
        5000,
        gt=0,
        description="Cells of networks with more weights and biases than this record no "
        "Laplace metrics (H has D^2 entries and its factorization costs D^3).",
    )
    save_precision: bool = Field(
        False,
        description="Store H (float64, D x D, the precision of q_full; weights and biases in "
        "model order) as the cell artifact cells/<cell id>.laplace_precision.npy: a "
        "ground-truth target for `simulation: {kind: gaussian, cov_file: ..., file_holds: "
        "precision}` (8 D^2 bytes).",
    )
