"""Pure metrics, tables, figures and the report document of bnn-zoo runs.

The folder's rule: no Pyro, torch or ``zoo`` import anywhere in this package (inputs are
NumPy arrays, pandas frames or xarray objects), and nothing here writes a file (figures and
report files come back as bytes; the caller, ``zoo.execution.store``, writes them). Tests
(``tests/test_layers.py``) enforce it.

One concept per module:

- numbers: :mod:`~reports.calibration` (test metrics), :mod:`~reports.predictive`
  (function-space comparisons, predictive convergence), :mod:`~reports.draws` (flat draws),
  :mod:`~reports.gaussian` (Gaussian fits, KL), :mod:`~reports.alignment` (draws modulo
  hidden-unit permutations), :mod:`~reports.wasserstein`,
  :mod:`~reports.price_of_mf` (the study's records), :mod:`~reports.kl_null`,
  :mod:`~reports.kl_reference` (the KL's bias at its own n; its chain
  groups in :mod:`~reports.kl_groups`, its AR(1) calibration in :mod:`~reports.kl_calibration`), :mod:`~reports.laplace`,
  :mod:`~reports.ground_truth` (and the known answers with a network's symmetries,
  :mod:`~reports.targets` and :mod:`~reports.ridge_target`), :mod:`~reports.spectrum`,
  :mod:`~reports.pruning`,
  :mod:`~reports.product_matrix`, :mod:`~reports.diagnostics`
  (convergence numbers and gates), :mod:`~reports.rank_ecdf`;
- tables and words: :mod:`~reports.tables` (summaries), :mod:`~reports.labels` (names for
  people and the one set of number formatters), :mod:`~reports.sweep` (how a summary lies
  along a sweep axis), :mod:`~reports.headline`, :mod:`~reports.sampler_report` (the
  sampler diagnostics section from the cells' records);
- :mod:`reports.figures`: every matplotlib figure, one module per concept (the only
  place that draws; numbers never import it);
- :mod:`~reports.document`: a report as a :class:`~reports.document.Document` of blocks,
  rendered once per format (:func:`~reports.document.to_markdown`,
  :func:`~reports.document.to_html`, :func:`~reports.document.render`).
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
from reports.document import Document, Section, render, section, to_html, to_markdown
from reports.figures import figure_png
from reports.figures.metric_vs import figure_name, plot_metric_vs
from reports.tables import BOOKKEEPING_COLUMNS, METRIC_COLUMNS, summarize

__all__ = [
    "BOOKKEEPING_COLUMNS",
    "METRIC_COLUMNS",
    "Document",
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
    "render",
    "section",
    "summarize",
    "to_html",
    "to_markdown",
]
