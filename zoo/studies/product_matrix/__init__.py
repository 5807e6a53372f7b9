"""The product-matrix study (Farquhar et al. 2020, section 2) of trained linear networks.

The study section says which networks it applies to (linear ones: ``applies_to_model``).
:mod:`~zoo.studies.product_matrix.simulate` is its simulation spec (random layers, no data).
The study's table entry: its probe, its report section and the words of its columns.
"""

from zoo.studies.base import StudyPlugin
from zoo.studies.product_matrix.probe import ProductMatrixProbe
from zoo.studies.product_matrix.report import product_sections

__all__ = ["LABELS", "STUDY"]

#: The study's columns for people: metric -> (what it is; unit or None).
LABELS: dict[str, tuple[str, str | None]] = {
    "product_offdiag_mass": ("off-diagonal share of the product-matrix covariance", None),
    "product_offdiag_mass_exact": ("the same, exact (mean-field guide)", None),
    "product_cov_max_abs_diff": ("largest |Monte Carlo - exact| product covariance", None),
    "product_cov_max_z": ("largest |Monte Carlo - exact| in standard errors", None),
    "product_cov_within_3se": ("share of covariance entries within 3 standard errors", None),
}

STUDY = StudyPlugin("product_matrix", ProductMatrixProbe, product_sections, labels=LABELS)
