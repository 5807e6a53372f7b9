"""Every guide under Pyro's JIT ELBOs: no tracer warning, one trace, the eager losses.

Before the fix, the k-tied, matrix-normal and full-rank distributions compared traced sizes
in Python (hundreds of ``TracerWarning`` per run under Pyro's ``JitTraceMeanField_ELBO``,
which also traces again on every step), and :class:`guides.JitTraceMeanField_ELBO` (the
same estimator, traced once) did not exist.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from contextlib import nullcontext

import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro.infer import SVI, JitTrace_ELBO, Trace_ELBO, TraceMeanField_ELBO
from pyro.infer import JitTraceMeanField_ELBO as PyroJitTraceMeanField_ELBO
from pyro.nn import PyroModule, PyroSample
from torch import nn

import guides
from guides.local_reparam import LocalReparameterization

STEPS = 4


def _prior(*shape: int) -> dist.Distribution:
    # tensors, not Python floats: torch.tensor(float) inside a trace warns (the model's own)
    return dist.Normal(torch.tensor(0.0), torch.tensor(1.0)).expand(shape).to_event(len(shape))


class _Net(PyroModule):
    """A 3-8-1 regression network with a learned (positive) noise: matrix and vector sites."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = PyroModule[nn.Linear](3, 8)
        self.fc1.weight = PyroSample(_prior(8, 3))
        self.fc1.bias = PyroSample(_prior(8))
        self.fc2 = PyroModule[nn.Linear](8, 1)
        self.fc2.weight = PyroSample(_prior(1, 8))
        self.fc2.bias = PyroSample(_prior(1))
        self.register_buffer("noise_loc", torch.tensor(-1.0))
        self.register_buffer("noise_scale", torch.tensor(0.5))

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> None:
        noise = pyro.sample("noise", dist.LogNormal(self.noise_loc, self.noise_scale))
        f = self.fc2(torch.relu(self.fc1(x))).squeeze(-1)
        with pyro.plate("data", x.shape[0]):
            pyro.sample("obs", dist.Normal(f, noise), obs=y)


GUIDES: dict[str, Callable] = {
    "mean_field": lambda m: guides.AutoMeanField(m),
    "k_tied": lambda m: guides.AutoKTiedNormal(m, 2),
    "fixed_variance": lambda m: guides.AutoFixedVarianceNormal(m, 0.1),
    "matrix_normal": lambda m: guides.AutoMatrixNormal(m),
    "full_rank": lambda m: guides.AutoFullRankNormal(m),
    "local_reparam": lambda m: guides.AutoMeanField(m),
}
ELBOS = {
    "JitTrace_ELBO": (JitTrace_ELBO, Trace_ELBO),
    "pyro.JitTraceMeanField_ELBO": (PyroJitTraceMeanField_ELBO, TraceMeanField_ELBO),
    "guides.JitTraceMeanField_ELBO": (guides.JitTraceMeanField_ELBO, TraceMeanField_ELBO),
}


def _losses(guide_name: str, elbo: pyro.infer.ELBO, compile_first: bool) -> list[float]:
    """Losses of ``STEPS`` SVI steps, torch's generator seeded before each step.

    The guide is set up first (its ``init_to_median`` draws). A JIT ELBO's first call
    traces, which runs the model and guide more than once (more draws than an eager step):
    with ``compile_first`` it is made before the seeded steps and its gradients dropped, so
    that both runs then see the same draws and the same parameters at every step.
    """
    # Argument validation compares traced sizes in Python (torch's checks, in the model's
    # distributions too): off, as Pyro's JIT tutorial runs it.
    with pyro.validation_enabled(False):
        pyro.clear_param_store()
        pyro.set_rng_seed(0)
        gen = torch.Generator().manual_seed(1)
        x = torch.randn(20, 3, generator=gen)
        y = x[:, 0] - x[:, 1] + 0.1 * torch.randn(20, generator=gen)
        model = _Net()
        guide = GUIDES[guide_name](model)
        local = LocalReparameterization(strict=True) if guide_name == "local_reparam" else None
        guide(x, y)
        if compile_first:
            with local or nullcontext():
                elbo.loss_and_grads(model, guide, x, y)
            for p in pyro.get_param_store().values():
                p.unconstrained().grad = None
        svi = SVI(model, guide, pyro.optim.Adam({"lr": 1e-2}), elbo)
        out = []
        for step in range(STEPS):
            pyro.set_rng_seed(100 + step)
            with local or nullcontext():
                out.append(svi.step(x, y))
    return out


@pytest.mark.parametrize("elbo_name", list(ELBOS))
@pytest.mark.parametrize("guide_name", list(GUIDES))
def test_jit_elbo_matches_eager_without_tracer_warnings(guide_name: str, elbo_name: str) -> None:
    jit_cls, eager_cls = ELBOS[elbo_name]
    eager = _losses(guide_name, eager_cls(), compile_first=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.filterwarnings("ignore", category=DeprecationWarning)  # torch.jit.trace's
        jit = _losses(guide_name, jit_cls(), compile_first=True)
    tracer = [w for w in caught if issubclass(w.category, torch.jit.TracerWarning)]
    assert not tracer, sorted({f"{w.filename}:{w.lineno}: {str(w.message)[:60]}" for w in tracer})
    if elbo_name == "pyro.JitTraceMeanField_ELBO":
        # Pyro 1.9's class traces again on every step (more draws than an eager step), so
        # only its warnings and finiteness are checked; guides.JitTraceMeanField_ELBO keeps
        # its trace and gives the eager losses.
        assert all(map(math.isfinite, jit))
    else:
        assert jit == pytest.approx(eager, rel=1e-5, abs=1e-5)


def test_guides_jit_mean_field_elbo_traces_once() -> None:
    """Pyro 1.9's class builds a new compiled loss on every call; ours keeps the first."""
    elbo = guides.JitTraceMeanField_ELBO()
    traced = []
    real_trace = torch.jit.trace

    def counting_trace(*args, **kwargs):
        traced.append(1)
        return real_trace(*args, **kwargs)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.jit.trace, saved = counting_trace, torch.jit.trace
        try:
            _losses("mean_field", elbo, compile_first=True)
        finally:
            torch.jit.trace = saved
    assert len(traced) == 1
