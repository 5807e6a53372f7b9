"""The report of a run directory (zoo.execution.report): axes, settings as run, gates, NaN metrics.

One tiny sampled run (two seeds, MF-VI and NUTS with a small tree-depth limit, the price of
mean field) is shared by the end-to-end tests; the sampler section is also checked on
hand-made ArviZ files whose diagnostics are known: their records say what the cell measured,
the files are read only for the trace plots of the worst cells.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr
from arviz_base import from_dict

from reports.diagnostics import diagnostic_gates
from reports.document import Figure, figure_path
from reports.figures.diagnostics import arviz_plots
from reports.sampler_report import sampler_advice, sampler_record
from tests import specs
from zoo.cli import main
from zoo.execution.report import build_report
from zoo.execution.report_sampler import read_diagnostic_groups, sampler_section
from zoo.spec.load import load_spec


def _spec(seeds=(0, 1), chains: int = 2) -> dict:
    """The shared run's spec; the sampler-section tests add seeds and chains."""
    return specs.spec(
        "seeds_only",
        description="Two moons, the price of mean field (3 seeds).",
        seed=0,
        data=specs.two_moons(n_train=60, n_test=50, noise=0.1),
        model=specs.mlp(depth=1, width=3),
        inference=[
            specs.svi("mfvi", steps=20, predictive_samples=5),
            specs.nuts(
                init_from="mfvi",
                warmup=20,
                draws=10,
                chains=chains,
                vectorize_chains=True,
                max_tree_depth=2,
                predictive_draws=10,
            ),
        ],
        studies=[
            specs.study(
                "price_of_mean_field",
                gaussian_fit={"cov": "empirical"},
                kl_target_draws=100000,
                max_draws=35,
            )
        ],
        sweep={"seed": list(seeds)},
        report={"x": "method", "figures": ["kl_diag_full", "w_error"]},
    )


