"""``simulation: {kind: gaussian}``: the price-of-mean-field pipeline on a known Gaussian.

For each dimension D of the section, a covariance S (:func:`reports.ground_truth.random_spd`)
is sampled by the zoo's own batched NUTS or HMC (:func:`zoo.inference.mcmc.samplers.run_nuts`,
:func:`~zoo.inference.mcmc.samplers.run_hmc`, all chains as one batch, the same warm-up) on
:class:`~zoo.inference.mcmc.gaussian.GaussianPotential`, and the draws go through the
study's Gaussian fit, shift null and excess (:func:`reports.ground_truth.ground_truth_metrics`)
beside the exact KL of S, and the KL debiased at the KL's own effective n
(:mod:`reports.kl_reference`). Why a simulation and not a data set and model: the target has
no data, network or predictive, so the per-cell flow (training data, evaluation, ArviZ file)
has nothing to run on; the sampler and the estimators are the parts under test, and they are
called here exactly as the cell flow calls them.

The run directory gets ``results.csv`` (one row per D), ``covariances.npz`` (the S of each D)
and a report with the table and the KL against 1/n_eff.
"""

from __future__ import annotations

import io
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from reports.document import render, section, simulation_document
from reports.figures.ground_truth import ground_truth_figure
from reports.ground_truth import ground_truth_metrics, random_spd
from zoo.inference.mcmc.gaussian import GaussianPotential
from zoo.inference.mcmc.samplers import run_hmc, run_nuts
from zoo.seeds import GROUND_TRUTH_STRIDE, GroundTruthStream
from zoo.spec import SpecError
from zoo.studies.product_matrix.simulate import SimulationStore

__all__ = ["TABLE_COLUMNS", "load_cov", "run_ground_truth", "sample_gaussian"]

#: The report table's columns, in order.
TABLE_COLUMNS = [
    "dim",
    "kl_true",
    "kl",
    "kl_group_sd",
    "kl_null",
    "kl_excess",
    "excess_se",
    "kl_debiased",
    "kl_debiased_se",
    "kl_bias",
    "kl_bias_se",
    "n_eff",
    "squares_n",
    "kl_null_draws",
    "kl_rhat",
    "max_r_hat",
    "w2sq_true",
    "w2sq",
    "w2sq_debiased",
    "w2sq_debiased_se",
    "n_divergent",
    "seconds",
]


def _num(v: Any, digits: int = 4) -> str:
    """A float to ``digits`` significant digits, '' for None or NaN."""
    return "" if v is None or not np.isfinite(v) else f"{v:.{digits}g}"


def _seed(seed: int, replicate: int, stream: GroundTruthStream) -> int:
    """The seed of ``stream`` in replicate ``replicate`` of the simulation seeded ``seed``."""
    return seed + GROUND_TRUTH_STRIDE * replicate + int(stream)


def sample_gaussian(sim: Any, cov: np.ndarray, seed: int) -> tuple[np.ndarray, dict[str, Any]]:
    """Draws ``(chains, draws, D)`` of N(0, cov) from the section's batched sampler, and
    its statistics (seconds, divergences, mean leapfrog steps, step sizes)."""
    pot = GaussianPotential(cov)
    kw = dict(
        seed=seed,
        warmup=sim.warmup,
        draws=sim.draws,
        chains=sim.chains,
        target_accept=sim.target_accept,
        step_size=None,
        mass_matrix="diag",
        vectorize_chains=True,
    )
    if sim.sampler == "nuts":
        res = run_nuts(pot, max_tree_depth=sim.max_tree_depth, **kw)
    else:
        res = run_hmc(pot, num_steps=sim.num_steps, adapt_mass_matrix=True, **kw)
    stats = {
        "seconds": res.seconds,
        "warmup_seconds": res.warmup_seconds,
        "n_divergent": res.n_divergent,
        "mean_steps": float(np.mean(res.sample_stats["n_steps"])),
        "step_size": float(np.mean(res.adapted.step_size)),
    }
    return res.flat, stats


def load_cov(sim: Any) -> np.ndarray:
    """S from ``sim.cov_file`` (a square symmetric positive definite ``.npy``; inverted when
    it holds the precision). A file that cannot serve raises :class:`~zoo.spec.SpecError`
    naming the field (the CLI exits 2 before anything is written)."""

    def bad(why: str) -> SpecError:
        return SpecError([f"simulation.cov_file: {sim.cov_file}: {why}"])

    try:
        mat = np.load(sim.cov_file, allow_pickle=False).astype(np.float64)
    except (OSError, ValueError) as e:
        raise bad(f"cannot be read as a .npy array ({e})") from e
    if mat.ndim != 2 or mat.shape[0] != mat.shape[1] or mat.shape[0] < 2:
        raise bad(f"need a square matrix of dimension >= 2, got shape {mat.shape}")
    if not np.all(np.isfinite(mat)) or not np.allclose(mat, mat.T, rtol=1e-6, atol=1e-12):
        raise bad("the matrix is not finite and symmetric")
    mat = 0.5 * (mat + mat.T)
    if np.linalg.eigvalsh(mat)[0] <= 0:
        raise bad("the matrix is not positive definite")
    return np.linalg.inv(mat) if sim.file_holds == "precision" else mat


