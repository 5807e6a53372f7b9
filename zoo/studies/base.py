"""The plug-in seam of studies: a :class:`Study` makes a :class:`Probe` per cell.

A study records something beyond a cell's predictive metrics (the price of mean field, the
k-tied spectra, over-pruning, product matrices). Its section in the spec's ``studies:``
list is its settings. For every cell it applies to, :meth:`Study.probe` returns a
:class:`Probe`: :class:`~zoo.inference.base.Hooks` into the fit, and
:meth:`Probe.finish`, which turns the finished fit into metrics (columns of results.csv)
and artifacts (files stored beside the cell's record, keyed by suffix). For the report,
:meth:`Study.sections` builds its sections from results.csv and the stored artifacts, and
the study declares the vocabulary of its columns beside them: ``labels`` (a metric's name
for people, with its unit), ``hidden`` (columns that describe a setting, left out of the
summary tables) and ``companions`` (a metric never plotted alone -> the one drawn beside
it). Every metric a probe reports is labelled or hidden (a conformance test says so), so a
new study's columns never show raw and no hub keeps a study's words.

A probe must not draw from torch's global generator (it uses its own, seeded from the cell's
seed), so a cell's other numbers are the same with and without it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

from zoo.data import Dataset, TorchData
from zoo.inference.base import Fit, Hooks
from zoo.models.base import BayesianNet
from zoo.runtime import Runtime

__all__ = ["ArtifactReader", "CellContext", "Probe", "Study", "StudyPlugin"]


class CellContext(NamedTuple):
    """What a cell has built before its fit, handed to probes and evaluation.

    Attributes
    ----------
    cell : Cell
        The sweep cell (``cell.spec``, ``cell.method``, ``cell.cell_id``, ``cell.axes``).
    model : BayesianNet
    ds : Dataset
        The data set (NumPy: sizes, classes, units of y).
    data : TorchData
        The same arrays as tensors on the runtime's device.
    runtime : Runtime
    """

    cell: Any
    model: BayesianNet
    ds: Dataset
    data: TorchData
    runtime: Runtime

    @property
    def seed(self) -> int:
        """The cell's seed."""
        return self.cell.spec.seed


class Probe(Protocol):
    """A study's view of one cell: hooks into its fit, then its outputs."""

    @property
    def hooks(self) -> Hooks:
        """Callbacks into the fit (empty :class:`Hooks` when the study only looks after it)."""
        ...

    def finish(self, fit: Fit) -> tuple[dict[str, Any], dict[str, bytes]]:
        """``(metrics, artifacts)`` of the finished fit; artifacts keyed by file suffix."""
        ...


class ArtifactReader(Protocol):
    """Read access to a run directory's cell artifacts (:class:`zoo.execution.store.RunDir` has it)."""

    def read_artifact(self, cell_id: str, suffix: str) -> bytes | None:
        """The bytes of ``cells/<cell_id><suffix>``, or None if there is no such file."""
        ...


class Study(Protocol):
    """A study: probes for cells, sections for the report and the words of its columns."""

    #: Metric column -> (what it is, for people; unit or None).
    labels: Mapping[str, tuple[str, str | None]]
    #: Columns left out of the report's summary tables (settings, not results).
    hidden: frozenset[str]
    #: A metric never plotted alone -> the metric drawn in a panel beside it.
    companions: Mapping[str, str]
    #: The study's few metrics the terminal summary shows first, in order.
    headline: tuple[str, ...]

    def probe(self, section: Any, ctx: CellContext) -> Probe | None:
        """The probe of study section ``section`` for a cell, or None if it has nothing to
        record there (e.g. pruning statistics of a network without hidden layers)."""
        ...

    def sections(self, results: Any, run: ArtifactReader, spec: Any) -> list[Any]:
        """The study's report sections (:class:`reports.document.Section`) of a run."""
        ...


@dataclass(frozen=True, eq=False)  # one instance per study: hashed by identity
class StudyPlugin:
    """A :class:`Study` made of two functions: how most studies are written.

    Attributes
    ----------
    name : str
        The study's kind in the spec (for messages).
    make_probe : callable
        ``(section, ctx) -> Probe | None``.
    make_sections : callable
        ``(results, run, spec) -> list of Section``.
    labels : mapping
        Metric column -> (what it is, for people; unit or None), for every metric the
        probe reports that is not hidden.
    hidden : frozenset of str
        Columns the probe reports that describe a setting; left out of the summary tables.
    companions : mapping
        A metric never plotted alone -> the metric drawn in a panel beside it.
    headline : tuple of str
        The study's few metrics the terminal summary shows first, in order.
    weight_space : bool
        Whether the study's metrics are functionals of the weights' draws (a KL or W2 of
        their covariance): on a sampled cell they need the weights' gates, a reference grade
        of silver or better (:func:`reports.grade.usable_for`), and the report says so where
        a line's grade is lower.
    """

    name: str
    make_probe: Callable[[Any, CellContext], Probe | None]
    make_sections: Callable[[Any, ArtifactReader, Any], list[Any]]
    labels: Mapping[str, tuple[str, str | None]] = field(default_factory=dict)
    hidden: frozenset[str] = frozenset()
    companions: Mapping[str, str] = field(default_factory=dict)
    headline: tuple[str, ...] = ()
    weight_space: bool = False

    def probe(self, section: Any, ctx: CellContext) -> Probe | None:
        return self.make_probe(section, ctx)

    def sections(self, results: Any, run: ArtifactReader, spec: Any) -> list[Any]:
        return self.make_sections(results, run, spec)
