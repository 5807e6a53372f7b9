"""The symmetry moves in the loop: every batched sampler takes them after its transitions,
goes on from the moved chains (its adaptation intact), records their log density, and a
run stopped and resumed from its checkpoint is the run never stopped."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.zoo.inference.mcmc.test_checkpoint import _stopped_then_resumed
from zoo.inference.mcmc.potential import FlatPotential
from zoo.inference.mcmc.programs import run_method
from zoo.models.likelihoods import CategoricalLikelihood
from zoo.models.mlp import BayesianMLP
from zoo.spec.sections.samplers import (
    ChEESMethod,
    HMCMethod,
    MAMSMethod,
    MCLMCMethod,
    NUTSMethod,
)

RUN = dict(warmup=20, draws=15, chains=3, symmetry_moves="auto")

#: Every batched sampler's section, small, with the moves on.
SECTIONS = {
    "nuts": NUTSMethod(name="m", kind="nuts", vectorize_chains=True, max_tree_depth=4, **RUN),
    "hmc": HMCMethod(name="m", kind="hmc", vectorize_chains=True, num_steps=4, **RUN),
    "chees": ChEESMethod(name="m", kind="chees", max_leapfrog=8, keep_draws=15, **RUN),
    "mclmc": MCLMCMethod(name="m", kind="mclmc", **RUN),
    "mams": MAMSMethod(name="m", kind="mams", **RUN),
}


def _pot(act: str = "relu") -> FlatPotential:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(30, 3, generator=gen)
    y = (x[:, 0] > 0).long() + (x[:, 1] > 0.5).long()
    return FlatPotential(BayesianMLP(3, [4, 3], CategoricalLikelihood(3), act=act), x, y)


@pytest.mark.parametrize("name", sorted(SECTIONS))
def test_every_batched_sampler_takes_the_moves(name: str) -> None:
    pot = _pot()
    on = run_method(SECTIONS[name], pot, seed=4)
    off_section = SECTIONS[name].model_copy(update={"symmetry_moves": "off"})
    off = run_method(off_section, pot, seed=4)
    assert np.all(np.isfinite(on.flat)) and not np.array_equal(on.flat, off.flat)
    assert np.all(np.isfinite(on.adapted.step_size)) and np.all(on.adapted.step_size > 1e-8)
    # the kept log density is the moved chains', not the transition's end before the move
    flat = torch.from_numpy(on.flat.reshape(-1, pot.dim))
    lp = -pot.value_and_grad_batch(flat)[0].numpy().reshape(on.flat.shape[:2])
    np.testing.assert_allclose(on.sample_stats["lp"], lp, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("stop_after", [7, 28])  # in the warm-up of 20, in the draws
@pytest.mark.parametrize("name", ["nuts", "mclmc"])
def test_a_run_with_moves_resumes_bitwise(name: str, stop_after: int) -> None:
    def run(channel):
        return run_method(SECTIONS[name], _pot("tanh"), seed=4, checkpoint=channel)

    plain = run(None)
    again, said = _stopped_then_resumed(run, stop_after)
    assert len(said) == 1 and "resumed" in said[0], said
    np.testing.assert_array_equal(plain.flat, again.flat)
    np.testing.assert_array_equal(plain.sample_stats["lp"], again.sample_stats["lp"])


def test_the_one_chain_path_refuses_the_moves() -> None:
    section = SECTIONS["nuts"].model_copy(update={"vectorize_chains": False})
    with pytest.raises(ValueError, match="symmetry_moves: auto runs in the batched loop"):
        run_method(section, _pot(), seed=0)
