"""The folder rule of zoo/inference/mcmc (its ``__init__`` docstring): each module imports
only modules of this folder on lower floors (the first floor also its own; a kernel also
the shared types and threshold of ``kernel`` and ``batched`` and the isokinetic integrator
of ``mclmc``); adaptations and the loop
import no kernel."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import zoo.inference.mcmc as mcmc

FOLDER = Path(mcmc.__file__).parent
#: Floor of every module of the folder; a new module must be given one here.
FLOORS = {
    "potential": 1,
    "hand_backward": 1,
    "replay": 1,
    "functional": 1,
    "pyro_potential": 1,
    "gaussian": 1,
    "dual_averaging": 1,
    "welford": 1,
    "result": 1,
    "streaming": 1,
    "ess": 1,
    "thinning": 1,
    "resume": 1,
    "gig": 1,
    "nuts_record": 1,
    "nuts_tree": 1,
    "kernel": 2,
    "batched": 2,
    "chees": 2,
    "mclmc": 2,
    "mams": 2,
    "symmetry": 2,
    "window_adaptation": 3,
    "chees_adaptation": 3,
    "step_size": 3,
    "metrics": 3,
    "trajectory_floor": 3,
    "mclmc_adaptation": 3,
    "mams_adaptation": 3,
    "loop": 4,
    "windowed": 5,
    "chees_hmc": 5,
    "sequential": 5,
    "microcanonical": 5,
    "tempering": 6,
    "programs": 7,
    "samplers": 8,
    "user": 9,
}
ADAPTATIONS = ("window_adaptation", "chees_adaptation", "mclmc_adaptation", "mams_adaptation")
KERNELS = ("kernel", "batched", "chees", "mclmc", "mams")


def _imports(name: str) -> set[str]:
    tree = ast.parse((FOLDER / f"{name}.py").read_text())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            mods = [node.module]
        elif isinstance(node, ast.Import):
            mods = [a.name for a in node.names]
        else:
            continue
        for m in mods:
            if m.startswith("zoo.inference.mcmc."):
                out.add(m.split(".")[3])
    return out


def test_every_module_has_a_floor() -> None:
    names = {p.stem for p in FOLDER.glob("*.py")} - {"__init__"}
    assert names == set(FLOORS)


@pytest.mark.parametrize("name", sorted(FLOORS))
def test_imports_go_down(name: str) -> None:
    for dep in _imports(name):
        same_floor_ok = FLOORS[name] == 1 or (
            FLOORS[name] == 2 and dep in ("kernel", "batched", "mclmc")
        )
        assert FLOORS[dep] < FLOORS[name] or (FLOORS[dep] == FLOORS[name] and same_floor_ok), (
            name,
            dep,
        )
    if name in ADAPTATIONS or name == "loop":
        assert not _imports(name) & set(KERNELS), name
