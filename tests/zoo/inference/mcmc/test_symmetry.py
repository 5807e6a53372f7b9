"""The exact symmetry moves: no-ops on the network's function, invariant for the prior.

Without data the posterior is the prior, so chains started at exact prior draws must still
be prior draws after any number of moves: each weight keeps mean 0 and its prior variance,
and each unit's log balance :math:`\\tfrac12 \\log(A / B)` (:math:`A, B` the prior-whitened
squared norms of its incoming and outgoing weights, :math:`\\chi^2_{n_{in}}` and
:math:`\\chi^2_{n_{out}}`) keeps mean :math:`(\\psi(n_{in}/2) - \\psi(n_{out}/2))/2` and
variance :math:`(\\psi'(n_{in}/2) + \\psi'(n_{out}/2))/4`. A move drawn from a wrong
conditional (e.g. without the Jacobian or the Haar measure) shifts the log balance. All
tolerances are 5 Monte Carlo standard errors.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.special as sc
import torch

from zoo.inference.mcmc.potential import FlatPotential
from zoo.inference.mcmc.symmetry import symmetry_move
from zoo.models.likelihoods import BernoulliLikelihood, CategoricalLikelihood
from zoo.models.mlp import BayesianMLP
from zoo.models.priors import he_prior, normal_prior

N = 20_000


def _pot(widths: list[int], act: str, in_dim: int = 2, lik=None) -> FlatPotential:
    model = BayesianMLP(
        in_dim,
        widths,
        lik or BernoulliLikelihood(),
        act=act,
        weight_prior=he_prior(),
        bias_prior=normal_prior(0.5),
    )
    x = torch.randn(7, in_dim, generator=torch.Generator().manual_seed(0))
    y = torch.randint(0, lik.out_dim if lik else 2, (7,), generator=torch.Generator())
    return FlatPotential(model, x, y)


def _prior_draws(pot: FlatPotential, n: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(11)
    return torch.stack([pot.prior_draw(gen) for _ in range(n)]).double()


def _log_balance(pot: FlatPotential, z: torch.Tensor, i: int) -> np.ndarray:
    """Each unit of hidden layer ``i``'s log balance, ``(C, units)``."""
    s = pot.unravel(z)
    pr = pot.model.prior_params
    w, b = s[f"layer{i}.weight"], s[f"layer{i}.bias"]
    v = s[f"layer{i + 1}.weight"]
    a = (w**2).sum(-1) / pr[f"layer{i}.weight"][1] ** 2 + b**2 / pr[f"layer{i}.bias"][1] ** 2
    bb = (v**2).sum(-2) / pr[f"layer{i + 1}.weight"][1] ** 2
    return (0.5 * torch.log(a / bb)).numpy()


def _assert_prior(pot: FlatPotential, z: torch.Tensor) -> None:
    """Every weight's mean and variance, every layer's log balances, as the prior's."""
    sd = pot._prec.rsqrt().double().numpy()
    x = z.numpy()
    n = len(x)
    assert np.all(np.abs(x.mean(0)) < 5 * sd / np.sqrt(n))
    assert np.all(np.abs(x.var(0) / sd**2 - 1) < 5 * np.sqrt(2 / n))
    dims = pot.model.dims
    for i in range(pot.model.depth):
        n_in, n_out = dims[i] + 1, dims[i + 2]
        mean = 0.5 * (sc.digamma(n_in / 2) - sc.digamma(n_out / 2))
        var = 0.25 * (sc.polygamma(1, n_in / 2) + sc.polygamma(1, n_out / 2))
        lb = _log_balance(pot, z, i)
        assert np.all(np.abs(lb.mean(0) - mean) < 5 * np.sqrt(var / n)), (i, lb.mean(0), mean)
        kurt = 3.5  # the variance's MC error, with room for the log chi-squares' tails
        assert np.all(np.abs(lb.var(0) / var - 1) < 5 * np.sqrt((kurt - 1) / n)), (i, lb.var(0))


