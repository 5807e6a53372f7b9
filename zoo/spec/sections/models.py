"""The ``model`` section of a spec: network families (``mlp``, ``lenet``).

A network section declares ``samplable`` (whether the samplers of :mod:`zoo.inference.mcmc`
can run on it), ``linear`` (no nonlinearity: the product matrix exists) and ``symmetries``
(the exact moves a sampler's ``symmetry_moves`` can take along its hidden units). The weight prior
and the likelihood are sections of their own (:mod:`zoo.spec.sections.priors`,
:mod:`zoo.spec.sections.likelihoods`). No torch import here.
"""

from __future__ import annotations

import math
from typing import Annotated, ClassVar, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from zoo.spec.base import Section
from zoo.spec.sections.bounds import MAX_DEPTH, MAX_PARAMS, MAX_WIDTH, Real

__all__ = [
    "UNIT_SYMMETRIES",
    "LeNetModel",
    "MLPModel",
    "ModelSpec",
    "mlp_num_params",
    "width_from_budget",
]

#: The weight-space symmetries of a hidden unit of each MLP activation that leave the
#: network's function unchanged: ``rescale`` (positively homogeneous: relu, leaky relu,
#: linear) and ``sign`` (odd: tanh, linear); what a sampler's ``symmetry_moves: auto`` takes.
UNIT_SYMMETRIES: dict[str, tuple[str, ...]] = {
    "relu": ("rescale",),
    "leaky_relu": ("rescale",),
    "tanh": ("sign",),
    "linear": ("rescale", "sign"),
}


def mlp_num_params(in_dim: int, out_dim: int, depth: int, width: int) -> int:
    """Number of weights and biases of an MLP with ``depth`` hidden layers of ``width`` units."""
    if depth == 0:
        return (in_dim + 1) * out_dim
    return (in_dim + 1) * width + (depth - 1) * (width + 1) * width + (width + 1) * out_dim


def width_from_budget(in_dim: int, out_dim: int, depth: int, budget: int) -> int:
    """Largest width whose MLP has at most ``budget`` weights and biases.

    This is the rule of Farquhar, Smith & Gal (2020), Appendix B: every depth gets the
    largest width that keeps the parameter count under the budget, so that deeper models
    do not simply have more parameters.

    Raises
    ------
    ValueError
        If even width 1 exceeds the budget.
    """
    if depth == 0:
        return 0
    if mlp_num_params(in_dim, out_dim, depth, 1) > budget:
        raise ValueError(
            f"param_budget {budget} is too small for depth {depth}: width 1 already needs "
            f"{mlp_num_params(in_dim, out_dim, depth, 1)} parameters; raise the budget"
        )
    lo, hi = 1, 2
    while mlp_num_params(in_dim, out_dim, depth, hi) <= budget:
        lo, hi = hi, hi * 2
    while hi - lo > 1:  # invariant: params(lo) <= budget < params(hi)
        mid = (lo + hi) // 2
        if mlp_num_params(in_dim, out_dim, depth, mid) <= budget:
            lo = mid
        else:
            hi = mid
    return lo


# --------------------------------------------------------------------------- networks


