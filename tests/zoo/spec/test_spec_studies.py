"""The ``studies`` section: which methods each study records and its errors."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from tests.zoo.spec._helpers import errors as _errors
from tests.zoo.spec._helpers import write as _write
from zoo.spec import (
    KTiedStudy,
    PriceOfMeanFieldStudy,
    ProductMatrixStudy,
    PruningStudy,
    Spec,
    load_spec,
)
from zoo.spec.errors import SpecError

BASE = """\
name: t
data: {kind: two_moons, n_train: 50}
model: {kind: mlp, depth: 1, width: 4}
inference:
  - {name: mfvi, kind: svi, guide: {kind: mean_field}, steps: 5}
  - {name: map, kind: map, steps: 5}
  - name: nuts
    kind: nuts
    warmup: 5
    draws: 10
    chains: 2
    vectorize_chains: true
"""


def _load_warning_free(path: Path) -> Spec:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return load_spec(path)


# --------------------------------------------------------------------------- applying


def test_studies_apply_to_their_families(tmp_path: Path) -> None:
    text = BASE + "studies:\n  - {kind: pruning}\n  - {kind: price_of_mean_field}\n"
    spec = _load_warning_free(_write(tmp_path, text))
    kinds = {m.name: [s.kind for s in spec.studies_for(m)] for m in spec.inference}
    # pruning's rule-free measure applies to point estimates too
    assert kinds == {
        "mfvi": ["pruning"],
        "map": ["pruning"],
        "nuts": ["pruning", "price_of_mean_field"],
    }
    for cell in spec.cells():
        assert cell.studies == spec.studies_for(cell.method)
    assert isinstance(spec.studies[0], PruningStudy)
    assert isinstance(spec.studies[1], PriceOfMeanFieldStudy)


def test_methods_narrow_a_study(tmp_path: Path) -> None:
    text = BASE.replace(
        "  - {name: map",
        "  - {name: kt, kind: svi, guide: {kind: k_tied}, steps: 5}\n  - {name: map",
    ) + ("studies:\n  - {kind: ktied, methods: [kt], snr_steps: [2]}\n")
    spec = _load_warning_free(_write(tmp_path, text))
    by = {c.method.name: c.studies for c in spec.cells()}
    assert by["mfvi"] == [] and [s.kind for s in by["kt"]] == ["ktied"]
    assert isinstance(by["kt"][0], KTiedStudy) and by["kt"][0].snr_steps == [2]


def test_product_matrix_needs_a_linear_network(tmp_path: Path) -> None:
    text = BASE + "studies:\n  - {kind: product_matrix, draws: 50}\n"
    text = text.replace("width: 4}", "width: 4, activation: linear}")
    spec = _load_warning_free(_write(tmp_path, text))
    assert [type(s) for s in spec.studies_for(spec.method("mfvi"))] == [ProductMatrixStudy]
    # swept over the activation: only the linear cells record it
    text = text.replace("studies:", "sweep:\n  model.activation: [linear, relu]\nstudies:")
    cells = _load_warning_free(_write(tmp_path, text)).cells()
    assert {
        (c.spec.model.activation, c.method.name): bool(c.studies)
        for c in cells
        if c.method.name == "mfvi"
    } == {("linear", "mfvi"): True, ("relu", "mfvi"): False}


def test_price_of_mean_field_draws_cap(tmp_path: Path) -> None:
    text = BASE.replace("    vectorize_chains: true\n", "    vectorize_chains: true\n") + (
        "studies:\n  - {kind: price_of_mean_field, gaussian_fit: {cov: empirical}, "
        "kl_target_draws: 100}\n"
    )
    spec = _load_warning_free(_write(tmp_path, text))
    nuts = spec.method("nuts")
    (study,) = spec.studies_for(nuts)
    assert study.draws_cap(nuts) == 40
    assert study.model_copy(update={"max_draws": 25}).draws_cap(nuts) == 25
    assert PriceOfMeanFieldStudy(kind="price_of_mean_field").draws_cap(nuts) == 10


# --------------------------------------------------------------------------- errors

STUDY_ERRORS = [
    (
        "unknown method",
        "studies:\n  - {kind: pruning, methods: [mfvi, nope]}\n",
        "14:37",
        ["studies[0].methods[1]", "'nope' is not an inference method", "'mfvi', 'map', 'nuts'"],
    ),
    (
        "wrong family",
        "studies:\n  - {kind: ktied, methods: [nuts]}\n",
        "14:29",
        ["studies[0].methods[0]", "the ktied study applies to svi methods", "'nuts' is a nuts"],
    ),
    (
        "point method",
        "studies:\n  - {kind: price_of_mean_field, methods: [map]}\n",
        "14:43",
        ["applies to sampler methods; 'map' is a map method"],
    ),
    (
        "unknown study kind",
        "studies:\n  - {kind: prunning}\n",
        "14:12",
        ["studies[0].kind", "did you mean 'pruning'"],
    ),
    (
        "unknown study key",
        "studies:\n  - {kind: pruning, draw: 5}\n",
        "14:21",
        ["studies[0].draw", "did you mean 'draws'"],
    ),
    (
        "applies to no cell",
        "studies:\n  - {kind: product_matrix}\n",
        "14:5",
        ["studies[0]", "records no cell", "linear network (model.activation: linear)"],
    ),
    (
        "two of a kind on one method",
        "studies:\n  - {kind: pruning}\n  - {kind: pruning, methods: [nuts]}\n",
        "15:5",
        ["studies[1]", "method 'nuts' already has a pruning study (studies[0])"],
    ),
    (
        "kl target on one chain",
        "studies:\n  - {kind: price_of_mean_field, gaussian_fit: {cov: empirical}, "
        "kl_target_draws: 100}\n",
        "11:13",
        ["inference[2].chains", "needs vectorize_chains: true and chains >= 2", "(studies[0])"],
    ),
    (
        "kl target with ledoit-wolf",
        "studies:\n  - {kind: price_of_mean_field, kl_target_draws: 100}\n",
        "14:5",
        ["studies[0]", "set gaussian_fit.cov: empirical"],
    ),
    (
        "max_draws below draws",
        "studies:\n  - {kind: price_of_mean_field, gaussian_fit: {cov: empirical}, "
        "kl_target_draws: 100, max_draws: 5}\n",
        "10:12",
        ["inference[2].draws", "max_draws (5) must be >= draws (10)"],
    ),
    (
        "max_draws without a target",
        "studies:\n  - {kind: price_of_mean_field, max_draws: 5}\n",
        "14:5",
        ["max_draws applies only with kl_target_draws"],
    ),
]


@pytest.mark.parametrize("case", STUDY_ERRORS, ids=[c[0] for c in STUDY_ERRORS])
def test_study_errors_point_at_their_line(tmp_path: Path, case) -> None:
    _, studies, where, fragments = case
    text = BASE + studies
    if "one chain" in case[0]:
        text = text.replace("chains: 2\n", "chains: 1\n")
    p = _write(tmp_path, text)
    msgs = _errors(p)
    joined = "\n".join(msgs)
    for frag in fragments:
        assert frag in joined, joined
    assert msgs[0].startswith(f"{p}:{where}:"), joined


def test_study_errors_all_at_once(tmp_path: Path) -> None:
    text = BASE + "studies:\n  - {kind: ktied, methods: [nuts, nope]}\n"
    text = text.replace("width: 4}", "width: 4}\nlikelihood: {kind: gaussian}")
    msgs = _errors(_write(tmp_path, text))
    assert len(msgs) == 3, msgs
    assert [m.split(": ")[1] for m in msgs] == [
        "likelihood.kind",
        "studies[0].methods[0]",
        "studies[0].methods[1]",
    ]


def test_lenet_with_a_sampler_validates(tmp_path: Path) -> None:
    # the samplers' torch.func potential covers lenet: no refusal any more
    text = BASE.replace("model: {kind: mlp, depth: 1, width: 4}", "model: {kind: lenet}")
    text = text.replace("n_train: 50}", "n_train: 50}\nstudies: []")
    spec = load_spec(_write(tmp_path, text))
    assert spec.model.kind == "lenet" and spec.inference[2].kind == "nuts"


def test_a_model_kind_that_cannot_be_sampled_is_refused_with_a_sampler(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from zoo.spec.sections.models import LeNetModel

    monkeypatch.setattr(LeNetModel, "samplable", False)  # a kind no potential covers
    text = BASE.replace("model: {kind: mlp, depth: 1, width: 4}", "model: {kind: lenet}")
    text = text.replace("n_train: 50}", "n_train: 50}\nstudies: []")
    p = _write(tmp_path, text)
    msgs = _errors(p)
    assert msgs == [
        f"{p}:9:11: inference[2].kind: 'nuts' cannot sample a lenet network (the samplers' "
        "flat potential covers model kinds ['mlp']); use a method of kind map or mle or svi, "
        "or another model"
    ]


def test_runtime_section(tmp_path: Path) -> None:
    spec = _load_warning_free(_write(tmp_path, BASE + "studies: []\n"))
    assert (spec.runtime.device, spec.runtime.dtype, spec.runtime.threads) == (
        "cpu",
        "float32",
        None,
    )
    text = BASE + "studies: []\nruntime: {device: cuda:1, dtype: float64, threads: 2}\n"
    spec = _load_warning_free(_write(tmp_path, text))
    assert (spec.runtime.device, spec.runtime.dtype, spec.runtime.threads) == (
        "cuda:1",
        "float64",
        2,
    )
    p = _write(tmp_path, BASE + "studies: []\nruntime: {device: gpu, dtype: float16}\n")
    msgs = _errors(p)
    assert msgs[0].startswith(f"{p}:14:19: runtime.device: device 'gpu': give cpu, cuda")
    assert msgs[1].startswith(f"{p}:14:31: runtime.dtype: 'float16' is not allowed")


# --------------------------------------------------------------------------- no implicit study

OLD = """\
name: t
data: {kind: two_moons, n_train: 50}
model: {kind: mlp, depth: 1, width: 4, activation: linear}
inference:
  - name: mfvi
    kind: svi
    guide: {kind: mean_field}
    steps: 5
    ktied: {snr_steps: [2, 3]}
  - {name: map, kind: map, steps: 5}
  - name: nuts
    kind: nuts
    warmup: 5
    draws: 10
    chains: 2
    vectorize_chains: true
    gaussian_fit: {cov: empirical}
    kl_target_draws: 100
