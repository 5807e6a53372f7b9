"""Studies: what a cell records beyond its predictive metrics, as plug-ins.

:data:`STUDIES` maps a study section class of the spec's ``studies:`` list
(:mod:`zoo.spec.sections.studies`) to its :class:`~zoo.studies.base.Study`: ``probe(section,
ctx)`` gives a cell's :class:`~zoo.studies.base.Probe` (hooks into the fit, then metrics and
artifacts), ``sections(results, run, spec)`` the report's sections. Add a study: its section
in :mod:`zoo.spec.sections.studies`, a folder here with its probe and report sections, and
one entry below (``tests/zoo/studies/test_studies_conformance.py`` fails until it is there).

Dependency rule: studies import :mod:`zoo.spec`, :mod:`zoo.data`, :mod:`zoo.models`,
:mod:`zoo.inference`, :mod:`zoo.runtime` and :mod:`reports`, never :mod:`zoo.execution`.
"""

from collections.abc import Callable
from pathlib import Path

from zoo.spec.sections.simulation import (
    GaussianGroundTruthSimulation,
    PermutationTargetSimulation,
    ProductMatrixSimulation,
    RidgeTargetSimulation,
)
from zoo.spec.sections.studies import (
    KTiedStudy,
    LaplaceStudy,
    PredictiveStudy,
    PriceOfMeanFieldStudy,
    ProductMatrixStudy,
    PruningStudy,
    VSBCStudy,
)
from zoo.studies import ktied, laplace, predictive, price_of_mf, product_matrix, pruning, vsbc
from zoo.studies.base import ArtifactReader, CellContext, Probe, Study, StudyPlugin
from zoo.studies.known_answers import run_permutation_target, run_ridge_target
from zoo.studies.price_of_mf.ground_truth import run_ground_truth
from zoo.studies.product_matrix.simulate import run_simulation

__all__ = [
    "SIMULATIONS",
    "STUDIES",
    "ArtifactReader",
    "CellContext",
    "Probe",
    "Study",
    "StudyPlugin",
]

#: Study section class -> the study.
STUDIES: dict[type, Study] = {
    PriceOfMeanFieldStudy: price_of_mf.STUDY,
    KTiedStudy: ktied.STUDY,
    PruningStudy: pruning.STUDY,
    ProductMatrixStudy: product_matrix.STUDY,
    LaplaceStudy: laplace.STUDY,
    PredictiveStudy: predictive.STUDY,
    VSBCStudy: vsbc.STUDY,
}

#: Simulation section class -> ``run(spec, store, log=)``: a run with no cells.
SIMULATIONS: dict[type, Callable[..., dict[str, Path]]] = {
    ProductMatrixSimulation: run_simulation,
    GaussianGroundTruthSimulation: run_ground_truth,
    RidgeTargetSimulation: run_ridge_target,
    PermutationTargetSimulation: run_permutation_target,
}
