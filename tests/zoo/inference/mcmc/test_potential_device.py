"""The GPU path makes its tensors on the data's device.

A tensor made from sizes or Python numbers alone (``torch.tensor(loc)``,
``torch.zeros(d)``) lands on the default device, the CPU, and then meets CUDA data: the bug
were once found in the potential's prior constants. Without a GPU this is checked at the
source: every such constructor in the modules of the batched GPU path names its ``device=``
(or spreads ``**opts`` that hold it), or draws from a CPU ``generator=`` on purpose (the
same numbers on every device; the caller moves them) or names ``device="cpu"`` for a
host-side constant.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

import zoo.inference.mcmc as mcmc
from zoo.inference.mcmc.potential import FlatPotential
from zoo.models.likelihoods import CategoricalLikelihood
from zoo.models.mlp import BayesianMLP

GPU_PATH = ["potential.py", "chees.py", "streaming.py"]
CONSTRUCTORS = {
    "eye",
    "zeros",
    "ones",
    "full",
    "empty",
    "arange",
    "linspace",
    "tensor",
    "as_tensor",
    "randn",
    "rand",
    "randint",
    "normal",
}


@pytest.mark.parametrize("module", GPU_PATH)
def test_gpu_path_makes_tensors_on_a_named_device(module: str) -> None:
    path = Path(mcmc.__file__).parent / module
    offenders = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        if node.func.attr not in CONSTRUCTORS or getattr(node.func.value, "id", None) != "torch":
            continue
        keywords = {k.arg for k in node.keywords}
        if keywords & {"device", "generator", None}:
            continue
        offenders.append(f"{module}:{node.lineno}: {ast.unparse(node)}")
    assert not offenders, "tensor constructors without device=:\n" + "\n".join(offenders)


def test_prior_constants_live_with_the_data_and_prior_draws_are_device_independent() -> None:
    def he(fan_in: int) -> tuple[float, float]:
        return 0.1, (2.0 / fan_in) ** 0.5  # non-zero mean, precisions that differ by layer

    g = torch.Generator().manual_seed(0)
    x = torch.randn(20, 3, generator=g, dtype=torch.float64)
    y = torch.randint(0, 2, (20,), generator=g)
    pot = FlatPotential(BayesianMLP(3, [4, 5], CategoricalLikelihood(2), weight_prior=he), x, y)
    assert pot._loc.device == x.device and pot._prec.device == x.device
    assert pot._loc.dtype == pot._prec.dtype == x.dtype
    a = pot.prior_draw(torch.Generator().manual_seed(3))
    b = pot.prior_draw(torch.Generator().manual_seed(3))
    assert a.device == x.device and a.equal(b)
