"""The price of mean field in predictions: approximations' predictives against the draws'."""

from zoo.studies.base import StudyPlugin
from zoo.studies.predictive.probe import PredictiveProbe
from zoo.studies.predictive.report import predictive_sections

__all__ = ["STUDY"]

STUDY = StudyPlugin("predictive", PredictiveProbe, predictive_sections)
