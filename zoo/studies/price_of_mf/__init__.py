"""The price of mean field (Farquhar, Smith & Gal 2020) on the draws of sampled cells."""

from zoo.studies.base import StudyPlugin
from zoo.studies.price_of_mf.probe import PriceOfMeanFieldProbe
from zoo.studies.price_of_mf.report import price_of_mf_sections

__all__ = ["STUDY"]

STUDY = StudyPlugin("price_of_mean_field", PriceOfMeanFieldProbe, price_of_mf_sections)
