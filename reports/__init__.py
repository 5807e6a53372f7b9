"""Pure metrics and rendering for bnn-zoo runs.

No Pyro, torch or ``zoo`` import anywhere in this package: inputs are NumPy arrays, pandas
frames or xarray objects. Nothing here writes a file: figures and report files come back as
bytes (:func:`reports.render.render_report`), and the caller (``zoo.run.store``) writes them.
"""

from reports.calibration import (
    accuracy,
    brier,
    classification_metrics,
    ece,
    nll,
    predictive_log_probs,
    regression_metrics,
)
from reports.render import Section, figure_name, figure_png, plot_metric_vs, render_report
from reports.tables import BOOKKEEPING_COLUMNS, METRIC_COLUMNS, summarize

__all__ = [
    "BOOKKEEPING_COLUMNS",
    "METRIC_COLUMNS",
    "Section",
    "accuracy",
    "brier",
    "classification_metrics",
    "ece",
    "figure_name",
    "figure_png",
    "nll",
    "plot_metric_vs",
    "predictive_log_probs",
    "regression_metrics",
    "render_report",
    "summarize",
]