@pytest.fixture(scope="module")
def sampled_run(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("seeds_only")
    spec = specs.write_spec(root, _spec(), file="spec.yaml")
    out = root / "run"
    assert main(["run", str(spec), "--out", str(out), "--no-progress", "--workers", "1"]) == 0
    return spec, out


def test_a_seed_only_sweep_reports_with_any_categorical_x(sampled_run, capsys) -> None:
    spec, out = sampled_run
    # seed is a sweep axis: validate takes it as the x axis
    assert main(["validate", str(spec), "--set", "report.x=seed"]) == 0
    assert main(["validate", str(spec), "--set", "report.x=sed"]) == 2
    assert "choose one of: method, seed" in capsys.readouterr().err
    # x: method, a categorical axis, in the run's own report and in `zoo report DIR`
    for f in ("kl_diag_full_vs_method.png", "w_error_vs_method.png"):
        assert (out / "figures" / f).is_file(), f
    # the study's own figures average only cells not graded failed: here there is none
    assert not (out / "figures" / "kl_null.png").exists()
    assert not (out / "figures" / "w2_closed_form.png").exists()
    assert main(["report", str(out)]) == 0
    # zoo report lists the sampled cells per grade, and what kept each from the next one
    printed = capsys.readouterr().out
    assert "grades of 2 sampled cells: failed 2\n" in printed
    assert ": not bronze: r_hat_pred, ess_bulk_pred" in printed
    md = (out / "report.md").read_text()
    assert md.startswith("# bnn-zoo report: seeds_only\n\n**KL(q_diag ‖ q_full) [nats]: ")
    # the tiny NUTS cells (2 chains of 35 draws) are graded failed: no mean, said so
    assert "no value: the 2 sampled cells behind it were graded failed" in md.split("\n")[2]
    # x: seed shows single cells; the headline still gives the means over seeds
    files = build_report(out, load_spec(spec, ["report={x: seed, figures: [accuracy]}"]))
    assert "figures/accuracy_vs_seed.png" in files
    assert "(mean ± 95% t-interval over 2 seeds)" in (out / "report.md").read_text()
    # the default x (model.depth, not a column here) falls back to a real column
    default = load_spec(spec, ["report={figures: [accuracy]}"])
    assert default.report.x == "model.depth"
    assert "figures/accuracy_vs_method.png" in build_report(out, default)


def test_the_report_describes_the_spec_as_run(sampled_run) -> None:
    spec, out = sampled_run
    args = [
        "run",
        str(spec),
        "--out",
        str(out),
        "--no-progress",
        "--workers",
        "1",
        "--set",
        "sweep.seed=[0]",
        "--set",
        "data.n_train=40",
    ]
    assert main(args) == 0
    md = (out / "report.md").read_text()
    settings = md.split("## Settings of this run")[1].split("##")[0]
    assert "- Data: two_moons, n_train 40, n_test 50, noise 0.1" in settings
    assert "- Seeds: 0 (1 seed); 2 method(s); 2 cells." in settings
    assert "Method nuts: nuts, warmup 20, draws 10, chains 2" in settings
    assert "max_tree_depth 2" in settings
    # the shipped description is labelled as such, not presented as this run
    assert "The spec's description, as written (the settings above are the ones run): " in md
    # one seed: no s.e. claimed (its one tiny NUTS cell is graded failed: no value at all)
    assert "KL(q_diag ‖ q_full) [nats]: no value: the 1 sampled cell behind it was" in md
    assert "± " not in md.split("## Settings of this run")[0]
    # back to the spec as shipped: two seeds again
    assert main(["run", str(spec), "--out", str(out), "--no-progress"]) == 0
    assert "- Seeds: 0, 1 (2 seeds)" in (out / "report.md").read_text()


def test_the_report_gates_the_tree_depth_it_measured(sampled_run) -> None:
    _, out = sampled_run
    res = pd.read_csv(out / "results.csv")
    md = (out / "report.md").read_text()
    for _, r in res[res["method"] == "nuts"].iterrows():
        with xr.open_datatree(out / "cells" / f"{r['cell_id']}.nc") as dt:
            depth = dt["sample_stats"]["tree_depth"].values
        hits = int((depth >= 2).sum())
        assert hits > 0  # a limit of 2 doublings is hit on two moons
        assert f"| nuts | {r['seed']} | " in md
        assert f"{hits} of {depth.size} (D=2)" in md
        assert "tree_depth" in r["gates_failed"]  # the cell's own gates have it too
    assert "reached max_tree_depth (2)" in md and "Raise max_tree_depth" in md


def test_a_nan_metric_is_counted_and_named(sampled_run) -> None:
    _, out = sampled_run
    spec = load_spec(out / "spec.yaml")
    res = pd.read_csv(out / "results.csv")
    cid = res.loc[(res["method"] == "mfvi") & (res["seed"] == 1), "cell_id"].item()
    rec_path = out / "cells" / f"{cid}.json"
    rec = json.loads(rec_path.read_text())
    rec["metrics"]["nll"] = float("nan")
    rec_path.write_text(json.dumps(rec))
    build_report(out, spec)
    summ = pd.read_csv(out / "summary.csv")
    mfvi = summ[summ["method"] == "mfvi"].iloc[0]
    assert (mfvi["n"], mfvi["nll_n"], mfvi["accuracy_n"]) == (2, 1, 2)
    ok = res.loc[(res["method"] == "mfvi") & (res["seed"] == 0), "nll"].item()
    assert mfvi["nll_mean"] == pytest.approx(ok)
    md = (out / "report.md").read_text()
    assert f"nll = nan in {cid}" in md and "[1/2]" in md and "the k finite values" in md
    assert pd.read_csv(out / "results.csv").set_index("cell_id").at[cid, "nonfinite"] == "nll"


# ---------------------------------------------------------------- the sampler section


class _Run:
    """A RunDir stand-in whose cells' ArviZ files are in ``root``."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def read_artifact(self, cell_id: str, suffix: str) -> bytes | None:
        path = self.root / f"{cell_id}{suffix}"
        return path.read_bytes() if path.is_file() else None


def _write_cell(path: Path, post: dict, depth: np.ndarray, max_tree_depth: int) -> None:
    dt = from_dict(
        {
            "posterior": post,
            "sample_stats": {"tree_depth": depth, "diverging": np.zeros(depth.shape, bool)},
        }
    )
    dt.attrs["settings"] = json.dumps({"max_tree_depth": max_tree_depth})
    dt.to_netcdf(path, engine="h5netcdf")


def test_sampler_section_fails_a_stuck_sampler_and_shows_the_worst_cells(tmp_path) -> None:
    spec = specs.load(tmp_path, _spec(seeds=[0, 1, 2], chains=4))
    cells = [c for c in spec.cells() if c.method.name == "nuts"]
    rng = np.random.default_rng(0)
    good = {"a": rng.normal(size=(4, 300)), "b": rng.normal(size=(4, 300))}
    stuck = {"a": np.full((4, 300), 0.3), "b": np.full((4, 300), -1.0)}  # never moved
    shifted = {
        "a": rng.normal(size=(4, 300)) + np.array([[0], [0], [0], [3.0]]),
        "b": rng.normal(size=(4, 300)),
    }
    _write_cell(tmp_path / f"{cells[0].cell_id}.nc", good, np.ones((4, 300), int), 2)
    _write_cell(tmp_path / f"{cells[1].cell_id}.nc", stuck, np.ones((4, 300), int), 2)
    _write_cell(tmp_path / f"{cells[2].cell_id}.nc", shifted, np.full((4, 300), 2), 2)
    results = pd.DataFrame(
        [
            {"method": "nuts", "seed": i, "status": "ok", "cell_id": c.cell_id}
            | _record(tmp_path / f"{c.cell_id}.nc", 2)
            for i, c in enumerate(cells)
        ]
    )
    sec = sampler_section(_Run(tmp_path), results, spec)
    header, rows = sec.tables[0]
    conv = {r[1]: dict(zip(header, r, strict=True)) for r in rows}
    assert conv["1"]["max_r_hat"] == "NaN"  # not a blank: a failed gate
    ((s_header, s_rows),) = sec.tables[1:]
    samp = {r[1]: dict(zip(s_header, r, strict=True)) for r in s_rows}
    assert samp["0"]["gates failed"] == "" and samp["0"]["at max tree depth"] == "0 of 1200 (D=2)"
    assert samp["1"]["gates failed"] == "r_hat, ess_bulk"
    assert samp["2"]["gates failed"] == "r_hat, ess_bulk, tree_depth"
    assert samp["2"]["at max tree depth"] == "1200 of 1200 (D=2)"
    text = " ".join(sec.paragraphs)
    assert "2 of 3 sampled cells fail at least one gate" in text
    assert "2 of 3 sampled cells have an r_hat above 1.01 or a bulk ESS below 100" in text
    assert "In 1 of them some parameter never moved" in text
    assert "1 of 3 sampled cells hit the maximum tree depth: 1200 of 1200 transitions" in text
    # the worst cells first, then their worst parameters
    figs = {b.path: b.image for b in sec.blocks if isinstance(b, Figure)}
    # cell 1 has a parameter that never moved: arviz-plots cannot draw it, our figure does
    kinds = ["trace", "rank"] if arviz_plots() else ["trace_rank"]  # the engine installed
    worst = [figure_path(f"trace_rank_{cells[1].cell_id}")]
    worst += [figure_path(f"{k}_{cells[2].cell_id}") for k in kinds]
    assert list(figs)[: len(worst)] == worst
    if not arviz_plots():
        fig = figs[worst[1]]
        assert fig.get_axes()[0].get_title(loc="left").startswith("a: R-hat")


def test_the_sampler_tables_come_from_the_records_and_no_file_is_read_but_the_worst(
    tmp_path,
) -> None:
    spec = specs.load(tmp_path, _spec(seeds=[0, 1, 2, 3, 4]))
    cells = [c for c in spec.cells() if c.method.name == "nuts"]
    rng = np.random.default_rng(2)
    for c in cells:
        post = {"a": rng.normal(size=(2, 50))}
        _write_cell(tmp_path / f"{c.cell_id}.nc", post, np.ones((2, 50), int), 2)
    results = pd.DataFrame(
        [
            {"method": "nuts", "seed": i, "status": "ok", "cell_id": c.cell_id}
            | _record(tmp_path / f"{c.cell_id}.nc", 2)
            | {"max_r_hat": 1.0 + i / 100}  # the record, not the file, orders the cells
            for i, c in enumerate(cells)
        ]
    )
    read = []

    class Counting(_Run):
        def read_artifact(self, cell_id, suffix):
            read.append(cell_id)
            return super().read_artifact(cell_id, suffix)

    sec = sampler_section(Counting(tmp_path), results, spec)
    header, rows = sec.tables[0]
    assert [r[header.index("max_r_hat")] for r in rows] == ["1", "1.01", "1.02", "1.03", "1.04"]
    assert read == [cells[4].cell_id, cells[3].cell_id, cells[2].cell_id]  # the 3 worst only
    # a worst cell whose file is gone: named, and the tables still come from the records
    (tmp_path / f"{cells[4].cell_id}.nc").unlink()
    sec = sampler_section(_Run(tmp_path), results, spec)
    per_cell = 2 if arviz_plots() else 1  # figures of a cell: arviz-plots draws two
    assert len(sec.tables[0][1]) == 5 and len(sec.figures) == 2 * per_cell
    assert f"cells/{cells[4].cell_id}.nc (missing or damaged)" in " ".join(sec.paragraphs)


def _record(path: Path, max_tree_depth: int) -> dict:
    """What zoo.execution.evaluate records of a sampled cell's file (its diagnostics, once)."""
    d = diagnostic_gates(read_diagnostic_groups(path.read_bytes()), max_tree_depth=max_tree_depth)
    rec = {
        "max_r_hat": d.max_r_hat,
        "min_ess_bulk": d.min_ess_bulk,
        "min_ess_tail": d.min_ess_tail,
        "ess_bulk_q05": d.ess_bulk_quantiles[0],
        "worst_ess_bulk": d.worst_ess_bulk[0][0] if d.worst_ess_bulk else "",
        "gates_failed": ",".join(d.failed),
        "n_divergent": d.n_divergent,
        "n_max_tree_depth": d.n_max_tree_depth,
        "draws_per_chain": d.n_draws,
    }
    bad = [k for k, v in rec.items() if isinstance(v, float) and not np.isfinite(v)]
    return rec | {"nonfinite": ",".join(bad)}


def test_advice_only_for_the_gates_that_failed() -> None:
    rng = np.random.default_rng(1)
    post = {"a": rng.normal(size=(4, 400))}
    fine = from_dict({"posterior": post, "sample_stats": {"tree_depth": np.ones((4, 400), int)}})
    deep = from_dict({"posterior": post, "sample_stats": {"tree_depth": np.full((4, 400), 3)}})

    def record(dt):
        d = diagnostic_gates(dt, max_tree_depth=3)
        row = {
            "max_r_hat": d.max_r_hat,
            "min_ess_bulk": d.min_ess_bulk,
            "gates_failed": ",".join(d.failed),
            "n_max_tree_depth": d.n_max_tree_depth,
            "draws_per_chain": 400,
        }
        return sampler_record(row, chains=4, max_tree_depth=3)

    assert sampler_advice([record(fine)]) == []
    (advice,) = sampler_advice([record(deep)])
    assert advice.startswith("1 of 1 sampled cells hit the maximum tree depth: 1600 of 1600")
    assert "Raise max_tree_depth" in advice


def test_advice_for_a_chees_trajectory_clipped_at_max_leapfrog() -> None:
    """A ChEES cell whose adapted T sat at its cap gets advice; one below it, or a sampler
    that does not record the metric (NUTS: blank), does not."""
    base = {"max_r_hat": 1.002, "min_ess_bulk": 900.0, "gates_failed": "", "draws_per_chain": 400}
    capped = sampler_record({**base, "trajectory_at_cap": 1.0}, chains=16)
    below = sampler_record({**base, "trajectory_at_cap": 0.0}, chains=16)
    nuts = sampler_record({**base, "trajectory_at_cap": float("nan")}, chains=16)
    assert capped.trajectory_at_cap is True and below.trajectory_at_cap is False
    assert nuts.trajectory_at_cap is None
    assert sampler_advice([below, nuts]) == []
    (advice,) = sampler_advice([capped, below, nuts])
    assert advice.startswith("1 of 3 sampled cells are ChEES cells whose adapted trajectory")
    assert "Raise max_leapfrog" in advice
