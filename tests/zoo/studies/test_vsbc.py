"""The VSBC study (zoo.studies.vsbc): a cell's refits on data simulated from its prior."""

from __future__ import annotations

import io
import random
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from tests import specs
from zoo.inference import fit
from zoo.spec.load import SpecError
from zoo.studies.vsbc import ARTIFACT, STUDY, vsbc_sections

R = 3


def _cell(tmp_path: Path, **study):
    spec = specs.load(
        tmp_path,
        name="vsbc",
        seed=3,
        data=specs.teacher(n_train=20, n_test=10, in_dim=2, width=3, noise=0.5),
        model=specs.mlp(depth=0),
        likelihood={"kind": "gaussian", "noise": 0.5},
        inference=[specs.svi("mf", steps=10, guide={"kind": "mean_field", "init_scale": 0.3})],
        studies=[specs.study("vsbc", replications=R, **study)],
    )
    (cell,) = spec.cells()
    return spec, cell


def _finish(spec, cell, ctx):
    """The cell's fit, then the probe: its outputs and whether every generator (torch,
    NumPy, Python) is where the probe found it."""
    res = fit(cell.method, ctx.model, ctx.data, seed=cell.spec.seed, runtime=ctx.runtime)
    torch.manual_seed(9), np.random.seed(9), random.seed(9)
    out = STUDY.probe(cell.studies[0], ctx).finish(res)
    states = torch.rand(1).item(), np.random.rand(), random.random()
    torch.manual_seed(9), np.random.seed(9), random.seed(9)
    return out, states == (torch.rand(1).item(), np.random.rand(), random.random())


def test_the_probe_records_shares_and_p_values_and_leaves_the_generators_alone(
    tmp_path, cell_context
):
    spec, cell = _cell(tmp_path, steps=10)
    ctx = cell_context(cell)
    (metrics, files), untouched = _finish(spec, cell, ctx)
    assert untouched  # the refits reseed all three; the probe restores them
    assert _finish(spec, cell, ctx)[0][0] == metrics  # seeded: the same numbers twice
    assert set(metrics) == {"vsbc_asym_frac", "vsbc_nonuniform_frac"}
    assert all(0.0 <= v <= 1.0 for v in metrics.values())
    with np.load(io.BytesIO(files[ARTIFACT])) as f:
        p = {k: f[k] for k in f.files}
    assert p["layer0.weight"].shape == (R, 1, 2) and p["layer0.bias"].shape == (R, 1)
    assert ((p["layer0.weight"] >= 0) & (p["layer0.weight"] <= 1)).all()
    assert len(np.unique(p["layer0.bias"])) == R  # every replication its own data


def test_the_report_draws_the_histograms(tmp_path, cell_context):
    spec, cell = _cell(tmp_path, steps=5)
    (metrics, files), _ = _finish(spec, cell, cell_context(cell))

    class Run:
        def read_artifact(self, cell_id, suffix):
            return files.get(suffix) if cell_id == cell.cell_id else None

    results = pd.DataFrame(
        [{"cell_id": cell.cell_id, "method": "mf", "seed": 3, "status": "ok", **metrics}]
    )
    (sec,) = vsbc_sections(results, Run(), spec)
    assert sec.title.startswith("Variational simulation-based calibration")
    assert any(getattr(b, "path", "") == "figures/vsbc_pvalues.png" for b in sec.blocks)
    assert vsbc_sections(results.drop(columns="vsbc_nonuniform_frac"), Run(), spec) == []


def test_a_teacher_initialized_method_is_refused(tmp_path):
    data = specs.teacher(n_train=20, n_test=10, in_dim=1, width=3)
    with pytest.raises(SpecError, match=r"guide\.init_loc.*no teacher"):
        specs.load(
            tmp_path,
            data=data,
            model=specs.mlp(depth=1, width=3, activation="tanh"),
            inference=[
                specs.svi("mf", steps=5, guide={"kind": "mean_field", "init_loc": "teacher"})
            ],
            studies=[specs.study("vsbc")],
        )
