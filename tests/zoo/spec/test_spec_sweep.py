"""Cell ids: a hash of the configuration without defaults and SPEC_VERSION; the old rule."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

import zoo.spec.sweep as sweep
from tests.zoo.spec._helpers import GOOD as _GOOD
from zoo.spec import SPEC_VERSION, cell_id, legacy_cell_id, load_spec
from zoo.spec.sweep import MAX_SLUG

GOOD = _GOOD.replace("seed: [0, 1, 2]", "seed: [0, 1]")


def _ids(tmp_path: Path, text: str, overrides=()) -> list[str]:
    p = tmp_path / "s.yaml"
    p.write_text(text)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return [c.cell_id for c in load_spec(p, overrides).cells()]


def test_defaults_written_out_leave_ids_unchanged(tmp_path: Path) -> None:
    a = _ids(tmp_path, GOOD)
    explicit = GOOD.replace(
        "guide: {kind: mean_field}",
        "guide: {kind: mean_field, init_scale: 0.001, init_loc: he, local_reparam: false}\n"
        "    lr: 0.01\n    betas: [0.9, 0.999]\n    kl_weight: 1.0\n    scale_lr: null",
    ) + (
        "seed: 0\nprior: {kind: normal, scale: 1.0, bias: null}\nlikelihood: {kind: categorical}\n"
        "metrics: {ece_bins: 15, names: null}\nstudies: []\n"
        "runtime: {device: cpu, dtype: float32, threads: null}\n"
    )
    assert _ids(tmp_path, explicit) == a


def test_what_changes_the_numbers_changes_the_ids(tmp_path: Path) -> None:
    a = _ids(tmp_path, GOOD)
    for override in ["data.noise=0.2", "runtime.dtype=float64", "inference.mfvi.lr=0.1",
                     "metrics.ece_bins=10"]:  # fmt: skip
        b = _ids(tmp_path, GOOD, [override])
        assert not set(a) & set(b), override
    # the device, the threads, the name and the report layout do not
    same = ["runtime.device=cuda", "runtime.threads=2", "name=u", "report.figures=[nll]"]
    assert _ids(tmp_path, GOOD, same) == a


def test_studies_enter_the_ids_of_their_methods_only(tmp_path: Path) -> None:
    text = GOOD.replace("sweep:", "  - {name: kt, kind: svi, guide: {kind: k_tied}, steps: 10}\n"
                        "sweep:")  # fmt: skip
    base = dict(zip(_ids(tmp_path, text), _ids(tmp_path, text), strict=True))
    with_study = _ids(tmp_path, text + "studies:\n  - {kind: ktied, methods: [kt]}\n")
    assert {i for i in with_study if i.startswith("mfvi")} == {i for i in base if
                                                              i.startswith("mfvi")}  # fmt: skip
    assert not {i for i in with_study if i.startswith("kt")} & set(base)
    # the study's methods list is bookkeeping, not configuration
    all_svi = _ids(tmp_path, text + "studies:\n  - {kind: ktied, methods: [kt, mfvi]}\n")
    every = _ids(tmp_path, text + "studies:\n  - {kind: ktied}\n")
    assert all_svi == every


def test_spec_version_enters_the_hash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a = _ids(tmp_path, GOOD)
    monkeypatch.setattr(sweep, "SPEC_VERSION", SPEC_VERSION + 1)
    b = _ids(tmp_path, GOOD)
    assert [i.rsplit("_", 1)[0] for i in a] == [i.rsplit("_", 1)[0] for i in b]
    assert not set(a) & set(b)


def test_id_shape_and_length_bound(tmp_path: Path) -> None:
    ids = _ids(tmp_path, GOOD)
    assert ids[0].startswith("mfvi_depth=1_seed=0_") and len(ids[0].rsplit("_", 1)[1]) == 12
    long = GOOD.replace("  seed: [0, 1]", "  seed: [0, 1]\n  data.noise: [0.1234567890123, "
                        "0.2234567890123]\n  inference.mfvi.guide.init_scale: [0.00123456789, "
                        "0.00223456789]\n  inference.mfvi.kl_warmup_steps: [1000000000, "
                        "2000000000]")  # fmt: skip
    ids = _ids(tmp_path, long)
    assert len(ids) == 2 * 2 * 2 * 2 * 2 and len(set(ids)) == len(ids)
    assert max(len(i) for i in ids) == MAX_SLUG + 1 + 12
    assert all(i.rsplit("_", 1)[0] == i[:MAX_SLUG] for i in ids)
    assert cell_id({}, {"method": "x" * 500}) == "x" * MAX_SLUG + "_" + cell_id({}, {
        "method": "x" * 500}).rsplit("_", 1)[1]  # fmt: skip


# computed with the code of commit 6b1521c (zoo/spec/schema.py _cell_id) before the change
LEGACY_CONFIG = json.loads("""{"data": {"kind": "two_moons", "n_test": 1000, "n_train": 100,
 "noise": 0.1, "seed": null}, "likelihood": {"kind": "categorical"}, "method": {"batch_size":
 null, "betas": [0.9, 0.999], "closed_form_kl": true, "epochs": null, "guide": {"init_loc":
 "he", "init_scale": 0.001, "kind": "mean_field", "local_reparam": false, "scale_transform":
 "softplus"}, "kind": "svi", "kl_warmup_every": 1, "kl_warmup_steps": 0, "kl_weight": 1.0,
 "ktied": null, "lr": 0.01, "lr_decay": 1.0, "name": "mfvi", "num_particles": 1,
 "predictive_samples": 100, "pretrain_epochs": 0, "save_draws": true, "steps": 10}, "metrics":
 {"ece_bins": 15, "names": null, "product_matrix_draws": null, "pruning": null}, "model":
 {"activation": "relu", "depth": 1, "kind": "mlp", "negative_slope": 0.01, "param_budget":
 null, "width": 8}, "prior": {"bias": null, "kind": "normal", "scale": 1.0}, "seed": 0,
 "simulation": null}""")


def test_legacy_cell_id_reproduces_the_old_rule() -> None:
    axes = {"model.depth": 1, "seed": 0, "method": "mfvi"}
    assert legacy_cell_id(LEGACY_CONFIG, axes) == "mfvi_depth=1_seed=0_63585bcfe2"
    axes = {"inference.kt.guide.rank": 2, "data.noise": 0.2, "data.path": "a b/c", "method": "kt"}
    cfg = {"a": 1, "b": [1.5, None, "x/y"]}
    assert legacy_cell_id(cfg, axes) == "kt_rank=2_noise=0.2_path=a-b-c_9d35ecb7aa"
