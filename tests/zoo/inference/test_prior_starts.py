"""Over-dispersed starts: chains from independent prior draws, alone or in superchains."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

from tests import specs
from tests.zoo.inference.mcmc.test_sequential import _small
from zoo.execution.cell import run_cell
from zoo.execution.runner import spec_runtime
from zoo.inference.mcmc.programs import BATCHED
from zoo.inference.mcmc.windowed import WindowedProgram
from zoo.inference.sampling import _prior_superchains, superchains
from zoo.seeds import INIT_FIT_STRIDE, Stream, seed_for


def test_superchains_start_at_independent_prior_draws_reproducibly() -> None:
    pot, _, _ = _small("classification")
    stats: dict = {}
    init = _prior_superchains(10, 3, pot, SimpleNamespace(seed=7), stats)
    z = pot.ravel(init)
    assert z.shape == (10, pot.dim) and stats == {"init_fits": 3}
    blocks = [(0, 4), (4, 7), (7, 10)]  # group_sizes: contiguous, the larger first
    assert superchains(10, 3) == (0,) * 4 + (1,) * 3 + (2,) * 3
    for k, (a, b) in enumerate(blocks):
        gen = torch.Generator().manual_seed(seed_for(7 + k * INIT_FIT_STRIDE, Stream.INIT_DRAWS))
        draw = pot.prior_draw(gen)
        assert torch.allclose(z[a:b], draw.expand(b - a, -1).to(z.dtype))
    firsts = torch.stack([z[a] for a, _ in blocks])
    assert torch.cdist(firsts, firsts).add(torch.eye(3) * 1e9).min() > 1.0  # distinct draws
    again = pot.ravel(_prior_superchains(10, 3, pot, SimpleNamespace(seed=7), {}))
    assert torch.equal(z, again)
    other = pot.ravel(_prior_superchains(10, 3, pot, SimpleNamespace(seed=8), {}))
    assert not torch.allclose(z, other)


def test_batched_nuts_from_the_prior_starts_each_chain_at_its_own_draw() -> None:
    pot, _, _ = _small("classification")

    def starts(seed: int) -> torch.Tensor:
        kernel = BATCHED["nuts"](4)
        program = WindowedProgram(
            kernel.transition,
            "nuts",
            trajectory_cap=4,
            seed=seed,
            warmup=10,
            target_accept=0.8,
            step_size=None,
            adapt_mass_matrix=True,
        )
        z, how = program.starts(pot, None, 4)
        assert how == "prior"
        return z

    z = starts(0)
    assert torch.cdist(z, z).add(torch.eye(4) * 1e9).min() > 1.0
    assert torch.equal(z, starts(0)) and not torch.allclose(z, starts(1))


def test_a_chees_cell_runs_in_superchains_from_prior_draws(tmp_path: Path) -> None:
    chees = specs.chees(
        init_from="prior",
        init_fits=2,
        init_spread="mode",
        warmup=20,
        draws=10,
        chains=4,
        keep_draws=5,
        stream_groups=2,
        max_leapfrog=16,
        predictive_draws=5,
    )
    spec = specs.load(
        tmp_path,
        name="prior_starts",
        data=specs.two_moons(n_train=40, n_test=20),
        model=specs.mlp(depth=1, width=3),
        inference=[chees],
    )
    (cell,) = list(spec.cells())
    out = run_cell(cell, spec_runtime(spec, "cpu"))
    assert out.metrics["superchains"] == 2 and np.isfinite(out.metrics["rhat_nested"])
