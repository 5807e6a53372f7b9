"""The product-matrix study (Farquhar et al. 2020, section 2) of trained linear networks.

The study section says which networks it applies to (linear ones: ``applies_to_model``).
:mod:`~zoo.studies.product_matrix.simulate` is its simulation spec (random layers, no data).
"""

from zoo.studies.base import StudyPlugin
from zoo.studies.product_matrix.probe import ProductMatrixProbe
from zoo.studies.product_matrix.report import product_sections

__all__ = ["STUDY"]

STUDY = StudyPlugin("product_matrix", ProductMatrixProbe, product_sections)