class MLPModel(Section):
    """Fully connected network; ``depth`` hidden layers (0 gives linear/logistic regression)."""

    samplable: ClassVar[bool] = True

    kind: Literal["mlp"] = Field(description="Model kind.")
    depth: int = Field(
        ge=0,
        le=MAX_DEPTH,
        description=f"Number of hidden layers (0: linear model; at most {MAX_DEPTH}).",
    )
    width: int | None = Field(
        None,
        gt=0,
        le=MAX_WIDTH,
        description=f"Units per hidden layer (at most {MAX_WIDTH}). "
        "Give width or param_budget, not both.",
    )
    param_budget: int | None = Field(
        None,
        gt=0,
        le=MAX_PARAMS,
        description="Use the largest width whose weights+biases fit in this budget (at most "
        f"{MAX_PARAMS}).",
    )
    activation: Literal["relu", "leaky_relu", "tanh", "linear"] = Field(
        "relu", description="Hidden-layer nonlinearity."
    )
    negative_slope: Real = Field(0.01, ge=0, description="Slope of leaky_relu for negative inputs.")

    @field_validator("width")
    @classmethod
    def _fits(cls, v: int | None, info: ValidationInfo) -> int | None:
        depth = info.data.get("depth")
        if v is not None and depth:
            n = mlp_num_params(1, 1, depth, v)
            if n > MAX_PARAMS:
                raise ValueError(
                    f"depth {depth} of width {v} has {n:,} or more weights and biases; at "
                    f"most {MAX_PARAMS:,} fit one machine: lower model.depth or model.width"
                )
        return v

    @model_validator(mode="after")
    def _width_xor_budget(self) -> MLPModel:
        if self.depth > 0 and (self.width is None) == (self.param_budget is None):
            raise ValueError("give exactly one of model.width and model.param_budget")
        return self

    def hidden_widths(self, in_dim: int, out_dim: int) -> list[int]:
        """Hidden widths for ``in_dim`` inputs and ``out_dim`` outputs: ``width`` repeated, or
        the largest in ``param_budget`` (:func:`width_from_budget`).

        Raises
        ------
        ValueError
            Naming the field, if even width 1 exceeds the budget, or the network exceeds
            the bounds of :mod:`zoo.spec.sections.bounds`.
        """
        if self.depth == 0:
            widths: list[int] = []
        elif self.width is not None:
            widths = [self.width] * self.depth
        else:
            try:
                w = width_from_budget(in_dim, out_dim, self.depth, self.param_budget)
            except ValueError as e:
                raise ValueError(f"model.param_budget: {e}") from None
            if w > MAX_WIDTH:
                raise ValueError(
                    f"model.param_budget: {self.param_budget} gives width {w} at "
                    f"depth {self.depth}; at most {MAX_WIDTH} units per layer "
                    "fit one machine: lower the budget"
                )
            widths = [w] * self.depth
        n = mlp_num_params(in_dim, out_dim, self.depth, widths[0] if widths else 0)
        if n > MAX_PARAMS:
            raise ValueError(
                f"model.width: {n:,} weights and biases for {in_dim} inputs and "
                f"{out_dim} outputs; at most {MAX_PARAMS:,} fit one machine"
            )
        return widths

    def network_warnings(
        self, in_dim: int, n_classes: int, out_dim: int | None = None
    ) -> list[str]:
        """Why the network for this data is degenerate (empty when it is not).

        A hidden layer narrower than 3 units, or than the number of classes (the logits
        then live in a subspace of lower dimension than the classes), is a bottleneck that
        no amount of training removes; the message also names the input dimension when the
        layer is narrower than it. ``n_classes`` is 0 for regression; ``out_dim`` is the
        likelihood's number of outputs where it is not the classes (one logit for
        ``bernoulli``: :attr:`BernoulliLikelihood.out_dim`), as the built network has.

        Raises
        ------
        ValueError
            If the network cannot be built at all (:meth:`hidden_widths`).
        """
        widths = self.hidden_widths(in_dim, out_dim or (n_classes if n_classes > 0 else 1))
        if not widths:
            return []
        if self.width is not None:
            what, fix = f"hidden width {widths[0]} (model.width)", "raise model.width"
        else:
            what = (
                f"hidden width {widths[0]} (from model.param_budget {self.param_budget} "
                f"at depth {self.depth})"
            )
            fix = "raise model.param_budget or lower model.depth"
        return _narrow(widths[0], what, in_dim, n_classes, fix)

    @property
    def linear(self) -> bool:
        """No nonlinearity between the layers: the network is a product of matrices."""
        return self.activation == "linear"

    @property
    def symmetries(self) -> tuple[str, ...]:
        """Its hidden units' symmetries (:data:`UNIT_SYMMETRIES`; none at depth 0)."""
        return UNIT_SYMMETRIES[self.activation] if self.depth > 0 else ()


