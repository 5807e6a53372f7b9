"""The spec: the top-level section of a bnn-zoo experiment and its cross-field checks.

A spec has the sections ``name``, ``description``, ``seed``, ``data``, ``model``,
``prior``, ``likelihood``, ``inference`` (a list of named methods), ``studies`` (what the
cells record besides their metrics), ``sweep`` (axes over spec fields), ``metrics``,
``tune`` (a grid search on a validation split), ``report``, ``runtime`` and, instead of data, model and inference, ``simulation``.

The checks across sections ask the sections for facts (a data set's ``task``, a
likelihood's ``task`` and ``metrics``, a network's ``samplable``, a method's ``family``, a
study's ``families``) instead of listing kinds. No torch import here.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import Field, ValidationInfo, field_validator, model_validator

from zoo.spec.base import Section, kind_of, union_members
from zoo.spec.sections.bounds import MAX_NAME, MAX_SEED
from zoo.spec.sections.data import (
    DataSpec,
)
from zoo.spec.sections.inference import (
    InferenceSpec,
)
from zoo.spec.sections.likelihoods import CategoricalLikelihood, LikelihoodSpec
from zoo.spec.sections.models import ModelSpec
from zoo.spec.sections.priors import NormalPrior, PriorSpec
from zoo.spec.sections.report import MetricsSpec, ReportSpec
from zoo.spec.sections.runtime import RuntimeSection
from zoo.spec.sections.simulation import SimulationSpec
from zoo.spec.sections.studies import StudySpec
from zoo.spec.sections.tune import TUNING_CELL, TuneSpec
from zoo.spec.sweep import Cell, axis_problem, cells, sweep_problems
from zoo.spec.tuning import tune_problems

__all__ = ["Spec"]

#: A spec name: a single path component that is not "." or "..", without control characters.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]*")


class Spec(Section):
    """A bnn-zoo experiment."""

    name: str = Field(
        description="Spec name, the run directory runs/<name>: letters, digits, '_', '-' and "
        f"'.', starting with a letter or digit, at most {MAX_NAME} characters.",
        json_schema_extra={"pattern": f"^{_NAME.pattern}$", "maxLength": MAX_NAME},
    )
    description: str = Field("", description="What the experiment shows.")
    seed: int = Field(
        0,
        ge=0,
        le=MAX_SEED,
        description=f"Base seed (0 to {MAX_SEED}); a `seed` sweep axis overrides it per cell.",
    )
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
    studies: list[StudySpec] = Field(
        default_factory=list,
        description="What the cells record besides their test metrics, one study per entry; "
        "each applies to the methods it names or to every method of the families it fits. "
        "Left out or empty: no study.",
    )
    sweep: dict[str, list[Any]] = Field(
        default_factory=dict,
        description="Axes over spec fields by dotted path (e.g. model.depth: [1, 2]); "
        "cells are the product of the axes and the inference methods.",
    )
    tune: TuneSpec | None = Field(
        None,
        description="Hyper-parameters chosen per method from a grid on a validation part "
        "of the training data (tuning cells run first; the main cells get the best values). "
        "null: no tuning.",
    )
    metrics: MetricsSpec = Field(default_factory=MetricsSpec, description="Test metrics.")
    report: ReportSpec = Field(default_factory=ReportSpec, description="Report layout.")
    runtime: RuntimeSection = Field(
        default_factory=RuntimeSection, description="Device, precision and threads."
    )
    simulation: SimulationSpec | None = Field(
        None, description="A simulation instead of a BNN sweep (no data, model or inference)."
    )

    @field_validator("name")
    @classmethod
    def _safe_name(cls, v: str) -> str:
        if len(v) > MAX_NAME or not _NAME.fullmatch(v):
            raise ValueError(
                f"{v[: MAX_NAME + 20]!r}: a spec name names its run directory runs/<name>: use "
                f"letters, digits, '_', '-' and '.', starting with a letter or digit, at most "
                f"{MAX_NAME} characters (e.g. two_moons_depth)"
            )
        return v

    @field_validator("inference")
    @classmethod
    def _unique_names(cls, v: list[Any]) -> list[Any]:
        names = [m.name for m in v]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"inference method names must be unique; repeated: {dup}")
        return v

    @field_validator("sweep")
    @classmethod
    def _axes(cls, v: dict[str, list[Any]]) -> dict[str, list[Any]]:
        for key, values in v.items():
            problem = axis_problem(cls, key, values)
            if problem:
                raise ValueError(f"sweep.{key}: {problem}")
        return v

    @model_validator(mode="after")
    def _cross_checks(self, info: ValidationInfo) -> Spec:
        if self.simulation is not None:
            extra = [
                k
                for k in ("data", "model", "inference", "sweep", "studies", "tune")
                if getattr(self, k)
            ]
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
        problems = [
            *self._validation_problems(info.context or {}),
            *self._task_problems(),
            *self._method_problems(),
            *self._study_problems(),
            *sweep_problems(self),
        ]
        if not problems:  # tuning cells are cells of the sweep: only once that is sound
            problems += tune_problems(self)
        if problems:  # one line each, "PATH: message"; the loader reports them at PATH
            raise ValueError("\n".join(f"{path}: {msg}" for path, msg in problems))
        return self

    def _validation_problems(self, context: dict[str, Any]) -> list[tuple[str, str]]:
        """``data.validation_fraction`` outside a tuning cell: its cells would score on held-out
        training rows and report them as test metrics, so only a tuning cell's spec (validated
        with :data:`~zoo.spec.sections.tune.TUNING_CELL`) may set it."""
        tuning = all(context.get(k) == v for k, v in TUNING_CELL.items())
        if self.data.validation_fraction is None or tuning:
            return []
        return [
            (
                "data.validation_fraction",
                "is set only in the tuning cells of a tune section: a cell that holds "
                "out part of its training rows scores on them, and its results would call "
                "them test metrics; remove it (to choose hyper-parameters on a validation "
                "part, use tune: {grid: ..., validation_fraction: ...})",
            )
        ]

    def _task_problems(self) -> list[tuple[str, str]]:
        task, lik = self.data.task, self.likelihood
        if lik.task != task:
            fits = [
                kind_of(m)
                for m in union_members(LikelihoodSpec)
                if getattr(m, "task", None) == task and m.n_classes is None
            ]
            want = f"; use likelihood: {{kind: {fits[0]}}}" if fits else ""
            return [
                (
                    "likelihood.kind",
                    f"{lik.kind!r} does not fit {task} data ({self.data.kind}){want}",
                )
            ]
        if lik.n_classes is not None and self.data.n_classes not in (None, lik.n_classes):
            fits = [
                kind_of(m)
                for m in union_members(LikelihoodSpec)
                if m.task == task and m.n_classes is None
            ]
            want = f"; use likelihood: {{kind: {fits[0]}}}" if fits else ""
            return [
                (
                    "likelihood.kind",
                    f"{lik.kind!r} needs {lik.n_classes} classes; "
                    f"{self.data.kind} data has {self.data.n_classes}{want}",
                )
            ]
        if getattr(lik, "noise", None) == "data" and not self.data.has_teacher:
            return [
                (
                    "likelihood.noise",
                    f"'data' takes the data's own noise, which {self.data.kind} data does not "
                    "know (teacher data does); give a number or 'learned'",
                )
            ]
        bad = [m for m in self.metrics.names or [] if m not in lik.metrics]
        if bad:
            return [
                (
                    "metrics.names",
                    f"{bad} do not apply to {lik.kind} likelihoods; "
                    f"choose from {sorted(lik.metrics)}",
                )
            ]
        return []

    def _method_problems(self) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        names = [m.name for m in self.inference]
        starters = [m.name for m in self.inference if m.starts_samplers]
        samplable = [kind_of(m) for m in union_members(ModelSpec) if m.samplable]
        others = [kind_of(m) for m in union_members(InferenceSpec) if not m.needs_samplable_model]
        for i, m in enumerate(self.inference):
            ref = getattr(m, "init_from", "prior")
            if ref != "prior" and ref not in starters:
                hint = (
                    f"one of {starters} or 'prior'" if starters else "'prior' (no svi method here)"
                )
                out.append(
                    (
                        f"inference[{i}].init_from",
                        f"{ref!r} is not a variational (svi) method of this spec; use {hint}",
                    )
                )
            if m.needs_samplable_model and not self.model.samplable:
                out.append(
                    (
                        f"inference[{i}].kind",
                        f"{m.kind!r} cannot sample a "
                        f"{self.model.kind} network (the samplers' flat potential covers "
                        f"model kinds {samplable}); use a method of kind "
                        f"{' or '.join(sorted(others))}, or another model",
                    )
                )
            out += self._symmetry_problems(i, m)
            g = getattr(m, "guide", None)
            if g is not None and g.init_loc == "teacher" and not self.data.has_teacher:
                out.append(
                    (
                        f"inference[{i}].guide.init_loc",
                        "'teacher' needs data that "
                        "comes with its generating weights (data.kind teacher); use he, "
                        "prior or zero",
                    )
                )
        for key in self.sweep:
            if key.startswith("inference.") and key.split(".")[1] not in names:
                out.append(
                    (
                        f"sweep.{key}",
                        f"{key.split('.')[1]!r} is not an inference "
                        f"method of this spec; methods: {names}",
                    )
                )
        if "split" in self.sweep and "split" not in type(self.data).model_fields:
            split = [kind_of(m) for m in union_members(DataSpec) if "split" in m.model_fields]
            out.append(
                (
                    "sweep.split",
                    f"data kind {self.data.kind!r} has no train/test "
                    f"split index; use data kind {' or '.join(split)}, or remove the "
                    "split axis",
                )
            )
        return out

    def _symmetry_problems(self, i: int, method: Any) -> list[tuple[str, str]]:
        """A sampler's ``symmetry_moves`` that the network's hidden units do not have."""
        moves = getattr(method, "symmetry_moves", "off")
        if moves == "off":
            return []
        have = self.model.symmetries
        if have and (moves == "auto" or moves in have):
            return []
        what = f"a {self.model.kind} network"
        units = getattr(self.model, "activation", None)  # an MLP's
        if units is not None:
            what += f" of depth {self.model.depth} with {units} units"
        fix = "set symmetry_moves: auto or off" if have else "set symmetry_moves: off"
        return [
            (
                f"inference[{i}].symmetry_moves",
                f"{moves!r} needs hidden units with that symmetry; {what} has "
                f"{' and '.join(have) or 'none'} (rescale: relu, leaky_relu, linear; sign: tanh, "
                f"linear); {fix}",
            )
        ]

    def _study_problems(self) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        by_name = {m.name: m for m in self.inference}
        for k, s in enumerate(self.studies):
            if self.data is not None:  # e.g. ood: holdout_class needs data with a held-out class
                out += [(f"studies[{k}].{f}", msg) for f, msg in s.data_problems(self.data)]
            for j, name in enumerate(s.methods or []):
                m = by_name.get(name)
                if m is None:
                    out.append(
                        (
                            f"studies[{k}].methods[{j}]",
                            f"{name!r} is not an "
                            f"inference method of this spec; methods: {list(by_name)}",
                        )
                    )
                elif m.family not in s.families:
                    out.append(
                        (
                            f"studies[{k}].methods[{j}]",
                            f"the {s.kind} study applies "
                            f"to {s.needs()}; {name!r} is a {m.kind} method",
                        )
                    )
        seen: dict[tuple[str, str], int] = {}
        for k, s in enumerate(self.studies):
            for i, m in enumerate(self.inference):
                if not self._applies(s, m):
                    continue
                if (m.name, s.kind) in seen:
                    out.append(
                        (
                            f"studies[{k}]",
                            f"method {m.name!r} already has a {s.kind} "
                            f"study (studies[{seen[m.name, s.kind]}]); give each study "
                            "its own methods",
                        )
                    )
                seen.setdefault((m.name, s.kind), k)
                for field, msg in s.method_problems(m):
                    out.append((f"inference[{i}].{field}", f"{msg} (studies[{k}])"))
                out += self._stopping_problems(k, s, i, m)
        return out

    @staticmethod
    def _stopping_problems(k: int, study: Any, i: int, method: Any) -> list[tuple[str, str]]:
        """A study's stopping rule on a method that stops by a rule of its own (chees:
        ``target_ess`` on its streamed moments; it holds too few draws for the study's)."""
        own = getattr(method, "stopping_rule", None)
        target = getattr(study, "kl_target_draws", None)
        if own is None or target is None:
            return []
        return [
            (
                f"studies[{k}].kl_target_draws",
                f"method {method.name!r} ({method.kind}) "
                f"stops on its streamed moments, not on held draws: remove kl_target_draws "
                f"(and max_draws) here and set inference[{i}].{own} instead (e.g. {own}: "
                f"{target}), or name only the other samplers in this study's methods",
            )
        ]

    def method(self, name: str) -> Any:
        """The inference method called ``name``."""
        return next(m for m in self.inference if m.name == name)

    def studies_for(self, method: Any) -> list[Any]:
        """The studies that record ``method`` on this spec's network, in spec order.

        A study names its methods, or (``methods`` null) applies to every method of the
        families it fits; either way only where the network suits it
        (``applies_to_model``, e.g. the product matrix needs a linear network).
        """
        return [s for s in self.studies if self._applies(s, method)]

    def _applies(self, study: Any, method: Any) -> bool:
        if study.methods is not None:
            named = method.name in study.methods
        else:
            named = method.family in study.families
        return named and self.model is not None and study.applies_to_model(self.model)

    def cells(self) -> list[Cell]:
        """The sweep's cells (:func:`zoo.spec.sweep.cells`)."""
        return cells(self)
