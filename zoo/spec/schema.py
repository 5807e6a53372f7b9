"""The spec language: pydantic models of a bnn-zoo experiment and the sweep over it.

A spec is a YAML file with the sections ``name``, ``description``, ``seed``, ``data``,
``model``, ``prior``, ``likelihood``, ``inference`` (a list of named methods), ``sweep``
(axes over spec fields), ``metrics`` and ``report``. :func:`load_spec` validates it and
returns a frozen :class:`Spec`; :meth:`Spec.cells` expands the sweep into
:class:`Cell` objects (the product of the sweep axes and the inference methods).

This module never imports torch: validating a spec is instant.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, field_validator, model_validator

from zoo.spec.sections.data import (
    CsvData,
    DataSpec,
    DigitsData,
    IdxData,
    TeacherData,
    TwoMoonsData,
    UciData,
)
from zoo.spec.sections.inference import (
    FixedVarianceGuide,
    FullRankGuide,
    HMCMethod,
    InferenceSpec,
    KTiedGuide,
    MAPMethod,
    MatrixNormalGuide,
    MeanFieldGuide,
    MLEMethod,
    NUTSMethod,
    Strict,
    SVIMethod,
)
from zoo.spec.sections.models import (
    LeNetModel,
    MLPModel,
    ModelSpec,
    mlp_num_params,
    width_from_budget,
)
from zoo.spec.sections.pruning import PruningSpec

__all__ = [
    "AXIS_ALIASES",
    "Cell",
    "CsvData",
    "DigitsData",
    "GaussianLikelihood",
    "CategoricalLikelihood",
    "FixedVarianceGuide",
    "FullRankGuide",
    "HMCMethod",
    "HePrior",
    "IdxData",
    "KTiedGuide",
    "MAPMethod",
    "MLEMethod",
    "LeNetModel",
    "MLPModel",
    "MatrixNormalGuide",
    "MeanFieldGuide",
    "NUTSMethod",
    "NormalPrior",
    "ProductMatrixSimulation",
    "SVIMethod",
    "Spec",
    "TeacherData",
    "TwoMoonsData",
    "UciData",
    "fields_at",
    "mlp_num_params",
    "models_at",
    "path_in_schema",
    "set_path",
    "suggest_path",
    "union_members",
    "width_from_budget",
]


_Strict = Strict  # base of every spec section: unknown keys are errors, immutable

#: Sweep axes that stand for a deeper field (the column keeps the short name):
#: ``split`` is the UCI train/test split index of the data (``data.split``).
AXIS_ALIASES = {"split": "data.split"}


# --------------------------------------------------------------------------- priors


class NormalBias(_Strict):
    """Bias prior N(0, scale^2)."""

    kind: Literal["normal"] = Field(description="Prior kind.")
    scale: float = Field(1.0, gt=0, description="Prior standard deviation.")


class HeBias(_Strict):
    """Bias prior N(0, 2 / fan_in)."""

    kind: Literal["he"] = Field(description="Prior kind.")


BiasPriorSpec = Annotated[NormalBias | HeBias, Field(discriminator="kind")]


class NormalPrior(NormalBias):
    """Independent N(0, scale^2) on every weight (and bias unless ``bias`` is given)."""

    bias: BiasPriorSpec | None = Field(
        None, description="Separate prior for the biases; null uses the weight prior."
    )


class HePrior(HeBias):
    """He-scaled prior N(0, 2 / fan_in) on every weight (and bias unless ``bias`` is given)."""

    bias: BiasPriorSpec | None = Field(
        None, description="Separate prior for the biases; null uses the weight prior."
    )


PriorSpec = Annotated[NormalPrior | HePrior, Field(discriminator="kind")]

# --------------------------------------------------------------------------- likelihoods


class CategoricalLikelihood(_Strict):
    """Categorical likelihood on softmax outputs (classification)."""

    kind: Literal["categorical"] = Field(description="Likelihood kind.")


class GaussianLikelihood(_Strict):
    """Gaussian likelihood (regression) with fixed or learned noise standard deviation."""

    kind: Literal["gaussian"] = Field(description="Likelihood kind.")
    noise: float | Literal["learned"] = Field(
        1.0, description="Noise standard deviation, or 'learned' to infer it."
    )
    noise_prior_scale: float = Field(
        1.0, gt=0, description="Scale of the HalfNormal prior on a learned noise."
    )

    @field_validator("noise")
    @classmethod
    def _positive(cls, v: float | str) -> float | str:
        if not isinstance(v, str) and v <= 0:
            raise ValueError("noise must be > 0 (or 'learned')")
        return v


LikelihoodSpec = Annotated[CategoricalLikelihood | GaussianLikelihood, Field(discriminator="kind")]

# --------------------------------------------------------------------------- metrics, report


class MetricsSpec(_Strict):
    """Which test metrics to compute."""

    names: list[Literal["accuracy", "nll", "brier", "ece", "rmse"]] | None = Field(
        None, description="Metrics to report; null picks those of the likelihood."
    )
    ece_bins: int = Field(15, gt=0, description="Equal-width confidence bins of the ECE.")
    product_matrix_draws: int | None = Field(
        None,
        ge=2,
        description="For linear (activation: linear) networks fitted with svi: posterior "
        "draws of the product matrix W_L ... W_1 whose covariance is stored and shown as a "
        "heat map (Farquhar et al. 2020); null skips it.",
    )
    pruning: PruningSpec | None = Field(
        None,
        description="Per-unit pruning statistics, pruned fractions and optimization "
        "trajectories (Trippe & Turner 2018); null skips them.",
    )


class ReportSpec(_Strict):
    """Shape of the report."""

    x: str = Field("model.depth", description="Column on the x axis of the figures.")
    hue: str = Field("method", description="Column that gets one line per value.")
    figures: list[str] = Field(
        default_factory=lambda: ["accuracy", "nll", "neg_elbo"],
        description="Metrics plotted against x.",
    )


# --------------------------------------------------------------------------- simulations


class ProductMatrixSimulation(_Strict):
    """Covariance of the product of L random mean-field layers (Farquhar et al. 2020, Fig. 1).

    Each layer is K x K with means U(mean_low, mean_high) and standard deviation ``std``;
    the covariance of the product matrix W_L ... W_1 is estimated from ``n_draws`` draws
    (``method: mc``, as in the paper) or computed exactly (``method: exact``).
    """

    kind: Literal["product_matrix"] = Field(description="Simulation kind.")
    width: int = Field(4, ge=1, le=32, description="K: every layer is K x K.")
    depths: list[int] = Field(
        default_factory=lambda: [1, 2, 3, 5, 20], min_length=1, description="Numbers of layers L."
    )
    n_draws: int = Field(10_000, ge=2, description="Monte Carlo draws of the product.")
    mean_low: float = Field(-0.1, description="Layer means are U(mean_low, mean_high).")
    mean_high: float = Field(0.1, description="Layer means are U(mean_low, mean_high).")
    std: float = Field(0.5, gt=0, description="Standard deviation of every weight.")
    method: Literal["mc", "exact"] = Field(
        "mc", description="Monte Carlo covariance (the paper's figure) or the exact one."
    )

    @field_validator("depths")
    @classmethod
    def _positive(cls, v: list[int]) -> list[int]:
        if any(d < 1 for d in v):
            raise ValueError(f"depths must be >= 1, got {v}")
        return v

    @model_validator(mode="after")
    def _range(self) -> ProductMatrixSimulation:
        if self.mean_low > self.mean_high:
            raise ValueError("mean_low must be <= mean_high")
        return self


SimulationSpec = Annotated[ProductMatrixSimulation, Field(discriminator="kind")]

# --------------------------------------------------------------------------- the spec


class Spec(_Strict):
    """A bnn-zoo experiment."""

    name: str = Field(
        min_length=1, pattern=r"^[A-Za-z0-9_\-.]+$", description="Spec name (run directory)."
    )
    description: str = Field("", description="What the experiment shows.")
    seed: int = Field(0, description="Base seed; a `seed` sweep axis overrides it per cell.")
    data: DataSpec | None = Field(None, description="Data set (required unless simulation).")
    model: ModelSpec | None = Field(
        None, description="Network family (required unless simulation)."
    )
    prior: PriorSpec = Field(
        default_factory=lambda: NormalPrior(kind="normal"), description="Weight prior."
    )
    likelihood: LikelihoodSpec = Field(
        default_factory=lambda: CategoricalLikelihood(kind="categorical"),
        description="Likelihood.",
    )
    inference: list[InferenceSpec] = Field(
        default_factory=list, description="Inference methods; each runs in every sweep cell."
    )
    sweep: dict[str, list[Any]] = Field(
        default_factory=dict,
        description="Axes over spec fields by dotted path (e.g. model.depth: [1, 2]); "
        "cells are the product of the axes and the inference methods.",
    )
    metrics: MetricsSpec = Field(default_factory=MetricsSpec, description="Test metrics.")
    report: ReportSpec = Field(default_factory=ReportSpec, description="Report layout.")
    simulation: SimulationSpec | None = Field(
        None, description="A simulation instead of a BNN sweep (no data, model or inference)."
    )

    @model_validator(mode="after")
    def _task_matches(self) -> Spec:
        if self.simulation is not None:
            extra = [k for k in ("data", "model", "inference", "sweep") if getattr(self, k)]
            if extra:
                raise ValueError(
                    f"a simulation spec has no {', '.join(extra)}: remove "
                    f"{'it' if len(extra) == 1 else 'them'}, or remove simulation"
                )
            return self
        missing = [k for k in ("data", "model", "inference") if not getattr(self, k)]
        if missing:
            raise ValueError(
                f"{', '.join(missing)}: required (a spec needs data, model and at least one "
                "inference method; see specs/two_moons_depth.yaml)"
            )
        classification = self.data.kind in ("two_moons", "digits", "idx") or (
            self.data.kind == "csv" and self.data.task == "classification"
        )
        want = "categorical" if classification else "gaussian"
        if self.likelihood.kind != want:
            task = "classification" if classification else "regression"
            raise ValueError(
                f"likelihood.kind {self.likelihood.kind!r} does not fit {task} data "
                f"({self.data.kind}); use likelihood: {{kind: {want}}}"
            )
        allowed = {"accuracy", "nll", "brier", "ece"} if classification else {"rmse", "nll"}
        bad = [m for m in self.metrics.names or [] if m not in allowed]
        if bad:
            raise ValueError(
                f"metrics.names {bad} do not apply to {want} likelihoods; "
                f"choose from {sorted(allowed)}"
            )
        return self

    @field_validator("inference")
    @classmethod
    def _unique_names(cls, v: list[Any]) -> list[Any]:
        names = [m.name for m in v]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"inference method names must be unique; repeated: {dup}")
        svi = [m.name for m in v if m.kind == "svi"]
        for i, m in enumerate(v):
            ref = getattr(m, "init_from", "prior")
            if ref != "prior" and ref not in svi:
                hint = f"one of {svi} or 'prior'" if svi else "'prior' (no svi method here)"
                raise ValueError(
                    f"inference[{i}].init_from {ref!r} is not a variational (svi) method of "
                    f"this spec; use {hint}"
                )
        return v

    @model_validator(mode="after")
    def _method_axes(self) -> Spec:
        names = [m.name for m in self.inference]
        for key in self.sweep:
            if key.startswith("inference.") and key.split(".")[1] not in names:
                raise ValueError(
                    f"sweep.{key}: {key.split('.')[1]!r} is not an inference method of this "
                    f"spec; methods: {names}"
                )
        if (
            "split" in self.sweep
            and self.data is not None
            and "split" not in type(self.data).model_fields
        ):
            raise ValueError(
                f"sweep.split: data kind {self.data.kind!r} has no train/test split index; "
                "use data kind uci or csv, or remove the split axis"
            )
        for i, m in enumerate(self.inference):
            g = getattr(m, "guide", None)
            if (
                g is not None
                and g.init_loc == "teacher"
                and getattr(self.data, "kind", "") != ("teacher")
            ):
                raise ValueError(
                    f"inference[{i}].guide.init_loc: 'teacher' needs data.kind teacher (the "
                    "data's generating weights); use he, prior or zero"
                )
        return self

    def method(self, name: str) -> Any:
        """The inference method called ``name``."""
        return next(m for m in self.inference if m.name == name)

    @field_validator("sweep")
    @classmethod
    def _axes(cls, v: dict[str, list[Any]]) -> dict[str, list[Any]]:
        for key, values in v.items():
            if key in ("name", "sweep", "inference", "simulation") or key.startswith(
                ("sweep.", "simulation")
            ):
                raise ValueError(f"cannot sweep over {key!r}")
            if key.startswith("inference."):  # a method's own field: inference.<name>.<path>
                if len(key.split(".")) < 3:
                    raise ValueError(f"sweep axis {key!r}: use inference.<method name>.<field>")
            elif not path_in_schema(key):
                raise ValueError(f"sweep axis {key!r} is not a spec field{suggest_path(key)}")
            if len(values) == 0:
                raise ValueError(f"sweep axis {key!r} is empty; give at least one value")
        return v

    def cells(self) -> list[Cell]:
        """Expand the sweep: the product of the axes (in spec order) and the methods.

        An axis ``inference.<name>.<field>`` (e.g. ``inference.ktied.guide.rank: [1, 2, 3]``)
        belongs to that method only: the other methods' cells do not repeat over it.

        Returns
        -------
        list of Cell
            One cell per combination; ``cell.spec`` is this spec with the axis values
            filled in, ``cell.method`` the inference method of the cell.
        """
        keys = list(self.sweep)
        out: list[Cell] = []
        base = self.model_dump(mode="json")
        for values in itertools.product(*(self.sweep[k] for k in keys)):
            d = json.loads(json.dumps(base))
            d["sweep"] = {}
            for k, val in zip(keys, values, strict=True):
                set_path(d, AXIS_ALIASES.get(k, k).split("."), val)
            resolved = Spec.model_validate(d)
            for method in resolved.inference:
                axes = {}
                for k, val in zip(keys, values, strict=True):
                    if not k.startswith("inference."):
                        axes[k] = val
                    elif k.split(".")[1] == method.name:
                        axes[k] = val
                    elif val != self.sweep[k][0]:
                        break  # another method's axis: that method's cells cover its values
                else:
                    axes["method"] = method.name
                    out.append(Cell(resolved, method, axes))
        return out


# Method fields added after runs existed, with the default that reproduces the older runs:
# left out of the cell id while at that default, so finished cells keep their ids.
_LATE_FIELDS: dict[str, object] = {"vectorize_chains": False, "scale_lr": None,
                                   "kl_target_draws": None, "max_draws": None}  # fmt: skip


class Cell:
    """One sweep cell: a resolved spec (no sweep) and one inference method.

    Attributes
    ----------
    spec : Spec
        The spec with this cell's axis values filled in.
    method : SVIMethod
        The inference method run in this cell.
    axes : dict
        Axis name -> value, plus ``method``.
    cell_id : str
        Stable id: readable axis values and a hash of the resolved configuration, so a
        changed configuration never matches a finished cell.
    """

    __slots__ = ("spec", "method", "axes", "cell_id")

    def __init__(self, spec: Spec, method: SVIMethod, axes: dict[str, Any]) -> None:
        self.spec = spec
        self.method = method
        self.axes = axes
        self.cell_id = _cell_id(self.config(), axes)

    def config(self) -> dict[str, Any]:
        """The resolved configuration of this cell as JSON-able data."""
        # only what changes the numbers: not the name, description, sweep or report layout
        exclude = {"name", "description", "inference", "sweep", "report"}
        d = self.spec.model_dump(mode="json", exclude=exclude)
        d["method"] = self.method.model_dump(mode="json")
        for key, default in _LATE_FIELDS.items():  # added later: at their default the
            if key in d["method"] and d["method"][key] == default:  # older ids still hold
                del d["method"][key]
        ref = getattr(self.method, "init_from", "prior")
        if ref != "prior":  # the cell refits that method: its settings change the numbers
            d["init_method"] = self.spec.method(ref).model_dump(mode="json")
        return d

    def __repr__(self) -> str:
        return f"Cell({self.cell_id})"


def _cell_id(config: Mapping[str, Any], axes: Mapping[str, Any]) -> str:
    digest = hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:10]
    parts = [str(axes["method"])]
    for k, v in axes.items():
        if k != "method":
            parts.append(f"{k.split('.')[-1]}={v}")
    slug = "_".join(parts)
    slug = "".join(c if c.isalnum() or c in "=-_." else "-" for c in slug)
    return f"{slug}_{digest}"


# --------------------------------------------------------------------------- schema walking


def _list_index(items: list[Any], part: str) -> int | None:
    """Index of ``part`` in a list: a number, or the ``name`` of an element (a method)."""
    if part.lstrip("-").isdigit() and -len(items) <= int(part) < len(items):
        return int(part)
    names = [x.get("name") if isinstance(x, dict) else None for x in items]
    return names.index(part) if part in names else None


def set_path(d: dict[str, Any], parts: list[str], value: Any) -> None:
    """Set ``value`` at a dotted path, creating mappings on the way.

    List elements are addressed by index or, for lists of named entries such as
    ``inference``, by name: ``inference.0.steps`` or ``inference.mfvi.steps``.
    """
    node: Any = d
    for i, p in enumerate(parts):
        last = i == len(parts) - 1
        if isinstance(node, list):
            k = _list_index(node, p)
            if k is None:
                raise KeyError(f"{'.'.join(parts[: i + 1])}: no list element {p!r} (give an "
                               f"index 0..{len(node) - 1} or a name)")  # fmt: skip
            if last:
                node[k] = value
            else:
                node = node[k]
            continue
        if last:
            node[p] = value
        else:
            if not isinstance(node.get(p), dict | list):
                node[p] = {}
            node = node[p]


def union_members(annotation: Any) -> list[type[BaseModel]]:
    """The BaseModel classes inside an annotation (through Annotated, Optional, list, unions)."""
    from typing import get_args

    found: list[type[BaseModel]] = []
    stack = [annotation]
    while stack:
        a = stack.pop()
        if isinstance(a, type) and issubclass(a, BaseModel):
            found.append(a)
        else:
            stack.extend(get_args(a))
    return found


def models_at(path: list[Any]) -> tuple[list[type[BaseModel]], str]:
    """The section classes that may stand at a (tag-free) path, and its field description.

    List indices in ``path`` are skipped; a union field yields all its member classes.
    """
    models: list[type[BaseModel]] = [Spec]
    desc = ""
    for p in path:
        if isinstance(p, int):
            continue
        nxt: list[type[BaseModel]] = []
        for m in models:
            if p in m.model_fields:
                desc = m.model_fields[p].description or desc
                nxt.extend(union_members(m.model_fields[p].annotation))
        models = nxt
    return models, desc


def fields_at(path: list[Any]) -> list[str]:
    """All field names that may appear at a (tag-free) path of the spec, for suggestions."""
    names: list[str] = []
    for m in models_at(path)[0]:
        names.extend(n for n in m.model_fields if n not in names)
    return names


def path_in_schema(key: str) -> bool:
    if key in AXIS_ALIASES:
        return True
    parts = key.split(".")
    if not parts[-1]:
        return False
    return parts[-1] in fields_at(parts[:-1])


def suggest_path(key: str) -> str:
    import difflib

    parts = key.split(".")
    options = fields_at(parts[:-1])
    close = difflib.get_close_matches(parts[-1], options, n=1)
    if close:
        return f"; did you mean {'.'.join([*parts[:-1], close[0]])!r}?"
    return f"; fields there: {', '.join(options)}" if options else ""
