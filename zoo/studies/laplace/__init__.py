"""The Laplace / Gauss-Newton price of mean field at a mode: exact, with no sampling."""

from zoo.studies.base import StudyPlugin
from zoo.studies.laplace.probe import LaplaceProbe
from zoo.studies.laplace.report import laplace_sections

__all__ = ["STUDY"]

STUDY = StudyPlugin("laplace", LaplaceProbe, laplace_sections)
