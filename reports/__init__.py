"""Pure metrics and rendering for bnn-zoo runs.

No Pyro or torch import anywhere in this package: inputs are NumPy arrays, pandas frames
or xarray objects. :mod:`reports.render` is the only module that writes report files.
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
from reports.render import figure_name, plot_metric_vs, render_report
from reports.tables import (
    BOOKKEEPING_COLUMNS,
    METRIC_COLUMNS,
    summarize,
    write_bytes_atomic,
    write_csv_atomic,
)

__all__ = [
    "BOOKKEEPING_COLUMNS",
    "METRIC_COLUMNS",
    "accuracy",
    "brier",
    "classification_metrics",
    "ece",
    "figure_name",
    "nll",
    "plot_metric_vs",
    "predictive_log_probs",
    "regression_metrics",
    "render_report",
    "summarize",
    "write_bytes_atomic",
    "write_csv_atomic",
]
