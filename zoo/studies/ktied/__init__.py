"""The k-tied study (Swiatkowski et al. 2020): spectra, truncation, SNR and -ELBO of svi fits."""

from zoo.studies.base import StudyPlugin
from zoo.studies.ktied.probe import KTiedProbe
from zoo.studies.ktied.report import ktied_sections

__all__ = ["STUDY"]

STUDY = StudyPlugin("ktied", KTiedProbe, ktied_sections)
