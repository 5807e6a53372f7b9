"""Chains as one batched computation: potential, kernels and runner against the sequential ones.

The batched NUTS and HMC transitions of :mod:`zoo.inference.mcmc.batched` draw each chain's coins from its
own generator in the sequential kernel's order, so every chain must follow, step for step,
the trajectory :func:`zoo.inference.mcmc.kernel.nuts_step` gives it alone (up to float rounding).
"""

from __future__ import annotations

import numpy as np
import pydantic
import pytest
import torch

from tests.zoo.inference.mcmc.test_sequential import (
    STATS,
    _check_posterior,
    _regression,
    _small,
    run_hmc,
    run_nuts,
)
from zoo.inference.mcmc.batched import BatchMetric, hmc_step_batch, new_point_batch, nuts_step_batch
from zoo.inference.mcmc.kernel import Metric, hmc_step, new_point, nuts_step
from zoo.inference.mcmc.loop import EXTEND_EVERY
from zoo.inference.mcmc.potential import FlatPotential
from zoo.models.likelihoods import CategoricalLikelihood, GaussianLikelihood
from zoo.models.mlp import BayesianMLP
from zoo.spec.load import load_spec
from zoo.spec.sections.inference import HMCMethod, NUTSMethod


def _fixed_noise_regression() -> FlatPotential:
    gen = torch.Generator().manual_seed(3)
    x, y = torch.randn(30, 2, generator=gen), torch.randn(30, generator=gen)
    return FlatPotential(BayesianMLP(2, [6], GaussianLikelihood(0.3), act="tanh"), x, y)


def _pots() -> dict[str, FlatPotential]:
    return {
        "categorical": _small("classification")[0],
        "learned_noise": _small("regression")[0],
        "fixed_noise": _fixed_noise_regression(),
    }


@pytest.mark.parametrize("chains", [1, 5])
@pytest.mark.parametrize("kind", ["categorical", "fixed_noise", "learned_noise"])
def test_value_and_grad_batch_equals_value_and_grad(kind: str, chains: int) -> None:
    pot = _pots()[kind]
    assert isinstance(pot.model.likelihood, CategoricalLikelihood) == (kind == "categorical")
    z = torch.randn(chains, pot.dim, generator=torch.Generator().manual_seed(0))
    u, g = pot.value_and_grad_batch(z)
    assert u.shape == (chains,) and u.dtype == torch.float64 and g.shape == (chains, pot.dim)
    for c in range(chains):
        uc, gc = pot.value_and_grad(z[c])
        np.testing.assert_allclose(u[c].item(), uc, rtol=1e-5)
        scale = gc.abs().max().item()  # float32 sums: entries may cancel to far below it
        np.testing.assert_allclose(g[c].numpy(), gc.numpy(), rtol=1e-5, atol=1e-6 * scale)
    with pytest.raises(ValueError, match="chains"):
        pot.value_and_grad_batch(z[0])


@pytest.mark.parametrize("kind", ["categorical", "fixed_noise", "learned_noise"])
def test_finished_later_is_finished_now(kind: str) -> None:
    """``finish=False`` then :meth:`finish_batch` on a stack of rows: the bits of ``U``."""
    pot = _pots()[kind]
    z = torch.randn(4, pot.dim, generator=torch.Generator().manual_seed(0))
    u, g = pot.value_and_grad_batch(z)
    pairs = [pot.value_and_grad_batch(z, finish=False) for _ in range(2)]
    assert all(e.dtype == z.dtype and not e.requires_grad for e, _ in pairs)
    finished = pot.finish_batch(torch.stack([e for e, _ in pairs]))  # (2, C) at once
    assert all(torch.equal(row, u) for row in finished)
    assert all(torch.equal(h, g) for _, h in pairs)


class _Plain:
    """A potential that finishes every ``U`` at once (no ``finishes_later``)."""

    def __init__(self, pot: FlatPotential) -> None:
        self.pot = pot

    def value_and_grad_batch(self, z):
        return self.pot.value_and_grad_batch(z)


