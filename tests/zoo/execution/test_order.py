"""The order in which cells go to the workers: the most work first (zoo.execution.order)."""

from __future__ import annotations

from pathlib import Path

import pytest

from zoo.execution.order import longest_first, work_bound
from zoo.spec import cells, load_spec

ROOT = Path(__file__).resolve().parents[3]


def test_default_spec_runs_its_deepest_sampled_cells_first() -> None:
    spec = load_spec(ROOT / "specs" / "two_moons_depth.yaml")
    sweep = cells(spec)
    order = longest_first(sweep)
    nuts = [c for c in sweep if c.method.kind == "nuts"]
    # warm-up 300 + max_draws 1500 transitions, 8 chains x 3 rungs of tempering, a full
    # tree of depth 8, N = 500
    assert {work_bound(c) for c in nuts} == {(300 + 1500) * 8 * 3 * 255 * 500.0}
    assert [c.spec.model.depth for c in order[:12]] == [4, 4, 4, 3, 3, 3, 2, 2, 2, 1, 1, 1]
    assert all(c.method.kind == "nuts" for c in order[:12])
    # the methods without chains follow, deeper first, then in sweep order
    rest = [c for c in sweep if c.method.kind != "nuts"]
    assert {work_bound(c) for c in rest} == {0.0}
    assert order[12:] == sorted(rest, key=lambda c: -c.spec.model.depth)
    assert [c.axes["seed"] for c in order[12:15]] == [0, 1, 2]


@pytest.mark.parametrize(
    ("method", "gradients"),
    [
        ({"kind": "hmc", "num_steps": 7}, 7),
        (
            {
                "kind": "chees",
                "chains": 8,
                "max_leapfrog": 64,
                "target_ess": 100,
                "max_draws": 400,
                "keep_draws": 20,
            },
            64,
        ),
        ({"kind": "mams", "chains": 8, "max_steps": 32}, 64),
        ({"kind": "mclmc", "chains": 8}, 2),
    ],
)
def test_work_bound_reads_each_samplers_cap(method: dict, gradients: int) -> None:
    spec = load_spec(
        ROOT / "specs" / "two_moons_depth.yaml",
        overrides=[
            f"inference=[{{name: s, warmup: 10, draws: 50, {', '.join(f'{k}: {v}' for k, v in method.items())}}}]",
            "studies=[]",
            "sweep.model.depth=[2]",
            "sweep.seed=[0]",
        ],
    )
    (cell,) = cells(spec)
    assert cell.method.transition_gradients() == gradients
    draws = method.get("max_draws", 50)
    chains = method.get("chains", 1)
    assert work_bound(cell) == (10 + draws) * chains * gradients * 500.0
