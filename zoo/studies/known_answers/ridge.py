"""``simulation: {kind: ridge_target}``: the zoo's NUTS on rescaling ridges with an exact answer.

:class:`reports.ridge_target.RidgeTarget` (bilinear pairs ``a_k b_k = y_k`` on a hyperbola
with a sign symmetry, plus a correlated Gaussian block) is sampled through the public
front-end, :func:`zoo.inference.mcmc.user.sample_nuts` on
:func:`zoo.models.targets.ridge_model`, in superchains (chains sharing one start), each
started from one prior draw with the prior's standard deviations scaled up
(:func:`sample_ridge`). Each run variant is compared with the exact moments and KL
(:func:`ridge_metrics`) and its gates, split and nested R-hat (Margossian et al. 2024):

- ``long``: a full run on branches joined through the origin recovers the exact moments and
  KL(q_diag || q_full) and passes its gates;
- ``short``: the same cut short fails its gates (its intervals are honest, so its moments
  may still cover the truth: the gates tell it apart);
- ``separated``: on a pair with two branches behind a barrier the superchains land on
  different branches and fail nested R-hat;
- ``one_branch``: the same starts folded into the positive branch pass both gates and are
  wrong, which is why the starts are prior draws.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from reports.ground_truth import random_spd
from reports.kl_reference import debiased_kl_draws
from reports.orbit import max_split_rhat
from reports.ridge_target import RidgeTarget, moment_band, moment_z
from reports.superchains import max_rhat_nested
from zoo.inference.mcmc.user import sample_nuts
from zoo.models.targets import ridge_model
from zoo.studies.known_answers.report import write_known_answer
from zoo.studies.product_matrix.simulate import SimulationStore

__all__ = ["EXPECTED", "ridge_metrics", "ridge_targets", "run_ridge_target", "sample_ridge"]

#: What each variant should show: whether its gates pass and whether it recovers the exact
#: answer (None: either, the gates alone judge it).
EXPECTED: dict[str, tuple[bool, bool | None]] = {
    "long": (True, True),
    "short": (False, None),
    "separated": (False, None),
    "one_branch": (True, False),
}


def sample_ridge(
    target: RidgeTarget,
    *,
    superchains: int,
    per_superchain: int,
    warmup: int,
    draws: int,
    max_tree_depth: int = 10,
    start_scale: float = 2.0,
    seed: int = 0,
    one_branch: bool = False,
) -> tuple[np.ndarray, int]:
    """Draws ``(C, S, D)`` of ``target`` in its flat order and the divergences, from NUTS.

    ``C = superchains * per_superchain`` chains run as one batch; the chains of superchain
    ``i`` all start at prior draw ``i`` (:meth:`~reports.ridge_target.RidgeTarget.prior_draws`,
    seeded ``seed``, standard deviations times ``start_scale``), so that the superchains
    start over-dispersed across the branches. ``one_branch``: the same draws with every
    ``a`` and ``b`` made positive (all superchains in one branch).
    """
    k = len(target.y)
    chains = superchains * per_superchain
    start = target.prior_draws(superchains, seed=seed, scale=start_scale)
    start = np.repeat(start, per_superchain, axis=0)
    if one_branch:
        start[:, : 2 * k] = np.abs(start[:, : 2 * k])
    init = {
        "a": torch.tensor(start[:, :k]),
        "b": torch.tensor(start[:, k : 2 * k]),
        "z": torch.tensor(start[:, 2 * k :]),
    }
    tree = sample_nuts(
        ridge_model,
        torch.tensor(np.asarray(target.y, dtype=float)),
        target.noise_sd,
        target.prior_mean,
        target.prior_sd,
        torch.tensor(np.asarray(target.block_mean, dtype=float)),
        torch.tensor(np.asarray(target.block_cov, dtype=float)),
        chains=chains,
        warmup=warmup,
        draws=draws,
        seed=seed,
        max_tree_depth=max_tree_depth,
        init=init,
    )
    post = tree["posterior"]
    x = np.concatenate([post[s].values.reshape(chains, draws, -1) for s in "abz"], axis=-1)
    return x, int(tree.attrs["divergences"])


def ridge_metrics(
    x: np.ndarray,
    target: RidgeTarget,
    superchain_ids: list[int],
    *,
    kl_groups: int = 8,
    nested_rhat_max: float = 1.01,
    split_rhat_max: float = 1.05,
) -> dict[str, Any]:
    """Draws ``x`` ``(C, S, D)`` against the exact answer of ``target``, and their gates.

    ``max_abs_z``: the largest |z| of the ``D + D (D + 1) / 2`` means and covariance entries
    (:func:`reports.ridge_target.moment_z`), inside the family's Bonferroni 95% band
    ``z_band`` or not; ``kl_debiased`` with its 95% ``kl_half_width``
    (:func:`reports.kl_reference.debiased_kl_draws`, ``kl_groups`` chain groups; NaN where
    the draws' effective n is not above D); ``recovered``: every moment inside the band and
    the exact KL inside the KL's interval; ``gates``: nested R-hat at most
    ``nested_rhat_max`` and split R-hat at most ``split_rhat_max``.
    """
    mean, cov = target.moments()
    kl_exact = float(target.kl())
    z = moment_z(x, mean, cov)
    band = moment_band(z.size)
    kl = debiased_kl_draws(x, groups=kl_groups)
    half = kl.half_width()
    kl_inside = kl.debiased is not None and abs(kl.debiased - kl_exact) <= half
    nested = max_rhat_nested(x, superchain_ids)
    split = max_split_rhat(x)
    return {
        "kl_exact": kl_exact,
        "kl_debiased": np.nan if kl.debiased is None else float(kl.debiased),
        "kl_half_width": np.nan if half is None else float(half),
        "kl_inside": bool(kl_inside),
        "max_abs_z": float(np.max(np.abs(z))),
        "z_band": band,
        "moments_inside": int(np.sum(np.abs(z) <= band)),
        "moments": int(z.size),
        "split_rhat": split,
        "nested_rhat": nested,
        "gates": "pass" if nested <= nested_rhat_max and split <= split_rhat_max else "fail",
        "recovered": bool(kl_inside and np.all(np.abs(z) <= band)),
    }


def ridge_targets(sim: Any) -> dict[str, RidgeTarget]:
    """The section's two targets: ``mixing`` (pairs ``y``) and ``separated`` (``separated_y``),
    sharing the block ``N(block_mean, S)``, ``S = random_spd(G, block_condition)``."""
    block_mean = np.asarray(sim.block_mean, dtype=float)
    block_cov = random_spd(len(block_mean), float(sim.block_condition), seed=sim.block_seed)
    return {
        name: RidgeTarget(
            np.asarray(y, dtype=float),
            float(sim.noise_sd),
            tuple(map(float, sim.prior_mean)),
            tuple(map(float, sim.prior_sd)),
            block_mean,
            block_cov,
        )
        for name, y in (("mixing", sim.y), ("separated", sim.separated_y))
    }


def _variant(sim: Any, name: str) -> dict[str, Any]:
    """The settings of run variant ``name``: its target and the sampler's arguments."""
    full = {"warmup": sim.warmup, "draws": sim.draws, "max_tree_depth": sim.max_tree_depth}
    short = {
        "warmup": sim.short_warmup,
        "draws": sim.short_draws,
        "max_tree_depth": sim.short_max_tree_depth,
    }
    return {
        "long": {"target": "mixing", **full},
        "short": {"target": "mixing", **short},
        "separated": {"target": "separated", **full},
        "one_branch": {"target": "separated", **full, "one_branch": True},
    }[name]


def run_ridge_target(
    spec: Any, store: SimulationStore, *, log: Callable[[str], None] | None = None
) -> dict[str, Path]:
    """Run ``spec.simulation`` (a ridge target): one row per variant, results and report."""
    log = log or (lambda msg: print(msg, file=sys.stderr))
    sim = spec.simulation
    store.prepare()
    store.write_spec(spec)
    targets = ridge_targets(sim)
    per = sim.chains // sim.superchains
    ids = [c // per for c in range(sim.chains)]
    rows = []
    for name in sim.variants:
        t0 = time.perf_counter()
        v = _variant(sim, name)
        target = targets[v.pop("target")]
        one_branch = v.pop("one_branch", False)
        x, divergences = sample_ridge(
            target,
            superchains=sim.superchains,
            per_superchain=per,
            start_scale=sim.start_scale,
            seed=spec.seed,
            one_branch=one_branch,
            **v,
        )
        m = ridge_metrics(
            x,
            target,
            ids,
            kl_groups=sim.kl_groups,
            nested_rhat_max=sim.nested_rhat_max,
            split_rhat_max=sim.split_rhat_max,
        )
        gates, recovered = EXPECTED[name]
        row = {
            "variant": name,
            "y": " ".join(f"{y:g}" for y in target.y),
            "start": "one branch" if one_branch else "prior draws",
            **v,
            **m,
            "as_expected": (m["gates"] == "pass") == gates and recovered in (None, m["recovered"]),
        }
        row.update(divergences=divergences, seconds=time.perf_counter() - t0)
        rows.append(row)
        log(
            f"{name}: KL {m['kl_debiased']:.4g} +- {m['kl_half_width']:.2g} (exact "
            f"{m['kl_exact']:.4g}), max |z| {m['max_abs_z']:.3g}, split R-hat "
            f"{m['split_rhat']:.4g}, nested {m['nested_rhat']:.4g}: gates {m['gates']}, "
            f"recovered {m['recovered']} ({row['seconds']:.0f} s)"
        )
    return write_known_answer(
        spec,
        store,
        "Ridge target: NUTS on rescaling ridges",
        [_text(spec)],
        {"results": pd.DataFrame(rows)},
    )


def _text(spec: Any) -> str:
    """The report's paragraph: the target, the runs and what each column is."""
    sim = spec.simulation
    return (
        f"Pairs a_k, b_k ~ N({sim.prior_mean[0]:g}, {sim.prior_sd[0]:g}^2) x "
        f"N({sim.prior_mean[1]:g}, {sim.prior_sd[1]:g}^2), y_k ~ N(a_k b_k, "
        f"{sim.noise_sd:g}^2), and a Gaussian block of {len(sim.block_mean)} (condition "
        f"{sim.block_condition:g}); NUTS, {sim.chains} chains in {sim.superchains} "
        f"superchains, each started from one prior draw with the sd times {sim.start_scale:g}; "
        f"seed {spec.seed}. Variants: long (y = {sim.y}), short (the same cut short), "
        f"separated (y = {sim.separated_y}, two branches behind a barrier), one_branch (the "
        "separated run started in the positive branch). kl_exact: KL(q_diag || q_full) of "
        "the exact moments (quadrature); kl_debiased +- kl_half_width: the draws' KL less its "
        f"sampling bias, 95% t-interval over {sim.kl_groups} chain groups; max_abs_z: the "
        "largest |z| of the means and covariance entries against the exact ones (s.e. from "
        "the multi-chain ESS), z_band the family's Bonferroni 95% bound; recovered: every "
        "moment inside z_band and kl_exact inside the KL's interval; gates: nested R-hat <= "
        f"{sim.nested_rhat_max:g} and split R-hat <= {sim.split_rhat_max:g}. Expected: long "
        "passes and recovers, short and separated fail their gates, one_branch passes and "
        "is wrong (as_expected)."
    )
