"""Every entry of zoo.inference's tables works: each method fits, each guide builds.

Parametrized over :data:`zoo.inference.METHODS` and :data:`zoo.inference.guides.GUIDES`
(``tests/test_conformance_tables.py`` checks that every member of the spec's unions has
an entry; this checks what each entry returns). A table entry without an example section
below fails here by name.
"""

from __future__ import annotations

import numpy as np
import pyro
import pytest
import torch

import guides
import zoo.data
import zoo.models
from zoo.inference import METHODS, Fit, Hooks, Posterior, SampledPosterior, fit
from zoo.inference.guides import GUIDES
from zoo.runtime import Runtime
from zoo.spec.base import kind_of
from zoo.spec.load import load_spec
from zoo.spec.sections.inference import SVIMethod

SPEC = """\
name: conformance
seed: 4
data: {kind: two_moons, n_train: 40, n_test: 30, noise: 0.1}
model: {kind: mlp, depth: 1, width: 3}
inference:
  - {name: svi, kind: svi, guide: {kind: mean_field}, steps: 6, batch_size: 20, predictive_samples: 3}
  - {name: map, kind: map, steps: 6}
  - {name: mle, kind: mle, steps: 6, eval_every: 2}
  - {name: nuts, kind: nuts, init_from: svi, warmup: 6, draws: 4, max_tree_depth: 3}
  - {name: hmc, kind: hmc, warmup: 6, draws: 4, num_steps: 2, chains: 2}
  - {name: chees, kind: chees, init_from: svi, warmup: 6, draws: 4, chains: 4, keep_draws: 2,
     stream_groups: 2, max_leapfrog: 8}
  - {name: mclmc, kind: mclmc, init_from: svi, warmup: 6, draws: 4, chains: 2}
  - {name: mams, kind: mams, warmup: 6, draws: 4, chains: 2, max_steps: 4}
studies: []
"""

#: An example of every guide section, as it appears in a spec.
GUIDE_EXAMPLES = [
    {"kind": "mean_field", "local_reparam": True},
    {"kind": "k_tied", "rank": 1},
    {"kind": "matrix_normal", "row_cov": "full"},
    {"kind": "full_rank", "blocks": "global"},
    {"kind": "fixed_variance", "scale": 0.1},
]


@pytest.fixture(scope="module")
def spec(tmp_path_factory):
    p = tmp_path_factory.mktemp("conf") / "s.yaml"
    p.write_text(SPEC)
    return load_spec(p)


def _setup(spec):
    rt = Runtime.cpu()
    ds = zoo.data.load(spec.data, spec.seed)
    return zoo.models.build(spec, ds), ds.to_torch(rt), rt


def test_every_method_has_an_example(spec):
    assert {type(m) for m in spec.inference} == set(METHODS)


@pytest.mark.parametrize("cls", list(METHODS), ids=kind_of)  # every registered method
def test_method_fits_and_gives_a_posterior(spec, cls):
    method = next((m for m in spec.inference if type(m) is cls), None)
    assert method is not None, f"add an example of the {kind_of(cls)!r} method to SPEC above"
    model, data, rt = _setup(spec)
    others = {m.name: m for m in spec.inference}
    res = fit(method, model, data, seed=spec.seed, runtime=rt, others=others)
    assert isinstance(res, Fit) and isinstance(res.posterior, Posterior)
    assert res.seconds >= 0 and res.predictive_draws >= 1
    draws = res.posterior.sample(3, seed=1)
    again = res.posterior.sample(3, seed=1)
    sites = model.site_info()
    for site, (shape, _) in sites.items():
        assert draws[site].shape[1:] == shape and draws[site].shape[0] <= 3
        assert torch.equal(draws[site], again[site])  # same seed, same draws
    assert set(res.posterior.median()) >= set(sites)
    assert all(not isinstance(v, torch.Tensor) for v in res.stats.values())
    if getattr(method, "init_from", "prior") != "prior":
        assert res.init is not None and "init_seconds" in res.stats


