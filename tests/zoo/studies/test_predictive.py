"""The predictive study: OOD inputs, a Gaussian control, a tiny NUTS run end to end."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from reports.predictive import predictive_tv
from tests import specs
from zoo.execution.runner import run_spec
from zoo.inference.base import Fit
from zoo.inference.sampling import SampledPosterior
from zoo.spec.sections.studies import PredictiveStudy
from zoo.studies.predictive.probe import PredictiveProbe, log_predictive, ood_inputs


def test_far_inputs_lie_on_the_ring_and_noise_in_the_range():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(500, 2)) * [2.0, 0.5] + [1.0, -1.0]
    far = ood_inputs(x, "auto", 400, (3.0, 5.0), seed=1)
    scale = np.sqrt(np.mean(np.sum((x - x.mean(0)) ** 2, 1)))
    r = np.linalg.norm(far - x.mean(0), axis=1) / scale
    assert far.shape == (400, 2) and r.min() >= 3 - 1e-5 and r.max() <= 5 + 1e-5
    assert np.array_equal(far, ood_inputs(x, "far", 400, (3.0, 5.0), seed=1))  # seeded
    img = rng.uniform(-1, 1, size=(50, 64))
    noise = ood_inputs(img, "auto", 30, (3.0, 5.0), seed=1)  # > 10 features: noise
    assert noise.shape == (30, 64)
    assert (noise >= img.min(0) - 1e-6).all() and (noise <= img.max(0) + 1e-6).all()


CONTROL = specs.spec(
    "control",
    seed=3,
    data=specs.two_moons(n_train=50, n_test=300, noise=0.1),
    model=specs.mlp(depth=1, width=3),
    likelihood=specs.section("bernoulli"),
    inference=[specs.nuts(warmup=10, draws=2000, chains=2)],
    studies=[
        specs.study("predictive", draws=1000, ood_points=300, gaussian_fit={"cov": "empirical"})
    ],
)


def test_q_full_predicts_as_gaussian_draws_do_and_q_diag_does_not(tmp_path, cell_context):
    """Control: when the 'samples' ARE Gaussian, q_full's predictive is theirs up to MC error.

    The sampler is replaced by exact draws from a strongly correlated Gaussian N(m, S) over
    all 13 weights and biases (4000 draws), so the posterior is Gaussian by construction and
    q_full, fitted to 4000 draws in 13 dimensions, is nearly exact. pred_tv_qfull is then a
    TV between two independent 1000-draw mixtures of (almost) the same Gaussian, as is the
    TV computed here between two more sets of exact draws: its expected value is the
    probe's own floor pred_tv_floor_qfull (reports.tv_floor, from the draws' variances), and
    its spread over 300 points is ~10% of it, so 1.5 x floor is a tolerance a bug in the
    fit, the site order or the draws would break, while q_diag, the same fit without
    correlations, lies above twice its own floor (so the check has power). The draws are
    independent, so the samples' inflation measured from their halves is about 1.
    """
    spec = specs.load(tmp_path, CONTROL)
    cell = spec.cells()[0]
    ctx = cell_context(cell)
    shapes = {
        "layer0.weight": (3, 2),
        "layer0.bias": (3,),
        "layer1.weight": (1, 3),
        "layer1.bias": (1,),
    }
    assert [n for pair in ctx.model.layer_sites() for n in pair] == list(shapes)
    dim = sum(int(np.prod(s)) for s in shapes.values())
    rng = np.random.default_rng(0)
    a = rng.normal(size=(dim, dim))
    corr = 0.1 * np.eye(dim) + a @ a.T / dim  # strongly correlated
    sd = 1.5 / np.sqrt(np.diag(corr))
    cov = corr * np.outer(sd, sd)
    mean = rng.normal(size=dim)
    chol = np.linalg.cholesky(cov)

    def exact(n: int) -> dict[str, np.ndarray]:
        flat = mean + rng.standard_normal((n, dim)) @ chol.T
        out, i = {}, 0
        for name, shape in shapes.items():
            k = int(np.prod(shape))
            out[name] = flat[:, i : i + k].reshape((2, n // 2, *shape)).astype(np.float32)
            i += k
        return out

    section = next(s for s in spec.studies if isinstance(s, PredictiveStudy))
    res, _ = PredictiveProbe(section, ctx).finish(Fit(SampledPosterior(exact(4000)), 0.0))
    # an independent floor: two more sets of exact draws, as many as the study uses
    x = ctx.data.x_test
    p1, p2 = (
        np.exp(
            log_predictive(
                ctx.model,
                x,
                {
                    k: ctx.runtime.tensor(v.reshape(-1, *v.shape[2:]))
                    for k, v in exact(1000).items()
                },
            )
        )
        for _ in range(2)
    )
    floor = predictive_tv(p1, p2)
    assert res["pred_tv_floor_qfull"] == pytest.approx(floor, rel=0.25)
    for sfx in ("", "_ood"):
        assert res[f"pred_tv_qfull{sfx}"] < 1.5 * res[f"pred_tv_floor_qfull{sfx}"], res
        assert res[f"pred_tv_qdiag{sfx}"] > 2 * res[f"pred_tv_floor_qdiag{sfx}"], res
        assert 0.6 < res[f"pred_tv_inflation{sfx}"] < 1.6, res
    assert res["pred_tv_qfull"] < 1.5 * floor
    # the samples' halves (500 draws each): about sqrt(2) x the floor of 1000 draws
    assert 1.0 * floor < res["pred_tv_split"] < 2.0 * floor, (res["pred_tv_split"], floor)
    assert res["pred_agree_qfull"] > 0.95
    assert abs(res["nll_qfull"] - res["nll_samples"]) < 0.05
    assert "pred_tv_mfvi" not in res  # the chains started from the prior: no MF-VI


SPEC = specs.spec(
    "predictive",
    seed=0,
    data=specs.two_moons(n_train=60, n_test=40, noise=0.1),
    model=specs.mlp(depth=1, width=3),
    likelihood=specs.section("bernoulli"),
    inference=[
        specs.svi("mfvi", steps=40, batch_size=30, predictive_samples=3),
        specs.nuts(
            warmup=20,
            draws=20,
            chains=2,
            vectorize_chains=True,
            max_tree_depth=3,
            init_from="mfvi",
            predictive_draws=10,
        ),
    ],
    studies=[specs.study("predictive", draws=30, ood_points=50)],
    sweep={"model.depth": [0, 1]},
    report={"x": "model.depth", "figures": ["accuracy"]},
)


def test_a_tiny_nuts_run_writes_the_predictive_metrics(tmp_path: Path):
    spec = specs.load(tmp_path, SPEC)
    out = run_spec(spec, tmp_path / "run", workers=1, progress=False, log=lambda m: None)
    res = pd.read_csv(tmp_path / "run" / "results.csv")
    assert out.n_failed == 0, res["error"].tolist()
    nuts = res[res["method"] == "nuts"]
    assert len(nuts) == 2 and res[res["method"] == "mfvi"]["pred_tv_qfull"].isna().all()
    for q in ("qdiag", "qfull", "qmarg", "mfvi"):
        for sfx in ("", "_ood"):
            for m in ("tv", "agree", "kl", "entropy"):
                col = f"pred_{m}_{q}{sfx}"
                assert col in nuts.columns and nuts[col].notna().all(), col
            assert nuts[f"pred_tv_{q}{sfx}"].between(0, 1).all()
            assert (nuts[f"pred_kl_{q}{sfx}"] >= 0).all()
        for m in ("nll", "ece"):
            assert nuts[f"{m}_{q}"].notna().all() and f"{m}_{q}_ood" not in nuts.columns
    assert (nuts["pred_ood_kind"] == "far").all()
    assert nuts["nll_samples"].notna().all() and nuts["pred_entropy_samples_ood"].notna().all()
    for col in ("pred_tv_split", "pred_tv_split_ood"):
        assert nuts[col].between(0, 1).all(), col
    for q in ("qdiag", "qfull", "qmarg", "mfvi"):
        for sfx in ("", "_ood"):
            assert nuts[f"pred_tv_floor_{q}{sfx}"].between(0, 1).all(), (q, sfx)
    assert (nuts["pred_tv_inflation"] > 0).all()
    report = (tmp_path / "run" / "report.md").read_text()
    assert "The price of mean field in predictions" in report
    # the tiny chains are graded failed: left out of every mean (no line to draw) and counted
    graded = nuts["reference_grade"].eq("failed")
    assert (tmp_path / "run" / "figures" / "predictive_tv.png").exists() != graded.all()
    assert ("| failed left out" in report or "1 failed left out" in report) == graded.any()


DIGITS = specs.spec(
    "digits_ood",
    seed=0,
    data=specs.digits(holdout_class=9),
    model=specs.mlp(depth=1, width=2),
    likelihood=specs.section("categorical"),
    inference=[
        specs.svi("mfvi", steps=30, batch_size=200, predictive_samples=3),
        specs.nuts(
            warmup=10,
            draws=10,
            chains=2,
            vectorize_chains=True,
            max_tree_depth=2,
            init_from="mfvi",
            predictive_draws=5,
        ),
    ],
    studies=[specs.study("predictive", draws=10, ood_points=40)],
    report={"x": "model.depth", "figures": ["accuracy"]},
)


def test_digits_with_a_held_out_class_measures_it_and_noise_images(tmp_path: Path):
    """ood: auto on digits without digit 9: the 9s are the first OOD set, noise the second."""
    spec = specs.load(tmp_path, DIGITS)
    out = run_spec(spec, tmp_path / "run", workers=1, progress=False, log=lambda m: None)
    res = pd.read_csv(tmp_path / "run" / "results.csv")
    assert out.n_failed == 0, res["error"].tolist()
    nuts = res[res["method"] == "nuts"].iloc[0]
    assert nuts["pred_ood_kind"] == "holdout_class"
    assert nuts["pred_ood_kinds"] == "holdout_class,noise"
    for q in ("qdiag", "qfull", "qmarg", "mfvi"):
        for sfx in ("", "_ood", "_ood_noise"):
            assert 0 <= nuts[f"pred_tv_{q}{sfx}"] <= 1 and 0 <= nuts[f"pred_agree_{q}{sfx}"] <= 1
    assert 0 <= nuts["pred_tv_split_ood_noise"] <= 1
    assert "pred_tv_qfull_ood_holdout_class" not in res.columns  # the first kind is _ood
    report = (tmp_path / "run" / "report.md").read_text()
    assert "TV q_full (OOD holdout_class)" in report and "TV q_full (OOD noise)" in report
    assert "agree q_diag (OOD noise)" in report


def test_holdout_class_images_are_the_first_ood_points():
    x = np.arange(12, dtype=np.float32).reshape(6, 2)
    held = np.full((5, 2), 7.0)
    out = ood_inputs(x, "holdout_class", 3, (3.0, 5.0), seed=0, x_held_out=held)
    assert out.shape == (3, 2) and (out == 7).all() and out.dtype == np.float32
    with pytest.raises(ValueError, match="held-out class"):
        ood_inputs(x, "holdout_class", 3, (3.0, 5.0), seed=0)


def test_the_report_keeps_other_swept_axes_apart():
    """A depth x width grid: one row per (width, depth), not widths averaged together."""
    from types import SimpleNamespace

    from zoo.studies.predictive.report import predictive_sections

    rows = pd.DataFrame(
        [
            {
                "method": "nuts",
                "seed": s,
                "model.depth": d,
                "model.width": w,
                "status": "ok",
                "pred_ood_kind": "far",
                "pred_tv_floor_qdiag": 0.01,
                "pred_tv_split": 0.02,
                **{
                    f"pred_{m}_{q}{sfx}": 0.1 * w + 0.01 * d + 0.001 * s
                    for m in ("tv", "agree")
                    for q in ("qdiag", "qfull")
                    for sfx in ("", "_ood")
                },
            }
            for d in (1, 3)
            for w in (4, 8)
            for s in (0, 1)
        ]
    )
    spec = SimpleNamespace(
        report=SimpleNamespace(x="model.depth"),
        sweep={"model.depth": [1, 3], "model.width": [4, 8], "seed": [0, 1]},
    )
    (section,) = predictive_sections(rows, None, spec)
    header, body = section.tables[0]
    assert header[:3] == ["method", "model.width", "model.depth"] and len(body) == 4
    row = next(r for r in body if r[1] == "8" and r[2] == "3")
    assert row[-1] == "2"  # the mean over the 2 seeds of one cell, not over widths
    # the 95% t half-width of 2 seeds (0.830, 0.831): 12.71 x 0.0005 = 0.0064
    assert row[3] == "0.8305 ± 0.0064"
    assert header[4] == "its floor" and row[4] == "0.01 ± 0"  # q_diag's own floor beside it
    assert "TV q_diag (OOD far)" in header
    agree_header, agree_body = section.tables[1]
    assert agree_header[3] == "agree q_diag" and len(agree_body) == 4


def _two_places(ctx, rng, n: int, shift: float, within: bool = False) -> dict[str, np.ndarray]:
    """Exact Gaussian draws ``(2, n, *shape)`` of the CONTROL net in two places: the second
    is the first's Gaussian moved by ``shift`` standard deviations in a random direction.
    Chain 1 holds the second place (chains apart), or with ``within`` every other draw of
    both chains does (each chain a mixture of the two places)."""
    shapes = {"layer0.weight": (3, 2), "layer0.bias": (3,), "layer1.weight": (1, 3)}
    shapes["layer1.bias"] = (1,)
    assert [n_ for pair in ctx.model.layer_sites() for n_ in pair] == list(shapes)
    dim = sum(int(np.prod(s)) for s in shapes.values())
    a = rng.normal(size=(dim, dim))
    cov = 0.1 * np.eye(dim) + a @ a.T / dim
    mean = rng.normal(size=dim)
    move = rng.normal(size=dim)
    move *= shift * np.sqrt(move @ cov @ move) / (move @ move)
    flat = mean + rng.standard_normal((2, n, dim)) @ np.linalg.cholesky(cov).T
    if within:
        flat[:, 1::2] += move
    else:
        flat[1] += move
    out, i = {}, 0
    for name, shape in shapes.items():
        k = int(np.prod(shape))
        out[name] = flat[:, :, i : i + k].reshape((2, n, *shape)).astype(np.float32)
        i += k
    return out


def _per_chain(tmp_path, cell_context, make, **update) -> tuple[dict, dict]:
    """The CONTROL spec's predictive metrics of the draws ``make(ctx)``, with per_chain off
    and on (2 chains); ``update`` changes the study's other fields."""
    spec = specs.load(tmp_path, CONTROL)
    ctx = cell_context(spec.cells()[0])
    section = next(s for s in spec.studies if isinstance(s, PredictiveStudy))
    section = section.model_copy(update=update)
    off, _ = PredictiveProbe(section, ctx).finish(Fit(SampledPosterior(make(ctx)), 0.0))
    section = section.model_copy(update={"per_chain": 2})
    on, _ = PredictiveProbe(section, ctx).finish(Fit(SampledPosterior(make(ctx)), 0.0))
    return off, on