@pytest.mark.parametrize(
    ("widths", "act", "in_dim"),
    [([1], "relu", 2), ([3, 2], "leaky_relu", 4), ([2, 3], "tanh", 1), ([2], "linear", 3)],
)
def test_moves_keep_the_prior(widths: list[int], act: str, in_dim: int) -> None:
    pot = _pot(widths, act, in_dim)
    move = symmetry_move("auto", pot, seed=0)
    z0 = _prior_draws(pot, N)
    _assert_prior(pot, z0)  # the check itself holds at exact prior draws
    z = z0
    for _ in range(3):
        z = move(z)
    assert not torch.equal(z, z0)
    _assert_prior(pot, z)


def test_one_unit_rescale_conditional() -> None:
    """One relu unit, 3 numbers in (2 weights and the bias), 1 out: moved from one point,
    t = c^2 (the bias's scale factor squared) follows GIG((3 - 1) / 2, A, B), whose mean is
    sqrt(B / A) K_2(w) / K_1(w), w = sqrt(A B)."""
    pot = _pot([1], "relu", 2)
    move = symmetry_move("rescale", pot, seed=1)
    z0 = _prior_draws(pot, 1).expand(N, -1).clone()
    z1 = move(z0)
    c2 = (z1[:, 2] / z0[:, 2]) ** 2  # layer0.bias (after the 2 weights) scales by c
    pr = pot.model.prior_params
    s = pot.unravel(z0[0])
    a = float((s["layer0.weight"] ** 2).sum() / pr["layer0.weight"][1] ** 2)
    a += float(s["layer0.bias"][0] ** 2 / pr["layer0.bias"][1] ** 2)
    b = float(s["layer1.weight"][0, 0] ** 2 / pr["layer1.weight"][1] ** 2)
    om, eta = np.sqrt(a * b), np.sqrt(b / a)
    mean = eta * sc.kve(2.0, om) / sc.kve(1.0, om)
    m2 = eta**2 * sc.kve(3.0, om) / sc.kve(1.0, om)
    x = c2.numpy()
    assert abs(x.mean() - mean) < 5 * np.sqrt((m2 - mean**2) / N)


@pytest.mark.parametrize("act", ["relu", "leaky_relu", "tanh", "linear"])
def test_move_is_a_no_op_on_the_network(act: str) -> None:
    pot = _pot([5, 4], act, 3, CategoricalLikelihood(3))
    z = _prior_draws(pot, 8)
    z1 = symmetry_move("auto", pot, seed=2)(z)
    x = pot.x.double()
    before = pot.model.apply(x, pot.unravel(z))
    after = pot.model.apply(x, pot.unravel(z1))
    assert not torch.allclose(z, z1)
    torch.testing.assert_close(after, before, rtol=1e-10, atol=1e-10)


def test_sign_flips_half_the_units() -> None:
    pot = _pot([3, 2], "tanh", 2)
    z = _prior_draws(pot, 4000)
    z1 = symmetry_move("sign", pot, seed=3)(z)
    flipped = (z1 * z < 0).double()
    sl = pot.site_slices["layer0.bias"]
    frac = flipped[:, sl].mean().item()
    assert abs(frac - 0.5) < 5 * np.sqrt(0.25 / (4000 * 3))


@pytest.mark.parametrize(
    ("setting", "act", "widths", "match"),
    [
        ("rescale", "tanh", [3], "not a symmetry of tanh"),
        ("sign", "relu", [3], "not a symmetry of relu"),
        ("auto", "relu", [], "needs an MLP with hidden layers"),
    ],
)
def test_refuses_what_has_no_such_symmetry(setting, act, widths, match) -> None:
    with pytest.raises(ValueError, match=f"symmetry_moves: .*{match}"):
        symmetry_move(setting, _pot(widths, act), seed=0)
    assert symmetry_move("off", _pot(widths, act), seed=0) is None