def test_nuts_batch_finishing_later_draws_the_same_bits() -> None:
    """Batched NUTS finishes a subtree's potentials at once where the potential offers it;
    the proposals, statistics and generators are those of finishing them leaf by leaf."""
    pot = _small("classification")[0]
    assert pot.value_and_grad_batch.finishes_later
    minv = torch.rand(4, pot.dim, generator=torch.Generator().manual_seed(1)) + 0.5
    z = torch.randn(4, pot.dim, generator=torch.Generator().manual_seed(2)) * 0.1
    eps = torch.tensor([0.2, 0.05, 0.1, 8.0])
    runs = []
    for p in (pot, _Plain(pot)):
        metric, rngs = BatchMetric(minv), [np.random.default_rng(s) for s in range(4)]
        gens = [torch.Generator().manual_seed(s) for s in range(4)]
        point = new_point_batch(metric, z, *pot.value_and_grad_batch(z), gens)
        q, st = nuts_step_batch(p, metric, point, eps, 6, rngs)
        runs.append((q, st, [g.bit_generator.state for g in rngs]))
    (q, st, states), (q2, st2, states2) = runs
    assert all(torch.equal(a, b) for a, b in zip(q, q2, strict=True))
    assert all(np.array_equal(st[k], st2[k]) for k in st) and states == states2
    assert st["diverging"].any() and len(set(st["tree_depth"].tolist())) > 1


def _lockstep(pot, minv, z, eps, n, seeds, seq_step, bat_step) -> list[list[tuple]]:
    """``n`` transitions per chain, sequential and batched, each batched transition started
    from the sequential chain's point (momenta from the same generators); per chain a list of
    ((proposal, stats), (batched proposal, batched stats)) pairs."""
    c = len(seeds)
    metrics = [Metric({("all",): minv[i]}, {("all",): slice(0, pot.dim)}) for i in range(c)]
    rngs = [np.random.default_rng(s) for s in seeds]
    gens = [torch.Generator().manual_seed(s) for s in seeds]
    brngs = [np.random.default_rng(s) for s in seeds]
    bgens = [torch.Generator().manual_seed(s) for s in seeds]
    bmetric, e = BatchMetric(minv), torch.tensor(eps)
    state = [(z[i], *pot.value_and_grad(z[i])) for i in range(c)]
    out: list[list[tuple]] = [[] for _ in range(c)]
    for _ in range(n):
        zb = torch.stack([s[0] for s in state])
        ub = torch.tensor([s[1] for s in state], dtype=torch.float64)
        gb = torch.stack([s[2] for s in state])
        qb, stb = bat_step(pot, bmetric, new_point_batch(bmetric, zb, ub, gb, bgens), e, brngs)
        for i in range(c):
            p = new_point(pot, metrics[i], *state[i], gens[i])
            q, st = seq_step(pot, metrics[i], p, eps[i], rngs[i])
            state[i] = (q.z, q.potential, q.g)
            out[i].append(((q, st), (qb, stb)))
    return out


def _compare(pairs, c: int) -> None:
    # The acceptance probability is exp(-dH), dH a difference of energies of about 60 here
    # summed in float32 in a different order: 1e-7 relative rounding in each is up to ~1e-5
    # absolute in dH, and so in the probability.
    for t, ((q, st), (qb, stb)) in enumerate(pairs):
        for k, v in st.items():
            atol = 3e-5 if k == "acceptance_rate" else 1e-6
            np.testing.assert_allclose(stb[k][c], v, rtol=1e-5, atol=atol, err_msg=f"{t} {k}")
        # Positions: a NUTS trajectory of up to 2^depth leapfrog steps amplifies that float32
        # rounding (torch 2.13's CPU kernels sum in another order than earlier builds did):
        # up to 1e-4 absolute on coordinates of about 10 after one transition.
        for a, b in zip(q, qb.row(c), strict=True):
            np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-5, atol=2e-4)


def _nuts(depth):
    def seq(pot, metric, p, e, rng):
        return nuts_step(pot, metric, p, e, depth, rng)

    def bat(pot, metric, p, e, rngs):
        return nuts_step_batch(pot, metric, p, e, depth, rngs)

    return seq, bat


_CASES = {
    "conjugate": (lambda: _regression()[0], 0.05, 6),
    "bnn": (lambda: _small("classification")[0], 0.2, 6),
}


@pytest.mark.parametrize("case", list(_CASES))
def test_nuts_batch_of_one_is_nuts_step(case: str) -> None:
    make, eps, depth = _CASES[case]
    pot = make()
    minv = torch.rand(1, pot.dim, generator=torch.Generator().manual_seed(1)) + 0.5
    z = torch.randn(1, pot.dim, generator=torch.Generator().manual_seed(2)) * 0.1
    (pairs,) = _lockstep(pot, minv, z, [eps], 20, [7], *_nuts(depth))
    _compare(pairs, 0)
    assert len({st["tree_depth"] for (_, st), _ in pairs}) > 1  # trees of several sizes