@pytest.mark.parametrize("spread", ["posterior", "mode"])
def test_chees_streams_all_draws_and_keeps_a_thinning(spec, spread):
    method = spec.method("chees").model_copy(
        update={"init_spread": spread, "draws": 6, "keep_draws": 3}
    )
    model, data, rt = _setup(spec)
    others = {m.name: m for m in spec.inference}
    res = fit(method, model, data, seed=spec.seed, runtime=rt, others=others)
    post = res.posterior
    assert isinstance(post, SampledPosterior) and post.chains == 4
    assert all(v.shape[:2] == (4, 3) for v in post.draws.values())  # chains x kept
    assert all(v.shape[:2] == (4, 3) for v in res.sample_stats.values())
    mom, slices = post.moments, post.site_slices
    assert mom is not None and mom.n == res.stats["draws_per_chain"] == 6 and mom.chains == 4
    assert set(slices) == set(model.site_info()) and mom.dim == max(s.stop for s in slices.values())
    assert res.stats["kept_per_chain"] == 3 and res.stats["warmup_seconds"] >= 0
    for key in ("step_size", "trajectory_length"):
        assert res.stats[key] is not None and res.stats[key] > 0, key
    assert res.stats["n_eff"] is None or res.stats["n_eff"] > 0
    assert isinstance(res.stats["n_divergent"], int)
    # the kept draws are a subset of what streamed: their mean lies within the draws' range
    w = post.draws["layer0.weight"].reshape(12, -1)
    lo, hi = w.min(0), w.max(0)
    sl = slices["layer0.weight"]
    assert np.all(mom.mean[sl] >= lo - 10 * (hi - lo + 1)) and np.all(np.isfinite(mom.cov))


@pytest.mark.parametrize("spread", ["posterior", "mode"])
def test_chees_ensemble_of_starts_splits_the_chains_among_independent_fits(
    spec, spread, monkeypatch
):
    from zoo.inference.base import FitContext
    from zoo.inference.sampling import _start
    from zoo.seeds import INIT_FIT_STRIDE, Stream, seed_for

    method = spec.method("chees").model_copy(update={"init_fits": 2, "init_spread": spread})
    model, data, rt = _setup(spec)
    others = {m.name: m for m in spec.inference}
    seeds, fits = [], []

    def refit(name, label, seed=None):  # as zoo.inference.fit's: from a clean param store
        seeds.append(seed)
        pyro.clear_param_store()
        fits.append(fit(others[name], model, data, seed=seed, runtime=rt, others=others))
        return fits[-1]

    stats = {}
    first, start = _start(method, method.plan(), FitContext(spec.seed, rt, refit=refit), stats)
    # the ensemble's other fit first, the cell's own last: Pyro's guides read the global
    # param store, so the returned fit must be the last one made
    assert seeds == [spec.seed + INIT_FIT_STRIDE, spec.seed] and first is fits[-1]
    assert stats["init_fits"] == 2 and stats["init_seconds"] > 0
    # chains 0-1 from the cell's fit, 2-3 from the other (contiguous blocks), each chain its
    # own draw (posterior) or the fit's median (mode); refitted now, each must give them again
    for k, seed in enumerate([spec.seed, spec.seed + INIT_FIT_STRIDE]):
        pyro.clear_param_store()
        post = fit(others["svi"], model, data, seed=seed, runtime=rt, others=others).posterior
        own = (
            post.sample(2, seed_for(spec.seed, Stream.INIT_DRAWS))
            if spread == "posterior"
            else {s: v.expand(2, *v.shape) for s, v in post.median().items()}
        )
        for site, v in own.items():
            assert torch.equal(start[site][2 * k : 2 * k + 2], v), (k, site)
    w = start["layer0.weight"]
    assert not torch.equal(w[0], w[2])
    # the whole fit runs with the ensemble, and zoo's own refit starts each fit from a clean
    # param store (else the second would start where the first ended): the same starts
    import zoo.inference.sampling as sampling

    seen = {}
    real = sampling.run_method

    def spy(method, pot, **kw):
        seen.update(kw["init"])
        return real(method, pot, **kw)

    monkeypatch.setattr(sampling, "run_method", spy)
    res = fit(method, model, data, seed=spec.seed, runtime=rt, others=others)
    assert res.posterior.chains == 4 and res.stats["init_fits"] == 2
    for site, v in start.items():
        assert torch.equal(seen[site], v), site


def test_chees_draws_on_until_its_target_ess(spec):
    method = spec.method("chees").model_copy(
        update={"target_ess": 216, "draws": 4, "max_draws": 54}
    )
    model, data, rt = _setup(spec)
    others = {m.name: m for m in spec.inference}
    res = fit(method, model, data, seed=spec.seed, runtime=rt, others=others)
    # 4 chains reach an ESS of 216 only with 54 iid draws each: drawn to the cap
    assert res.stats["draws_per_chain"] == 54 == res.posterior.moments.n
    kept = res.stats["kept_per_chain"]  # thinned over the stream: keep_draws / 2 to keep_draws
    assert 1 <= kept <= 2 and all(v.shape[1] == kept for v in res.posterior.draws.values())


