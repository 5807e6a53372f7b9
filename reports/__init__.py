"""Pure metrics, tables, figures and the report document of bnn-zoo runs.

The folder's rule: no Pyro, torch or ``zoo`` import anywhere in this package (inputs are
NumPy arrays, pandas frames or xarray objects), and nothing here writes a file (figures and
report files come back as bytes; the caller, ``zoo.execution.store``, writes them). Tests
(``tests/test_layers.py``) enforce it.

By concept (the map, with what is public: docs/reports.md):

- for a user's own draws, :mod:`reports.posterior`: the price of mean field, its aligned
  version and nested R-hat of any ArviZ DataTree (``group``, ``var_names``,
  ``filter_vars`` as arviz-stats takes them);
- generic posterior numerics (public): :mod:`~reports.gaussian` (Gaussian fits, KL),
  :mod:`~reports.kl_reference` (the KL's bias at its own n, with :mod:`~reports.kl_groups`
  and :mod:`~reports.kl_calibration`), :mod:`~reports.wasserstein`,
  :mod:`~reports.w2_reference`, :mod:`~reports.draws` (flat draws),
  :mod:`~reports.alignment` (draws modulo hidden-unit permutations),
  :mod:`~reports.superchains`, :mod:`~reports.diagnostics` (convergence numbers and
  gates), :mod:`~reports.rank_normal` (rank R-hat and bulk ESS of many columns at once),
  :mod:`~reports.rank_ecdf`, :mod:`~reports.calibration` (test metrics),
  :mod:`~reports.predictive` (function-space comparisons);
- each study's numbers (the zoo's internals): :mod:`~reports.price_of_mf`,
  :mod:`~reports.kl_null`, :mod:`~reports.kl_rhat`, :mod:`~reports.orbit`,
  :mod:`~reports.ground_truth`, :mod:`~reports.targets`, :mod:`~reports.ridge_target`,
  :mod:`~reports.laplace`, :mod:`~reports.spectrum`, :mod:`~reports.pruning`,
  :mod:`~reports.product_matrix`, :mod:`~reports.product_block`, :mod:`~reports.tv_floor`,
  :mod:`~reports.grade`;
- the document (internals): :mod:`~reports.tables` and :mod:`~reports.study_table` (the one
  aggregation rule), :mod:`~reports.labels` (names and the one set of number formatters),
  :mod:`~reports.sweep`, :mod:`~reports.headline`, :mod:`~reports.sampler_report`,
  :mod:`reports.figures` (every matplotlib figure, the only place that draws; numbers never
  import it) and :mod:`~reports.document` (a report as a
  :class:`~reports.document.Document` of blocks, rendered once per format).
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
