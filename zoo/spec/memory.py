r"""How much memory one cell needs at least: an estimate made at validation, before any cell.

A cell whose arrays cannot be allocated used to pass validation and fail only when it got
there (ChEES at width 100,000 asked for 16 TB after 9 s; test-set predictions of 2.4 GB and
training log-likelihoods of 8 GB after minutes). :func:`estimate` adds the largest arrays a
cell holds at once; ``zoo validate`` and ``zoo run`` refuse a cell past the machine's
memory and warn past :data:`WARN_FRACTION` of it (``zoo.execution.preflight``).

The formula, in bytes, with :math:`D` the network's weights and biases, :math:`s` the bytes
of the runtime's dtype (4 or 8), :math:`N, T` the training and test points, :math:`K` the
network's outputs (classes, or 1), all dense matrices in float64:

.. math::

    M = \underbrace{S D s}_{\text{weight draws}}
      + \underbrace{2 S_a (N + T) \cdot 4 s + S_a T K s}_{\text{pointwise groups, chain predictions}}
      + \underbrace{P T K s}_{\text{predictive}}
      + \underbrace{8 c D^2}_{\text{dense matrices}}
      + \underbrace{8 N K D}_{\text{Jacobians}}

- :math:`S` weight draws held: ``chains x draws`` (``keep_draws`` for ChEES) for a sampler,
  with ``draws`` the most the chains may draw (a price-of-mean-field study's ``max_draws``
  where its stopping rule extends them),
  ``predictive_samples`` for svi, 1 for a point method;
- :math:`S_a` the draws whose pointwise values the cell's ArviZ file holds (log-likelihood,
  replicated targets on the training and test points), each value held twice (as computed
  and in the ArviZ tree): a sampler's chains are thinned to
  :data:`ARCHIVE_MAX_VALUES` values per group (at least 2 chains), an svi fit's
  predictive samples only with ``save_draws``;
- :math:`P` the predictive draws (``predictive_draws`` / ``predictive_samples``);
- :math:`c` the dense :math:`D \times D` matrices held at once: ChEES's streamed moments
  (:math:`2 g + 2` with :math:`g` = ``min(stream_groups, chains)`` groups: co-moments,
  their covariances, the pooled one), NUTS's dense mass matrix (3: estimate, matrix, its
  factor), and what a section says it holds (``dense_matrices``: a full-rank guide 4, the
  Laplace study 3, the price-of-mean-field study 4); a ``block`` mass matrix or a per-site
  guide is counted as dense (an upper bound);
- the Jacobians: a Laplace study's Gauss-Newton matrix (``curvature: ggn``).

It leaves out what is small beside these (the data, activations of a batch, the optimizer
state of a diagonal guide), so it is a lower bound of the peak, not a prediction of it.
Measured (commit d00fe1f, 2026-11-29, a 2-core AMD EPYC with 25 GB): an svi cell of 2000
saved draws on 1000 training and 200,000 test points, estimated at 16.1 GB, peaked at
20.8 GB resident.
No torch import here.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from zoo.spec.sections.studies.price_of_mf import cell_draws_cap

__all__ = [
    "ARCHIVE_MAX_VALUES",
    "WARN_FRACTION",
    "DataShape",
    "Estimate",
    "estimate",
    "machine_memory",
    "size_text",
]

#: Most pointwise values (draws x training and test points) a sampled cell's ArviZ file holds
#: in each of its pointwise groups (log_likelihood, posterior_predictive, predictions,
#: log_likelihood_test): 20 million float32 values are 80 MB before compression.
ARCHIVE_MAX_VALUES = 20_000_000

#: A cell estimated past this fraction of the machine's memory gets a warning.
WARN_FRACTION = 0.5


@dataclass(frozen=True)
class DataShape:
    """What the estimate needs of a loaded data set: points, inputs, the network's outputs
    and the classes (0 for regression)."""

    n_train: int
    n_test: int
    in_dim: int
    out_dim: int
    n_classes: int = 0


@dataclass(frozen=True)
class Estimate:
    """A cell's memory estimate: the total, its terms (name -> bytes) and the spec fields
    that shrink the largest term."""

    total: int
    terms: dict[str, int]
    fields: list[str]

    def text(self) -> str:
        """``"16.0 TB (dense matrices 16.0 TB, weight draws 2.0 GB)"``: the terms over 1% of it."""
        big = sorted(self.terms.items(), key=lambda kv: -kv[1])
        shown = ", ".join(f"{k} {size_text(v)}" for k, v in big if v >= self.total / 100)
        return f"{size_text(self.total)} ({shown})"


def size_text(n: float) -> str:
    """``n`` bytes in decimal units: ``"16.0 TB"``."""
    for unit in ("bytes", "kB", "MB", "GB", "TB", "PB"):
        if n < 1000 or unit == "PB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} PB"  # pragma: no cover


def machine_memory() -> int | None:
    """This machine's physical memory in bytes (None where the system does not say)."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def _num_params(model: Any, shape: DataShape) -> int:
    if hasattr(model, "num_params"):  # lenet
        return model.num_params(shape.in_dim, shape.out_dim)
    widths = model.hidden_widths(shape.in_dim, shape.out_dim)
    dims = [shape.in_dim, *widths, shape.out_dim]
    return sum((a + 1) * b for a, b in zip(dims, dims[1:], strict=False))