def test_chees_refuses_a_studys_stopping_rule(spec):
    model, data, rt = _setup(spec)
    hooks = Hooks(stop_when=lambda draws: True, max_draws=10)
    with pytest.raises(ValueError, match="target_ess"):
        fit(
            spec.method("chees"),
            model,
            data,
            seed=0,
            runtime=rt,
            hooks=hooks,
            others={m.name: m for m in spec.inference},
        )


def test_fit_rejects_an_unknown_section(spec):
    model, data, rt = _setup(spec)
    with pytest.raises(TypeError, match="register one in zoo.inference.METHODS"):
        fit(spec.model, model, data, seed=0, runtime=rt)


def test_every_guide_has_an_example():
    assert {type(_guide_section(g)) for g in GUIDE_EXAMPLES} == set(GUIDES)


@pytest.mark.parametrize("guide", GUIDE_EXAMPLES, ids=lambda g: g["kind"])
def test_guide_builds_declares_std_params_and_trains(spec, guide):
    method = spec.method("svi").model_copy(
        update={"guide": _guide_section(guide), "scale_lr": 0.05}
    )
    model, data, rt = _setup(spec)
    pyro.clear_param_store()
    starts = []
    res = fit(method, model, data, seed=0, runtime=rt, hooks=Hooks(on_start=starts.append))
    (g,) = starts
    assert res.posterior.guide is g
    containers = guides.std_param_containers(g)  # declared, so scale_lr and studies work
    assert isinstance(containers, frozenset)
    for site, (shape, _) in model.site_info().items():
        loc, scale = g.loc_scale(site)
        assert loc.shape == shape and scale.shape == shape and bool((scale > 0).all())


def _guide_section(guide):
    return SVIMethod(name="x", kind="svi", guide=guide, steps=1).guide


#: The trajectory facts every sampler's fit records (zoo.inference.sampling.trajectory_facts).
FACTS = ("trajectory_cap", "saturated_frac", "trajectory_at_cap", "mass_ratio_q05")


@pytest.mark.parametrize("kind", ["nuts", "hmc", "chees", "mclmc", "mams"])
def test_every_sampler_records_the_facts_a_report_needs(spec, kind):
    """Every sampler's fit has the trajectory facts, measured where its kernel has a cap
    (NUTS's tree depth, ChEES's leapfrog steps, MAMS's integration steps) and None where
    it has none; the saturated count agrees with the kept draws' own statistics."""
    method = spec.method(kind)
    model, data, rt = _setup(spec)
    others = {m.name: m for m in spec.inference}
    res = fit(method, model, data, seed=spec.seed, runtime=rt, others=others)
    st, ss = res.stats, res.sample_stats
    assert set(FACTS) <= set(st)
    cap = {"nuts": "max_tree_depth", "chees": "max_leapfrog", "mams": "max_steps"}.get(kind)
    if cap is None:  # HMC's fixed steps, MCLMC's one step per draw: nothing to cut
        assert st["trajectory_cap"] is st["saturated_frac"] is st["trajectory_at_cap"] is None
        return
    assert st["trajectory_cap"] == getattr(method, cap)
    assert 0.0 <= st["saturated_frac"] <= 1.0
    if kind == "nuts":  # every draw kept: the count is the file's
        assert st["saturated_frac"] == np.mean(ss["reached_max_treedepth"])
        assert st["trajectory_at_cap"] is None  # no adapted length (saturation covers it)
    if kind == "mams":  # every draw kept; two gradients per integration step
        assert st["saturated_frac"] == np.mean(ss["n_steps"] >= 2 * method.max_steps)
        assert st["trajectory_at_cap"] in (0.0, 0.5, 1.0)  # two chains
    if kind == "chees":
        assert st["trajectory_at_cap"] in (0.0, 1.0)


@pytest.mark.parametrize("max_steps", [1, 1024])
def test_mams_measures_its_saturation(spec, max_steps):
    """MAMS's trajectories are cut at ``max_steps``: at a cap of one step every transition
    is (and every chain's adapted L / epsilon is past it), at 1024 none of this short run's."""
    method = spec.method("mams").model_copy(update={"max_steps": max_steps})
    model, data, rt = _setup(spec)
    res = fit(method, model, data, seed=spec.seed, runtime=rt)
    st = res.stats
    assert st["trajectory_cap"] == max_steps
    if max_steps == 1:
        assert st["saturated_frac"] == 1.0 and st["trajectory_at_cap"] == 1.0
        assert np.all(res.sample_stats["n_steps"] == 2)
    else:
        assert st["saturated_frac"] == 0.0 and st["trajectory_at_cap"] == 0.0
