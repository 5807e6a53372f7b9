"""Tests of AutoMatrixNormal on plain Pyro models (no zoo import)."""

from __future__ import annotations

import math

import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro.distributions.kl import kl_divergence
from pyro.infer import SVI, Trace_ELBO, TraceMeanField_ELBO
from pyro.optim import Adam
from torch.distributions import Normal

from guides.distributions import MatrixNormal
from guides.matrix_normal import AutoMatrixNormal
from tests.guides._models import (
    check_plain_model_guide,
    fit_and_average,
    plain_data,
    plain_model,
    train_and_save,
)


def _kron(v: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    return torch.kron(v.contiguous(), u.contiguous())


def _vec(w: torch.Tensor) -> torch.Tensor:
    return w.mT.reshape(-1)  # column-major, the convention of V (x) U


# --------------------------------------------------------------------------------------
# 1. A model whose exact posterior is matrix normal.
# --------------------------------------------------------------------------------------

M_LR, N_LR, T_LR, NOISE = 3, 2, 30, 1.0
U0 = torch.tensor([[1.0, 0.6, 0.3], [0.6, 1.0, 0.5], [0.3, 0.5, 0.8]])
V0 = torch.tensor([[2.0, -0.8], [-0.8, 1.0]])
A0, B0 = torch.linalg.cholesky(U0), torch.linalg.cholesky(V0)


def _regression_data() -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(T_LR, N_LR, generator=gen) @ torch.tensor([[1.0, 0.7], [0.0, 0.5]])
    w = A0 @ torch.randn(M_LR, N_LR, generator=gen) @ B0.T
    y = x @ w.T + NOISE * torch.randn(T_LR, M_LR, generator=gen) @ A0.T
    return x, y


def kronecker_model(x: torch.Tensor, y: torch.Tensor) -> None:
    r"""W ~ MN(0, U0, V0); y_t ~ N(W x_t, NOISE^2 U0).

    Completing the square in :math:`\operatorname{tr}(U_0^{-1} W (V_0^{-1} + X^\top X /
    \sigma^2) W^\top) - 2 \operatorname{tr}(U_0^{-1} W X^\top Y / \sigma^2)` gives the
    posterior :math:`\mathcal{MN}(Y^\top X V / \sigma^2, U_0, V)` with
    :math:`V = (V_0^{-1} + X^\top X / \sigma^2)^{-1}`.
    """
    w = pyro.sample("w", MatrixNormal(torch.zeros(M_LR, N_LR), A0, B0))
    noise = dist.MultivariateNormal((w @ x.T).mT, scale_tril=NOISE * A0)
    pyro.sample("y", noise.to_event(1), obs=y)


@pytest.mark.slow
def test_full_matrix_normal_recovers_a_matrix_normal_posterior():
    x, y = _regression_data()
    v_post = torch.linalg.inv(torch.linalg.inv(V0) + x.T @ x / NOISE**2)
    mean = y.T @ x / NOISE**2 @ v_post
    cov = _kron(v_post, U0)
    sd = cov.diagonal().sqrt()
    corr = cov / torch.outer(sd, sd)
    # Far from diagonal: strong correlations, marginal sd >= 2x the mean-field sd.
    assert (corr - torch.eye(M_LR * N_LR)).abs().max() > 0.5
    assert (sd * torch.linalg.inv(cov).diagonal().sqrt()).min() > 2.0

    guide = AutoMatrixNormal(kronecker_model, row_cov="full", col_cov="full")

    def record(guide: AutoMatrixNormal) -> tuple[torch.Tensor, torch.Tensor]:
        u, v = guide.get_covariances("w")
        return guide.locs.w, _kron(v, u)

    # 600 steps, lr 0.05 -> 2e-3; Polyak-Ruppert averages of the last 200 iterates
    loc, cov_q = fit_and_average(
        kronecker_model, guide, (x, y), record, 600, 200, 0.05, 2e-3, max_plate_nesting=0
    )
    # Tolerance: the KL(MN || MN) term is closed form; noise comes from the likelihood
    # term (16 particles). Measured over seeds 0-5 with these settings: worst loc error
    # 0.033 posterior sd, worst covariance error 0.047 in correlation units, worst sd
    # error 2.4 %. Tolerances are about 2x those; a mean-field answer would miss the
    # correlations by > 0.5 and the sds by a factor > 2.
    assert ((_vec(loc) - _vec(mean)).abs() / sd).max() < 0.08
    assert ((cov_q - cov) / torch.outer(sd, sd)).abs().max() < 0.1
    torch.testing.assert_close(cov_q.diagonal().sqrt(), sd, rtol=0.05, atol=0.0)
    # row and column covariances separately (identified up to a scalar)
    u, v = (t.detach() for t in guide.get_covariances("w"))
    torch.testing.assert_close(u / u.trace(), U0 / U0.trace(), atol=0.05, rtol=0.0)


# --------------------------------------------------------------------------------------
# 2. Parameterisation: initial marginals, normalised factors, counts, closed-form KL.
# --------------------------------------------------------------------------------------


def _matrix_model() -> None:
    pyro.sample("w", dist.Normal(0.0, 0.5).expand([4, 3]).to_event(2))
    pyro.sample("conv", dist.Normal(0.0, 0.5).expand([2, 3, 2]).to_event(3))
    pyro.sample("b", dist.Normal(0.0, 0.5).expand([4]).to_event(1))


COVS = [("diag", "diag"), ("full", "diag"), ("diag", "full"), ("full", "full")]


@pytest.mark.parametrize(("row_cov", "col_cov"), COVS)
def test_initial_marginal_sd_is_init_scale(row_cov, col_cov):
    guide = AutoMatrixNormal(_matrix_model, row_cov, col_cov, init_scale=0.2)
    guide()
    assert guide.matrix_sites == ["w", "conv"]
    for info in guide.latent_sites.values():
        _, sd = guide._unconstrained_loc_scale(info)
        torch.testing.assert_close(sd.detach(), torch.full(info.unconstrained_shape, 0.2))


@pytest.mark.parametrize(("row_cov", "col_cov"), COVS)
def test_factors_are_normalised_and_scale_sits_in_log_scale(row_cov, col_cov):
    guide = AutoMatrixNormal(_matrix_model, row_cov, col_cov)
    guide()
    with torch.no_grad():  # arbitrary parameter values
        for p in guide.parameters():
            p.copy_(torch.randn_like(p))
    row, col = guide._scale_trils(guide.latent_sites["w"])
    log_scale = guide.log_scale.w.detach()
    for factor, expected in ((row, log_scale), (col, 0.0)):
        log_diag = factor.detach().diagonal().log()
        torch.testing.assert_close(log_diag.mean(), torch.as_tensor(expected))
        assert torch.equal(factor, factor.tril())
    # the sampled distribution is the one get_covariances describes
    q = guide.get_posterior("w")
    u, v = guide.get_covariances("w")
    cov = _kron(v.detach(), u.detach())
    torch.testing.assert_close(_vec(q.variance.detach()), cov.diagonal())
    with pytest.raises(KeyError, match="'b' is not a matrix site"):
        guide.get_covariances("b")


@pytest.mark.parametrize(("row_cov", "col_cov"), COVS)
def test_num_variational_params_matches_table_1_plus_one_scale(row_cov, col_cov):
    m, n = 5, 3

    def model():
        pyro.sample("w", dist.Normal(0.0, 1.0).expand([m, n]).to_event(2))
        pyro.sample("b", dist.Normal(0.0, 1.0).expand([m]).to_event(1))

    guide = AutoMatrixNormal(model, row_cov, col_cov)
    guide()
    # Table 1 of Swiatkowski et al. (2020): MN mn + m(m+1)/2 + n(n+1)/2, MN (diagonal)
    # mn + m + n; we store one more scalar (the overall log-scale s); bias is 2m.
    row = m if row_cov == "diag" else m * (m + 1) // 2
    col = n if col_cov == "diag" else n * (n + 1) // 2
    assert guide.num_variational_params == m * n + row + col + 1 + 2 * m


def test_trace_mean_field_elbo_uses_closed_form_kl():
    guide = AutoMatrixNormal(_matrix_model, "full", "full", init_scale=0.3)
    guide()
    with torch.no_grad():  # make the covariances non-trivial
        for name, p in guide.named_parameters():
            if name.startswith(("row.", "col.")):
                p.copy_(0.3 * torch.randn_like(p))
    expected = 0.0
    for name, info in guide.latent_sites.items():
        loc, sd = (t.detach() for t in guide._unconstrained_loc_scale(info))
        prior = dist.Normal(0.0, 0.5).expand(loc.shape).to_event(loc.dim())
        if name == "b":
            expected += float(kl_divergence(dist.Normal(loc, sd).to_event(1), prior))
        else:  # dense check: MVN with covariance V (x) U against the iid prior
            u, v = (t.detach() for t in guide.get_covariances(name))
            q = dist.MultivariateNormal(_vec(loc.reshape(u.shape[0], -1)), _kron(v, u))
            p = dist.MultivariateNormal(torch.zeros(loc.numel()), 0.25 * torch.eye(loc.numel()))
            expected += float(kl_divergence(q, p))
    losses = [TraceMeanField_ELBO().loss(_matrix_model, guide) for _ in range(4)]
    assert losses == [pytest.approx(expected, rel=1e-5)] * 4  # exact, zero variance
    mc = torch.tensor([Trace_ELBO().loss(_matrix_model, guide) for _ in range(4)])
    assert mc.std() > 0.1


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"row_cov": "dense"}, r"row_cov must be one of \['diag', 'full'\]"),
        ({"col_cov": None}, r"col_cov must be one of \['diag', 'full'\]"),
        ({"init_scale": 0.0}, "init_scale must be a finite number > 0"),
    ],
)
def test_invalid_arguments_raise(kwargs, match):
    with pytest.raises(ValueError, match=match):
        AutoMatrixNormal(_matrix_model, **kwargs)