def test_per_chain_q_full_predicts_as_its_chain_when_each_chain_is_gaussian(tmp_path, cell_context):
    """The pooling control (per_chain): two chains of exact Gaussian draws in two places.

    Each chain alone is Gaussian, so the Gaussian fitted to it (4000 draws in 13
    dimensions) predicts as its draws do up to Monte Carlo error: pred_tv_qchain within
    twice its floor. The floor is looser here than for the pooled control above: the
    median of two chains' TVs, each to a Gaussian fitted to the very draws it is compared
    with, spread from 0.45 to 1.38 times the floor over seeds 1-6 of this construction.
    Turning per_chain on moves no other number (its own stream).
    """
    off, on = _per_chain(
        tmp_path, cell_context, lambda ctx: _two_places(ctx, np.random.default_rng(1), 4000, 8.0)
    )
    for sfx in ("", "_ood"):
        assert on[f"pred_tv_qchain{sfx}"] < 2 * on[f"pred_tv_floor_qchain{sfx}"], on
    assert on["pred_agree_qchain"] > 0.95
    assert {k: v for k, v in on.items() if "qchain" not in k} == off
    assert not any("qchain" in k for k in off)


def test_per_chain_q_full_fails_where_each_chain_is_not_gaussian(tmp_path, cell_context):
    """Power: every chain a mixture of two places 16 standard deviations apart. A Gaussian
    fitted to one chain then spans both and the gap, and predicts unlike the chain's draws:
    pred_tv_qchain above twice its floor (3.4 and 6.7 times it at this seed; how far a
    random direction moves the predictions varies, from 1.2 to 8.7 times over seeds 1-6)."""
    _, on = _per_chain(
        tmp_path,
        cell_context,
        lambda ctx: _two_places(ctx, np.random.default_rng(1), 4000, 16.0, within=True),
    )
    for sfx in ("", "_ood"):
        assert on[f"pred_tv_qchain{sfx}"] > 2 * on[f"pred_tv_floor_qchain{sfx}"], on


def test_per_chain_says_why_when_a_chain_is_shorter_than_the_weights(tmp_path, cell_context):
    _, res = _per_chain(
        tmp_path,
        cell_context,
        lambda ctx: _two_places(ctx, np.random.default_rng(2), 10, 1.0),  # 10 draws, 13 weights
        draws=10,
    )
    assert "10 held draws per chain <= 13 weights" in res["pred_qchain_skipped"]
    assert "pred_tv_qchain" not in res and "pred_tv_qfull" in res
