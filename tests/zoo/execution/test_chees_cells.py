"""ChEES cells end to end: MF-VI, then ChEES-HMC from it, with the price of mean field.

One tiny run through the real runner, in this process (``--workers 1``): the cell's stored
metrics exist and are finite, the draws it streamed are more than the draws it holds, and
its ArviZ file holds the kept draws (chains x keep_draws) with matching sampler statistics.
``zoo validate`` refuses bad chees settings with exit 2 and a message naming the field.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr

from tests import specs
from zoo.cli import main

CHAINS, KEEP = 16, 10

MFVI = specs.svi("mfvi", steps=150, lr=0.05, predictive_samples=5)
#: The ChEES method's fields, and the price-of-mean-field study that records it.
CHEES = {
    "init_from": "mfvi",
    "warmup": 60,
    "draws": 30,
    "chains": CHAINS,
    "keep_draws": KEEP,
    "stream_groups": 4,
    "target_ess": 400,
    "max_leapfrog": 64,
    "predictive_draws": 20,
}
PRICE = specs.study("price_of_mean_field", gaussian_fit={"cov": "empirical"})
SPEC = specs.spec(
    "chees_cell",
    seed=0,
    data=specs.two_moons(n_train=60, n_test=40, noise=0.1),
    model=specs.mlp(depth=1, width=3, activation="tanh"),
    inference=[MFVI, specs.chees(**CHEES)],
    studies=[PRICE],
)


@pytest.fixture(scope="module")
def chees_run(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("chees")
    specs.write_spec(root, SPEC, file="spec.yaml")
    out = root / "run"
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(
            ["run", str(root / "spec.yaml"), "--out", str(out), "--no-progress", "--workers", "1"]
        )
    assert code == 0, err.getvalue()
    return out


def _record(out: Path, method: str) -> dict:
    recs = [json.loads(p.read_text()) for p in sorted((out / "cells").glob("*.json"))]
    (rec,) = [r for r in recs if r["axes"]["method"] == method]
    return rec


def test_chees_cell_metrics_exist_and_are_finite(chees_run: Path) -> None:
    rec = _record(chees_run, "chees")
    assert rec["status"] == "ok", rec.get("error")
    assert "nonfinite" not in rec
    m = rec["metrics"]
    for key in (
        "accuracy",
        "nll",
        "kl_diag_full",
        "w2_diag_full",
        "kl_null",
        "min_ess_bulk",
        "max_r_hat",
        "step_size",
        "trajectory_length",
        "warmup_seconds",
        "n_eff",
        "agreement_vi",
        "tv_vi",
    ):
        assert key in m and m[key] is not None and np.isfinite(m[key]), key
    # drawn from 30 to the cap (4 x 30) by the ESS rule; KEEP / 2 to KEEP held per chain
    assert 30 <= m["draws_per_chain"] <= 120 and KEEP // 2 <= m["kept_per_chain"] <= KEEP
    assert m["n_eff"] > 0 and m["kl_diag_full"] >= 0
    # the adapted T against its cap of max_leapfrog steps (a gold gate, reports.grade)
    at_cap = m["trajectory_length"] / m["step_size"] >= CHEES["max_leapfrog"] * (1 - 1e-9)
    assert m["trajectory_at_cap"] == float(at_cap)
    assert not [k for k, v in m.items() if isinstance(v, float) and not np.isfinite(v)]
    res = pd.read_csv(chees_run / "results.csv")
    assert set(res["status"]) == {"ok"} and len(res) == 2


def test_chees_arviz_file_holds_the_kept_draws(chees_run: Path) -> None:
    rec = _record(chees_run, "chees")
    kept = rec["metrics"]["kept_per_chain"]
    dt = xr.open_datatree(chees_run / "cells" / f"{rec['cell_id']}.nc")
    try:
        post, stats = dt["posterior"], dt["sample_stats"]
        assert (post.sizes["chain"], post.sizes["draw"]) == (CHAINS, kept)
        assert (stats.sizes["chain"], stats.sizes["draw"]) == (CHAINS, kept)
        assert {"lp", "step_size", "n_steps", "diverging"} <= set(stats.data_vars)
        for group in ("log_likelihood", "posterior_predictive", "predictions"):
            assert (dt[group].sizes["chain"], dt[group].sizes["draw"]) == (CHAINS, kept), group
        assert dt.attrs["inference_kind"] == "chees"
        assert np.isfinite(post["layer0.weight"].values).all()
    finally:
        dt.close()


def test_chees_report_is_written(chees_run: Path) -> None:
    md = (chees_run / "report.md").read_text()
    assert "chees" in md


def test_validate_refuses_bad_chees_settings_with_exit_2(tmp_path: Path) -> None:
    price = {**PRICE, "kl_target_draws": 100}
    vectorized = specs.chees(**CHEES, vectorize_chains=True)
    bad = {**SPEC, "inference": [MFVI, vectorized], "studies": [price]}
    p = specs.write_spec(tmp_path, bad, file="bad.yaml")
    r = subprocess.run(
        [sys.executable, "-m", "zoo.cli", "validate", str(p)], capture_output=True, text=True
    )
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "vectorize_chains: chees always runs its chains as one batch" in r.stderr
    specs.write_spec(p, {**SPEC, "studies": [price]})
    r = subprocess.run(
        [sys.executable, "-m", "zoo.cli", "validate", str(p)], capture_output=True, text=True
    )
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "studies[0].kl_target_draws" in r.stderr and "target_ess" in r.stderr


def test_the_archive_holds_evenly_spaced_chains_when_all_would_not_fit() -> None:
    import numpy as np

    from zoo.execution.evaluate import ARCHIVE_MAX_VALUES, archived_chains
    from zoo.inference import SampledPosterior

    many = SampledPosterior({"w": np.zeros((1000, 10, 3))})
    keep = archived_chains(many, 11_000)
    assert keep is not None and keep[0] == 0 and keep[-1] == 999
    assert len(keep) * 10 * 11_000 <= ARCHIVE_MAX_VALUES < (len(keep) + 1) * 10 * 11_000
    assert np.all(np.diff(keep) > 0)
    assert archived_chains(SampledPosterior({"w": np.zeros((16, 100, 3))}), 1_500) is None
    huge = archived_chains(SampledPosterior({"w": np.zeros((8, 10**6, 1))}), 10**4)
    assert huge is not None and len(huge) == 2  # never fewer than two chains (R-hat)


@pytest.mark.slow
@pytest.mark.skipif(
    shutil.which("c++") is None and shutil.which("g++") is None,
    reason="no C++ compiler: inductor cannot build CPU code",
)
def test_a_compiled_chees_cell_runs_and_times_its_compilation(tmp_path: Path) -> None:
    # the price of mean field at its defaults, as a sampler spec without studies had it
    compiled = specs.chees(**CHEES, compile=True)
    spec = {**SPEC, "inference": [MFVI, compiled], "studies": [specs.study("price_of_mean_field")]}
    specs.write_spec(tmp_path, spec, file="spec.yaml")
    out = tmp_path / "run"
    code = main(
        ["run", str(tmp_path / "spec.yaml"), "--out", str(out), "--no-progress", "--workers", "1"]
    )
    assert code == 0
    m = _record(out, "chees")["metrics"]
    assert m["compile_seconds"] > 0 and np.isfinite(m["max_r_hat_pred"])
    assert 30 <= m["draws_per_chain"] <= 120


def test_trajectory_at_cap_reads_the_adapted_length_in_steps() -> None:
    """T / epsilon at the cap is 1.0 up to rounding (T is clipped to max_leapfrog *
    epsilon: 1.0020947312785187 / 0.003914432544056714 is 255.99999999999994 in a
    measured Boston cell); below it 0.0; MAMS's chains each their own L / epsilon (the
    fraction at the cap); samplers without a cap or an adapted length record nothing."""
    from zoo.inference.sampling import trajectory_at_cap

    steps = np.full(4, 1.0020947312785187 / 0.003914432544056714)
    assert trajectory_at_cap(steps, 256) == 1.0
    assert trajectory_at_cap(np.full(4, 0.5 / 0.003914432544056714), 256) == 0.0
    assert trajectory_at_cap(np.array([3.0, 9.0, 12.0, 1.0]), 9) == 0.5
    assert trajectory_at_cap(steps, None) is None and trajectory_at_cap(None, 256) is None