metrics:
  names: [accuracy]
  pruning: {draws: 7}
  product_matrix_draws: 40
"""


def test_a_spec_without_studies_records_none(tmp_path: Path) -> None:
    # no `studies:` key and `studies: []` mean the same: a sampler records no study
    spec = _load_warning_free(_write(tmp_path, BASE))
    assert spec.studies == [] and all(c.studies == [] for c in spec.cells())
    empty = _load_warning_free(_write(tmp_path, BASE + "studies: []\n", "empty.yaml"))
    assert spec == empty
    assert [c.cell_id for c in spec.cells()] == [c.cell_id for c in empty.cells()]
    one = _load_warning_free(
        _write(tmp_path, BASE + "studies:\n  - {kind: price_of_mean_field}\n", "one.yaml")
    )
    assert [c.cell_id for c in one.cells()][:2] == [c.cell_id for c in spec.cells()][:2]
    assert one.cells()[2].cell_id != spec.cells()[2].cell_id  # the sampler records it


def test_study_settings_outside_studies_are_unknown_keys(tmp_path: Path) -> None:
    # every one at its own position, all at once
    p = _write(tmp_path, OLD)
    msgs = _errors(p)
    assert [m.split(": ")[:2] for m in msgs] == [
        [f"{p}:9:5", "inference[0].ktied"],
        [f"{p}:17:5", "inference[2].gaussian_fit"],
        [f"{p}:18:5", "inference[2].kl_target_draws"],
        [f"{p}:21:3", "metrics.pruning"],
        [f"{p}:22:3", "metrics.product_matrix_draws"],
    ], msgs
    assert all("unknown key" in m for m in msgs), msgs
    # a key that belongs elsewhere says where, instead of a near miss ('ktied' -> 'kind')
    assert msgs[0].endswith("'ktied' is a kind of studies, not a key here"), msgs[0]
    assert msgs[1].endswith(
        "'gaussian_fit' is a key of studies of kind predictive or price_of_mean_field and a "
        "key of simulation of kind gaussian, not a key here"
    ), msgs[1]
    assert "a key of studies of kind price_of_mean_field, not a key here" in msgs[2]
    assert msgs[3].endswith("'pruning' is a kind of studies, not a key here"), msgs[3]
    assert msgs[4].endswith("allowed keys: names, ece_bins"), msgs[4]
    with pytest.raises(ValidationError, match="pruning"):
        Spec.model_validate(yaml.safe_load(BASE) | {"metrics": {"pruning": {}}})


def test_ood_holdout_class_needs_a_held_out_class_at_validation(tmp_path: Path) -> None:
    # found at validation, naming the study's field, not in a cell an hour later
    text = BASE + "studies:\n  - {kind: predictive, ood: holdout_class}\n"
    with pytest.raises(SpecError) as err:
        load_spec(_write(tmp_path, text))
    assert "studies[0].ood" in str(err.value) and "holdout_class" in str(err.value)
    assert "digits or idx data" in str(err.value)
    digits = text.replace("{kind: two_moons, n_train: 50}", "{kind: digits}")
    with pytest.raises(SpecError, match="data.holdout_class on this digits data"):
        load_spec(_write(tmp_path, digits))
    held = digits.replace("{kind: digits}", "{kind: digits, holdout_class: 9}")
    assert _load_warning_free(_write(tmp_path, held)).data.holdout_class == 9