@pytest.mark.parametrize("case", list(_CASES))
def test_nuts_batch_chains_follow_their_own_runs(case: str) -> None:
    """Three chains, different step sizes (trees of different sizes; one diverges)."""
    make, eps, depth = _CASES[case]
    pot = make()
    eps3 = [eps, eps * 0.3, eps * 40]
    minv = torch.rand(3, pot.dim, generator=torch.Generator().manual_seed(1)) + 0.5
    z = torch.randn(3, pot.dim, generator=torch.Generator().manual_seed(2)) * 0.1
    per_chain = _lockstep(pot, minv, z, eps3, 6, [11, 12, 13], *_nuts(depth))
    for c, pairs in enumerate(per_chain):
        _compare(pairs, c)
    depth_of = [[st["tree_depth"] for (_, st), _ in pairs] for pairs in per_chain]
    assert max(depth_of[1]) > min(depth_of[0])
    assert any(st["diverging"] for (_, st), _ in per_chain[2])


def test_hmc_batch_chains_follow_their_own_runs() -> None:
    pot = _small("classification")[0]
    eps3 = [0.1, 0.02, 5.0]
    minv = torch.rand(3, pot.dim, generator=torch.Generator().manual_seed(1)) + 0.5
    z = torch.randn(3, pot.dim, generator=torch.Generator().manual_seed(2)) * 0.1
    per_chain = _lockstep(
        pot,
        minv,
        z,
        eps3,
        8,
        [1, 2, 3],
        lambda pot, m, p, e, rng: hmc_step(pot, m, p, e, 7, rng),
        lambda pot, m, p, e, rngs: hmc_step_batch(pot, m, p, e, 7, rngs),
    )
    for c, pairs in enumerate(per_chain):
        _compare(pairs, c)
    assert any(st["diverging"] for (_, st), _ in per_chain[2])


def test_vectorized_nuts_recovers_conjugate_posterior() -> None:
    pot, mean, cov = _regression()
    res = run_nuts(pot, seed=0, warmup=200, draws=400, chains=4, vectorize_chains=True)
    assert res.adapted.inverse_mass_matrix.shape == (4, pot.dim)
    assert res.n_divergent == 0
    _check_posterior(res, mean, cov)


def test_vectorized_same_seed_same_draws_and_layout() -> None:
    pot, _, _ = _small("regression")
    a, b, c = (
        run_nuts(
            pot, seed=s, warmup=20, draws=10, chains=3, max_tree_depth=4, vectorize_chains=True
        )
        for s in (3, 3, 4)
    )
    np.testing.assert_array_equal(a.flat, b.flat)
    for k in STATS:
        np.testing.assert_array_equal(a.sample_stats[k], b.sample_stats[k])
        assert a.sample_stats[k].shape == (3, 10), k
    assert not np.array_equal(a.flat, c.flat)
    assert a.draws["layer0.weight"].shape == (3, 10, 4, 3) and a.draws["noise"].shape == (3, 10)
    seq = run_nuts(pot, seed=3, warmup=20, draws=10, chains=3, max_tree_depth=4)
    assert a.flat.shape == seq.flat.shape and set(a.sample_stats) == set(seq.sample_stats)
    assert seq.adapted.inverse_mass_matrix is None  # the one-chain path
    h = run_hmc(
        pot,
        seed=0,
        warmup=10,
        draws=5,
        chains=2,
        num_steps=3,
        vectorize_chains=True,
        adapt_mass_matrix=True,
    )
    assert h.flat.shape == (2, 5, pot.dim) and (h.sample_stats["n_steps"] == 3).all()


def test_vectorized_run_is_the_sequential_run() -> None:
    """Without adaptation (a given step size, no warm-up) the vectorized chains visit the points
    the sequential chains visit, on the conjugate model, up to float32 rounding.

    With warm-up the two paths adapt on acceptance statistics that differ in the last bits, and
    dual averaging amplifies that: on torch 2.13 chain 0 ends its warm-up at step size 1.01 on
    one path and 0.49 on the other. Both are checked against the closed-form posterior in
    ``test_vectorized_nuts_recovers_conjugate_posterior``; the adaptation itself is
    checked bit for bit against Pyro's in tests/zoo/inference/mcmc/test_adaptation.py.
    """
    pot, _, _ = _regression()
    kw = dict(seed=3, warmup=0, draws=10, chains=3, step_size=0.05)
    a = run_nuts(pot, max_tree_depth=5, **kw)
    b = run_nuts(pot, max_tree_depth=5, vectorize_chains=True, **kw)
    np.testing.assert_allclose(b.flat, a.flat, rtol=1e-4, atol=1e-5)
    for k in STATS:
        np.testing.assert_allclose(
            b.sample_stats[k], a.sample_stats[k], rtol=1e-4, atol=1e-5, err_msg=k
        )
    a = run_hmc(pot, num_steps=5, adapt_mass_matrix=False, **kw)
    b = run_hmc(pot, num_steps=5, adapt_mass_matrix=False, vectorize_chains=True, **kw)
    np.testing.assert_allclose(b.flat, a.flat, rtol=1e-4, atol=1e-5)


