"""``FlatPotential.compile``: torch.compile'd batched values and gradients equal the eager ones.

Inductor reorders sums, so the tolerance is float rounding of the dtype (a few ulps of the
largest term), not equality. Without a C++ compiler on the CPU the call fails with a message
that names the fix, before anything is traced.
"""

from __future__ import annotations

import shutil

import pytest
import torch

from zoo.inference.mcmc.potential import FlatPotential
from zoo.models.likelihoods import BernoulliLikelihood, CategoricalLikelihood, GaussianLikelihood
from zoo.models.mlp import BayesianMLP

HAS_CXX = shutil.which("c++") is not None or shutil.which("g++") is not None


def _potential(lik, dtype: torch.dtype) -> FlatPotential:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(50, 2, generator=g, dtype=dtype)
    y = x[:, 0] if isinstance(lik, GaussianLikelihood) else (x[:, 0] > 0).long()
    return FlatPotential(BayesianMLP(2, [5, 4], lik), x, y)


@pytest.mark.slow  # each case compiles twice: 20 to 30 s
@pytest.mark.skipif(not HAS_CXX, reason="no C++ compiler: inductor cannot build CPU code")
@pytest.mark.parametrize(
    ("lik", "dtype"),
    [
        (CategoricalLikelihood(3), torch.float32),
        (BernoulliLikelihood(), torch.float64),
        (GaussianLikelihood(noise=None), torch.float32),
    ],
)
def test_compiled_batch_equals_eager(lik, dtype) -> None:
    pot = _potential(lik, dtype)
    z = torch.randn(6, pot.dim, generator=torch.Generator().manual_seed(1), dtype=dtype)
    u0, g0 = pot.value_and_grad_batch(z)
    assert not pot.compiled
    seconds = pot.compile(rows=6)
    assert pot.compiled and seconds > 0
    u1, g1 = pot.value_and_grad_batch(z)
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    torch.testing.assert_close(u1, u0, rtol=tol, atol=tol * float(u0.abs().max()))
    torch.testing.assert_close(g1, g0, rtol=tol, atol=tol * float(g0.abs().max()))
    # another number of rows compiles again and still agrees
    u2, g2 = pot.value_and_grad_batch(z[:2])
    torch.testing.assert_close(g2, g0[:2], rtol=tol, atol=tol * float(g0.abs().max()))


def test_compile_without_a_cpp_compiler_names_the_fix(monkeypatch) -> None:
    pot = _potential(BernoulliLikelihood(), torch.float32)
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(RuntimeError, match="C\\+\\+ compiler.*compile: false"):
        pot.compile(rows=2)
    assert not pot.compiled