def run_ground_truth(
    spec: Any, store: SimulationStore, *, log: Callable[[str], None] | None = None
) -> dict[str, Path]:
    """Run ``spec.simulation`` (a gaussian ground truth), write results and the report."""
    log = log or (lambda msg: print(msg, file=sys.stderr))
    sim = spec.simulation
    from_file = load_cov(sim) if sim.cov_file is not None else None  # before writing anything
    store.prepare()
    store.write_spec(spec)
    rows, covs = [], {}
    for i, dim in enumerate([len(from_file)] if from_file is not None else sim.dims):
        t0 = time.perf_counter()
        cov = (
            from_file
            if from_file is not None
            else random_spd(
                dim,
                sim.condition,
                seed=_seed(spec.seed, i, GroundTruthStream.COVARIANCE),
                rotate=sim.structure == "rotated",
            )
        )
        covs[f"dim_{dim}"] = cov
        draws, stats = sample_gaussian(sim, cov, _seed(spec.seed, i, GroundTruthStream.DRAWS))
        m = ground_truth_metrics(
            draws,
            cov,
            groups=sim.groups,
            fractions=sim.fractions,
            cov=sim.gaussian_fit.cov,
            jitter=sim.gaussian_fit.jitter,
            reps=sim.null_reps,
            seed=_seed(spec.seed, i, GroundTruthStream.NULL),
        )
        row = {"dim": dim, **m, **stats, "seconds": time.perf_counter() - t0}
        rows.append(row)
        log(
            f"D = {dim}: true KL {m['kl_true']:.4g}, excess {m['kl_excess']:.4g} "
            f"+- {m['excess_se']:.2g}, debiased {_num(m['kl_debiased'])} "
            f"+- {_num(m['kl_debiased_se'], 2)}, n_eff {_num(m['n_eff'])}, KL R-hat "
            f"{_num(m['kl_rhat'])}; true W2^2 {m['w2sq_true']:.4g}, debiased "
            f"{_num(m['w2sq_debiased'])} +- {_num(m['w2sq_debiased_se'], 2)} "
            f"({row['seconds']:.0f} s)"
        )
    results = pd.DataFrame(rows)
    store.write_table("results.csv", results)
    buf = io.BytesIO()
    np.savez_compressed(buf, **covs)
    store.write_file("covariances.npz", buf.getvalue())
    table = [
        [
            _num(r[c]) if r[c] is None or isinstance(r[c], float) else str(r[c])
            for c in TABLE_COLUMNS
        ]
        for r in rows
    ]
    sec = section(
        "Ground truth: the price-of-mean-field pipeline on N(0, S) with a known S",
        [_setting_text(spec), _columns_text(spec.simulation)],
        [(TABLE_COLUMNS, table)],
        [("kl_vs_inverse_n_eff", ground_truth_figure(rows, sim.fractions))],
    )
    doc = simulation_document(
        f"bnn-zoo report: {spec.name}", len(results), spec.description, [sec], store.spec_text()
    )
    return store.write_files(render(doc))


def _setting_text(spec: Any) -> str:
    """The report's first paragraph: the covariance S and how it was sampled."""
    sim = spec.simulation
    return (
        (
            f"S = the {sim.file_holds} in {Path(sim.cov_file).name}"
            if sim.cov_file
            else f"S = {'Q diag(lambda) Q^T' if sim.structure == 'rotated' else 'diag(lambda)'} "
            f"with eigenvalues log-spaced over [1, {sim.condition:g}]"
        )
        + f"; {sim.sampler.upper()}, "
        f"{sim.chains} chains as one batch, {sim.warmup} warm-up and {sim.draws} draws "
        f"per chain; Gaussian fit {sim.gaussian_fit.cov}, {sim.null_reps} shifted copies "
        f"for the null; seed {spec.seed}."
    )


def _columns_text(sim: Any) -> str:
    """The report's second paragraph: what each column of the table is."""
    return (
        "kl_true is the exact KL(q_diag || q_full) of S with the study's q_diag (precisions "
        "(S^-1)_ii). kl is the study's estimate on all draws, kl_null its shift null, "
        f"kl_excess = kl - kl_null. The chains split into {sim.groups} groups: kl_group_sd "
        "is the spread of one group's KL, excess_se the spread of the group excesses / "
        f"sqrt({sim.groups}), the Monte Carlo error of kl_excess. kl_debiased = kl - kl_bias, "
        "kl_bias being the exact Wishart bias of the plug-in KL, (1/2)(sum_k psi((n-k)/2) "
        "- D psi((n-D)/2)), at n = n_eff, the KL's own effective n, measured from how much "
        "the chain groups' covariances spread, weighed as the KL's second-order expansion "
        "weighs them (reports/kl_reference.py); it uses no null. "
        f"kl_debiased_se is its jackknife error over the {sim.groups} chain groups (each "
        "left-out estimate debiased at n_eff scaled by the draws it keeps) with the "
        "error of kl_bias itself (kl_bias_se, from the same groups) in quadrature. "
        "squares_n is the centred squares' pooled ESS, the per-coordinate alternative "
        "to n_eff (it over-states NUTS's bias). kl_null_draws: the "
        "independent draws with the null's bias. The figure puts the KL on the leading "
        f"{', '.join(f'{round(100 * f)}%' for f in sim.fractions)} of every chain against "
        "1/n_eff with the exact bias curve through kl_debiased: a curve, not a line (the "
        "bias has a D^3 / 6n^2 term), so a straight-line extrapolation to 1/n = 0 is "
        "biased low. kl_rhat is the KL's own split R-hat (of its per-draw influence "
        "values, reports/kl_rhat.py) and max_r_hat the coordinates' largest: where they "
        "fail (above 1.01) the chains have not explored S and no bias correction "
        "recovers kl_true. w2sq_true, w2sq and w2sq_debiased are W2(q_diag, q_full)^2 of "
        "S, of the draws, and of the draws less their sampling bias (a jackknife over the "
        "chain groups, reports/w2_reference.py) with its s.e."
    )