class LeNetModel(Section):
    """LeNet-style CNN: 3x3 convolutions (ReLU, 2x2 max-pool), a dense layer, the output.

    Swiatkowski et al. (2020, D.1): convolutions of 32 and 64 filters, dense 512. Inputs are
    viewed as square images with ``channels`` channels.
    """

    samplable: ClassVar[bool] = True  # through torch.func (zoo.inference.mcmc.functional)
    linear: ClassVar[bool] = False
    #: No symmetry move covers convolutions (symmetry_moves: off).
    symmetries: ClassVar[tuple[str, ...]] = ()

    kind: Literal["lenet"] = Field(description="Model kind.")
    channels: int = Field(
        1, gt=0, le=MAX_WIDTH, description="Input channels of the (square) images."
    )
    conv: list[Annotated[int, Field(gt=0, le=MAX_WIDTH)]] = Field(
        default_factory=lambda: [32, 64],
        min_length=1,
        max_length=16,
        description="Filters per convolution (1 to 16 convolutions).",
    )
    dense: int = Field(512, gt=0, le=MAX_WIDTH, description="Units of the dense hidden layer.")
    kernel_size: int = Field(
        3, gt=0, le=1_000, description="Side of the square convolution kernels."
    )
    padding: int = Field(0, ge=0, le=1_000, description="Zero padding of each convolution.")
    pool: bool = Field(True, description="2x2 max-pool after each convolution.")

    def image_side(self, in_dim: int) -> int:
        """Side of the square images of ``in_dim = channels * side**2`` inputs.

        Raises
        ------
        ValueError
            Naming ``model.channels``, if the inputs are not such images.
        """
        side = math.isqrt(in_dim // self.channels) if in_dim % self.channels == 0 else 0
        if side * side * self.channels != in_dim:
            raise ValueError(
                f"model.channels: {in_dim} inputs are not square images with {self.channels} "
                "channel(s); lenet needs image data (e.g. data.kind idx or digits)"
            )
        return side

    def num_params(self, in_dim: int, out_dim: int) -> int:
        """Kernel entries, weights and biases for ``in_dim`` inputs and ``out_dim`` outputs.

        Raises
        ------
        ValueError
            If the inputs are not square images, or shrink to nothing in the convolutions.
        """
        side0 = side = self.image_side(in_dim)
        c_in, k, n = self.channels, self.kernel_size, 0
        for i, c_out in enumerate(self.conv):
            n += c_out * c_in * k * k + c_out
            side = side + 2 * self.padding - k + 1
            side = side // 2 if self.pool else side
            if side < 1:
                raise ValueError(
                    f"model: {side0}x{side0} images shrink to nothing after {i + 1} "
                    "convolution(s); use padding 1, a smaller kernel_size or pool: "
                    "false"
                )
            c_in = c_out
        flat = c_in * side * side
        return n + (flat + 1) * self.dense + (self.dense + 1) * out_dim

    def network_warnings(
        self, in_dim: int, n_classes: int, out_dim: int | None = None
    ) -> list[str]:
        """Why the network for this data is degenerate: a dense layer narrower than 3 units
        or than the classes (see :meth:`MLPModel.network_warnings`).

        Raises
        ------
        ValueError
            If the network cannot be built, or has more than the bounded parameters.
        """
        n = self.num_params(in_dim, out_dim or (n_classes if n_classes > 0 else 1))
        if n > MAX_PARAMS:
            raise ValueError(
                f"model: {n:,} kernel entries, weights and biases for {in_dim} "
                f"inputs; at most {MAX_PARAMS:,} fit one machine: lower model.dense, "
                "model.conv or model.padding"
            )
        what = f"dense layer of {self.dense} units (model.dense)"
        return _narrow(self.dense, what, 0, n_classes, "raise model.dense")


def _narrow(width: int, what: str, in_dim: int, n_classes: int, fix: str) -> list[str]:
    """The warning for a layer of ``width`` units (``what`` names it), or none.

    Narrower than 3 units or than the classes is degenerate; narrower than the inputs alone
    is not (784-400-400-10 is the usual MNIST network) and is only named alongside.
    """
    below = []
    if width < 3:
        below.append("3")
    if n_classes > 0 and width < n_classes:
        below.append(f"the {n_classes} classes")
    if not below:
        return []
    if width < in_dim:
        below.append(f"the {in_dim} inputs")
    listed = ", ".join(below[:-1]) + (" and " if len(below) > 1 else "") + below[-1]
    return [f"{what} is below {listed}: the network is degenerate; {fix}"]


ModelSpec = Annotated[MLPModel | LeNetModel, Field(discriminator="kind")]