def test_vectorized_mass_matrices() -> None:
    """Batched: diag per chain, dense and the Fisher metrics pooled; block only one chain at
    a time, the Fisher metrics only batched."""
    pot, _, _ = _small("classification")
    kw = dict(seed=0, warmup=5, draws=5, chains=2)
    with pytest.raises(ValueError, match="mass_matrix: block"):
        run_nuts(pot, mass_matrix="block", vectorize_chains=True, **kw)
    with pytest.raises(pydantic.ValidationError, match="vectorize_chains"):
        NUTSMethod(name="n", kind="nuts", mass_matrix="block", vectorize_chains=True, chains=2)
    with pytest.raises(pydantic.ValidationError, match="mass_matrix: fisher_diag is pooled"):
        NUTSMethod(name="n", kind="nuts", mass_matrix="fisher_diag", chains=2)
    dense = NUTSMethod(name="n", kind="nuts", mass_matrix="dense", vectorize_chains=True, chains=2)
    assert dense.mass_matrix == "dense"
    assert NUTSMethod(name="n", kind="nuts", vectorize_chains=True).vectorize_chains
    assert HMCMethod(name="h", kind="hmc", vectorize_chains=True).vectorize_chains


def test_vectorize_chains_enters_the_cell_id_only_when_on(tmp_path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("""
name: v
data: {kind: two_moons, n_train: 20, n_test: 20}
model: {kind: mlp, depth: 1, width: 3}
likelihood: {kind: categorical}
inference: [{name: NUTS, kind: nuts, warmup: 5, draws: 5, chains: 2}]
studies: []
""")
    base = load_spec(path).cells()[0]
    assert "vectorize_chains" not in base.config()["method"]  # defaults never enter an id
    on = load_spec(path, ["inference.NUTS.vectorize_chains=true"]).cells()[0]
    assert on.method.vectorize_chains and on.cell_id != base.cell_id


def test_stopping_rule_extends_all_chains_and_keeps_the_prefix() -> None:
    """With ``until`` the chains draw ``draws``, then go on in rounds of EXTEND_EVERY: the kept
    draws are the first ones of a run of that length (same seed), stats trimmed alike."""
    pot, _, _ = _small("regression")
    asked: list[int] = []

    def until(drawn: int, x: np.ndarray) -> bool:
        assert drawn == x.shape[1]
        assert x.shape[0] == 3 and x.shape[2] == pot.dim
        asked.append(x.shape[1])
        return x.shape[1] >= 10 + 2 * EXTEND_EVERY

    kw = dict(seed=3, warmup=20, chains=3, max_tree_depth=4, vectorize_chains=True)
    a = run_nuts(pot, draws=10, max_draws=200, until=until, **kw)
    n = 10 + 2 * EXTEND_EVERY
    assert asked == [10, 10 + EXTEND_EVERY, n]
    assert a.flat.shape == (3, n, pot.dim) and a.drawn == n
    full = run_nuts(pot, draws=n, **kw)
    np.testing.assert_array_equal(a.flat, full.flat)
    for k in STATS:
        np.testing.assert_array_equal(a.sample_stats[k], full.sample_stats[k])
    capped = run_nuts(pot, draws=10, max_draws=40, until=lambda n, x: False, **kw)
    assert capped.flat.shape[1] == 40 and capped.sample_stats["lp"].shape == (3, 40)
    h = run_hmc(
        pot,
        seed=0,
        warmup=10,
        draws=5,
        chains=2,
        num_steps=3,
        vectorize_chains=True,
        max_draws=30,
        until=lambda n, x: True,
    )
    assert h.flat.shape == (2, 5, pot.dim)


def test_stopping_rule_needs_vectorized_chains_and_a_cap() -> None:
    pot, _, _ = _small("regression")
    with pytest.raises(ValueError, match="vectorize_chains=True and chains >= 2"):
        run_nuts(pot, seed=0, warmup=5, draws=5, chains=2, max_draws=10, until=lambda n, x: True)
    with pytest.raises(ValueError, match="max_draws must be >= draws"):
        run_nuts(
            pot,
            seed=0,
            warmup=5,
            draws=5,
            chains=2,
            max_draws=4,
            until=lambda n, x: True,
            vectorize_chains=True,
        )
    # the spec side of the rule (kl_target_draws, max_draws, draws_cap) is tested with the
    # price_of_mean_field study in tests/zoo/spec/test_spec_studies.py
