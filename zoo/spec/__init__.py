"""The spec language of bnn-zoo: a YAML experiment, validated, and the cells it expands to.

Rule of this package: it imports no torch (nor anything that does), so validating a spec
is instant; a test says so. It depends on pydantic and PyYAML only, and the rest of
``zoo`` depends on it, never the other way round.

Modules: :mod:`~zoo.spec.base` (Section, union helpers), :mod:`~zoo.spec.sections` (one
module per domain), :mod:`~zoo.spec.schema` (Spec and its cross-field checks),
:mod:`~zoo.spec.sweep` (cells, cell ids), :mod:`~zoo.spec.load` and
:mod:`~zoo.spec.errors` (loading with FILE:LINE:COL messages), :mod:`~zoo.spec.paths`
(dotted paths), :mod:`~zoo.spec.reader` (YAML as plain JSON data, within bounds) and
:mod:`~zoo.spec.overrides` (``--set`` items).
"""

from zoo.spec.errors import SpecError
from zoo.spec.load import load_spec, parse_overrides
from zoo.spec.paths import set_path
from zoo.spec.schema import Spec
from zoo.spec.sections.runtime import RuntimeSection
from zoo.spec.sections.studies import (
    KTiedStudy,
    PriceOfMeanFieldStudy,
    ProductMatrixStudy,
    PruningStudy,
    StudySpec,
)
from zoo.spec.sweep import AXIS_ALIASES, SPEC_VERSION, Cell, cell_id, cells

__all__ = [
    "AXIS_ALIASES",
    "SPEC_VERSION",
    "Cell",
    "KTiedStudy",
    "PriceOfMeanFieldStudy",
    "ProductMatrixStudy",
    "PruningStudy",
    "RuntimeSection",
    "Spec",
    "SpecError",
    "StudySpec",
    "cell_id",
    "cells",
    "load_spec",
    "parse_overrides",
    "set_path",
]