# --------------------------------------------------------------------------------------
# 3. The plain Pyro model of _models.py (matrix weight, bias, local latent, positive site).
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("row_cov", "col_cov"), [("diag", "diag"), ("full", "full")])
def test_plain_model_svi_predictive_median_quantiles(row_cov, col_cov):
    x, y = plain_data()
    guide = AutoMatrixNormal(plain_model, row_cov, col_cov)
    svi = SVI(plain_model, guide, Adam({"lr": 0.01}), TraceMeanField_ELBO())
    assert all(math.isfinite(svi.step(x, y)) for _ in range(5))
    assert guide.matrix_sites == ["layer.weight"]

    _, qs = check_plain_model_guide(guide, MatrixNormal, x, y)
    post = guide.get_posterior("layer.weight")
    torch.testing.assert_close(
        qs["layer.weight"][2], post.mean + post.stddev * Normal(0.0, 1.0).icdf(torch.tensor(0.9))
    )


def test_state_dict_round_trip(tmp_path):
    x, y = plain_data()
    guide = AutoMatrixNormal(plain_model, "full", "diag")
    path = tmp_path / "guide.pt"
    train_and_save(plain_model, guide, (x, y), path)
    expected_cov = [t.detach() for t in guide.get_covariances("layer.weight")]
    expected_median = guide.median()

    pyro.clear_param_store()
    fresh = AutoMatrixNormal(plain_model, "full", "diag")
    fresh(x, y)
    fresh.load_state_dict(torch.load(path, weights_only=True))
    for got, want in zip(fresh.get_covariances("layer.weight"), expected_cov, strict=True):
        assert torch.equal(got.detach(), want)
    got_median = fresh.median()
    for name in expected_median:
        assert torch.equal(got_median[name], expected_median[name]), name