def _model_field(model: Any) -> str:
    for field in ("width", "param_budget", "dense"):
        if getattr(model, field, None) is not None:
            return f"model.{field}"
    return "model"


def _index(items: Any, item: Any) -> int:
    """Position of ``item`` in ``items`` (the first equal section)."""
    return next(k for k, x in enumerate(items) if x == item)


def _draws(
    spec: Any, method: Any, studies: list[Any], shape: DataShape
) -> tuple[int, int, int, list[str]]:
    """``(S, S_a, P, fields)``: weight draws held, draws evaluated pointwise, predictive
    draws, and the method's fields that set them."""
    m = f"inference.{method.name}"
    if method.family == "sampler":
        field, kept = method.kept_per_chain()
        fields = [f"{m}.chains", f"{m}.{field}"]
        if field == "draws":  # every draw is held: as many as the chains may draw
            kept, by = cell_draws_cap(method, studies)
            if by is not None:
                fields = [f"{m}.chains", f"studies[{_index(spec.studies, by)}].max_draws"]
        points = shape.n_train + shape.n_test
        chains = method.chains
        if chains * kept * points > ARCHIVE_MAX_VALUES:
            chains = min(chains, max(2, ARCHIVE_MAX_VALUES // max(1, kept * points)))
        held = method.chains * kept
        return held, chains * kept, method.predictive_draws, fields
    samples = getattr(method, "predictive_samples", 1)
    archived = samples if getattr(method, "save_draws", False) else 0
    return samples, archived, samples, [f"{m}.predictive_samples"]


def _dense(spec: Any, method: Any, studies: list[Any]) -> tuple[int, list[str]]:
    """``(c, fields)``: the dense D x D matrices the cell holds at once, and what sets them."""
    m = f"inference.{method.name}"
    c, fields = 0, []
    groups = getattr(method, "stream_groups", None)  # ChEES's streamed moments
    if groups is not None:
        c, fields = 2 * min(groups, method.chains) + 2, [f"{m}.stream_groups"]
    if getattr(method, "mass_matrix", "diag") != "diag":
        c, fields = c + 3, [*fields, f"{m}.mass_matrix"]
    guide = getattr(method, "guide", None)
    if getattr(guide, "dense_matrices", 0):
        c, fields = c + guide.dense_matrices, [*fields, f"{m}.guide.kind"]
    for k, study in enumerate(spec.studies):
        if study.dense_matrices and any(study is s for s in studies):
            c, fields = c + study.dense_matrices, [*fields, f"studies[{k}]"]
    return c, fields


def estimate(spec: Any, method: Any, studies: list[Any], shape: DataShape) -> Estimate:
    """The memory a cell of ``spec`` running ``method`` (recorded by ``studies``) needs at
    least on data of ``shape`` (the module docstring gives the formula)."""
    s = 8 if spec.runtime.dtype == "float64" else 4
    d = _num_params(spec.model, shape)
    held, archived, predictive, draw_fields = _draws(spec, method, studies, shape)
    c, dense_fields = _dense(spec, method, studies)
    k, n, t = shape.out_dim, shape.n_train, shape.n_test
    ggn = any(getattr(x, "curvature", None) == "ggn" for x in studies)
    terms = {
        "weight draws": held * d * s,
        "pointwise values": 2 * archived * (n + t) * 4 * s + archived * t * k * s,
        "predictive": predictive * t * k * s,
        "dense matrices": 8 * c * d * d,
        "Jacobians": 8 * n * k * d if ggn else 0,
    }
    data = "data (its training and test points)"
    fields = {
        "weight draws": [*draw_fields, _model_field(spec.model)],
        "pointwise values": [*draw_fields, data],
        "predictive": [*draw_fields[-1:], data],
        "dense matrices": [*dense_fields, _model_field(spec.model)],
        "Jacobians": [_model_field(spec.model), data],
    }
    largest = max(terms, key=terms.__getitem__)
    return Estimate(sum(terms.values()), terms, fields[largest])
