"""Every batched kernel of the table runs in the one loop with the window adaptation."""

from __future__ import annotations

import numpy as np
import pytest

from zoo.inference.mcmc import BATCHED, GaussianPotential, run_batched

#: Each kernel's options for a short run; a new entry of BATCHED needs one here.
OPTIONS = {"nuts": {"max_tree_depth": 4}, "hmc": {"num_steps": 5}}


def test_every_kernel_has_options() -> None:
    assert set(OPTIONS) == set(BATCHED)


@pytest.mark.parametrize("name", sorted(BATCHED))
def test_kernel_runs_in_the_loop(name: str) -> None:
    pot = GaussianPotential(np.diag([0.5, 2.0]))
    res = run_batched(
        name,
        pot,
        seed=0,
        warmup=60,
        draws=30,
        chains=2,
        target_accept=0.8,
        step_size=None,
        adapt_mass_matrix=True,
        until=lambda drawn, kept: kept.shape[1] >= 55,
        max_draws=100,
        **OPTIONS[name],
    )
    assert res.drawn == 55 and res.flat.shape == (2, 55, 2) and np.isfinite(res.flat).all()
    assert res.adapted.step_size.shape == (2,) and res.adapted.inverse_mass_matrix.shape == (2, 2)
    assert {"lp", "step_size", "n_steps", "diverging", "energy", "acceptance_rate"} <= set(
        res.sample_stats
    )
