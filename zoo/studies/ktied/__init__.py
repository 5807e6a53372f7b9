"""The k-tied study (Swiatkowski et al. 2020): spectra, truncation, SNR and -ELBO of svi fits.

The study's table entry: its probe, its report sections and the words of its columns.
"""

from zoo.studies.base import StudyPlugin
from zoo.studies.ktied.probe import KTiedProbe
from zoo.studies.ktied.report import ktied_sections

__all__ = ["LABELS", "STUDY"]

#: The study's columns for people: metric -> (what it is; unit or None). ``<metric>.<site>``
#: is the metric of one parameter site.
LABELS: dict[str, tuple[str, str | None]] = {
    "nll_per_draw": ("mean over draws of each draw's test NLL", "nats"),
    "nll_per_draw_sem": ("s.e. over draws of the per-draw test NLL", "nats"),
    "accuracy_per_draw": ("mean over draws of each draw's test accuracy", None),
    "std_top1": ("share of the centred std matrix's variance in its top singular value", None),
    "mean_top1": ("share of the centred mean matrix's variance in its top singular value", None),
}

STUDY = StudyPlugin("ktied", KTiedProbe, ktied_sections, labels=LABELS)
