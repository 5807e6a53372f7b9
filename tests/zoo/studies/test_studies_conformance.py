"""Every study of zoo.studies.STUDIES makes probes and report sections that fit the seam.

Parametrized over :data:`zoo.studies.STUDIES`: each study gets a cell of a tiny spec where
it applies, its probe's hooks are :class:`~zoo.inference.Hooks`, ``finish`` returns metrics
(numbers or strings) and artifacts (bytes), every metric it reports has a label (its own
``labels`` or the cell metrics' :data:`reports.labels.METRIC_LABELS`) or is hidden, and its
report sections build from those. A study without an example below fails here by name.
"""

from __future__ import annotations

import pandas as pd
import pytest

from reports.document import Section
from reports.labels import METRIC_LABELS, is_labelled
from zoo.inference import Hooks, combine_hooks, fit
from zoo.spec.base import kind_of
from zoo.spec.load import load_spec
from zoo.studies import STUDIES

SPEC = """\
name: studies_conformance
seed: 1
data: {kind: two_moons, n_train: 40, n_test: 30, noise: 0.1}
model: {kind: mlp, depth: 1, width: 3, activation: linear}
inference:
  - {name: svi, kind: svi, guide: {kind: mean_field}, steps: 12, batch_size: 20, predictive_samples: 3}
  - {name: nuts, kind: nuts, warmup: 10, draws: 8, chains: 2, vectorize_chains: true,
     max_tree_depth: 3}
studies:
  - {kind: price_of_mean_field, gaussian_fit: {cov: empirical}, kl_target_draws: 50}
  - {kind: ktied, truncation_ranks: [1], truncation_draws: 3, snr_steps: [12], snr_window: 3,
     elbo_steps: [6], elbo_draws: 2}
  - {kind: pruning, draws: 4, trajectory_every: 4, trajectory_draws: 2}
  - {kind: product_matrix, draws: 20}
  - {kind: laplace, refine_steps: 5}
  - {kind: predictive, draws: 20, ood_points: 30}
  - {kind: vsbc, replications: 2, steps: 3}
"""


class _Run:
    """A run directory reader over artifacts kept in memory."""

    def __init__(self) -> None:
        self.files: dict[tuple[str, str], bytes] = {}

    def read_artifact(self, cell_id: str, suffix: str) -> bytes | None:
        return self.files.get((cell_id, suffix))


@pytest.fixture(scope="module")
def spec(tmp_path_factory):
    p = tmp_path_factory.mktemp("studies") / "s.yaml"
    p.write_text(SPEC)
    return load_spec(p)


def test_every_study_has_an_example(spec):
    assert {type(s) for s in spec.studies} == set(STUDIES)


@pytest.mark.parametrize("cls", list(STUDIES), ids=kind_of)  # every registered study
def test_study_probes_a_cell_and_reports_it(spec, cls, cell_context):
    section = next((s for s in spec.studies if type(s) is cls), None)
    assert section is not None, f"add an example of the {kind_of(cls)!r} study to SPEC above"
    study = STUDIES[type(section)]
    cell = next(c for c in spec.cells() if section in c.studies)
    ctx = cell_context(cell)
    probe = study.probe(section, ctx)
    assert probe is not None and isinstance(probe.hooks, Hooks)
    res = fit(
        cell.method,
        ctx.model,
        ctx.data,
        seed=cell.spec.seed,
        runtime=ctx.runtime,
        hooks=combine_hooks([probe.hooks]),
        others={m.name: m for m in spec.inference},
    )
    metrics, artifacts = probe.finish(res)
    # None: a metric that does not apply to this cell (NaN would mean a numerical failure)
    assert metrics and all(v is None or isinstance(v, int | float | str) for v in metrics.values())
    assert all(k.startswith(".") and isinstance(v, bytes) for k, v in artifacts.items())
    # the study's own words: no column of a new study shows raw in the report
    labels = {**METRIC_LABELS, **study.labels}
    raw = sorted(k for k in metrics if k not in study.hidden and not is_labelled(k, labels))
    assert not raw, f"{kind_of(cls)}: label these metrics (or hide them) beside the probe: {raw}"
    assert set(study.companions) <= set(labels) and set(study.companions.values()) <= set(labels)
    run = _Run()
    run.files.update({(cell.cell_id, k): v for k, v in artifacts.items()})
    row = {
        "method": cell.method.name,
        "seed": cell.spec.seed,
        "cell_id": cell.cell_id,
        "status": "ok",
        "error": "",
        **metrics,
    }
    sections = study.sections(pd.DataFrame([row]), run, spec)
    assert isinstance(sections, list) and all(isinstance(s, Section) for s in sections)


def test_studies_do_not_relabel_one_metric_differently() -> None:
    seen: dict[str, tuple[str, str | None]] = dict(METRIC_LABELS)
    for cls, study in STUDIES.items():
        for metric, label in study.labels.items():
            assert seen.setdefault(metric, label) == label, f"{kind_of(cls)} relabels {metric}"
