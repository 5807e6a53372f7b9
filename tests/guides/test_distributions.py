"""KTiedNormal and MatrixNormal against the equivalent dense MultivariateNormal."""

from __future__ import annotations

import math

import pyro.distributions as dist
import pytest
import torch
from pyro.distributions.kl import kl_divergence
from torch.distributions.kl import _dispatch_kl

from guides.distributions import KTiedNormal, MatrixNormal, matrix_shape

M, N, K = 3, 4, 2


def _vec(w: torch.Tensor) -> torch.Tensor:
    """Column-major vec of the trailing (m, n) matrix (the convention of V (x) U)."""
    return w.mT.reshape(w.shape[:-2] + (-1,))


def _tril(size: int, *batch: int) -> torch.Tensor:
    a = torch.randn(*batch, size, size).tril()
    a.diagonal(dim1=-2, dim2=-1).copy_(0.5 + torch.rand(*batch, size))
    return a


def _ktied(*batch: int) -> KTiedNormal:
    return KTiedNormal(
        torch.randn(*batch, M, N), 0.2 + torch.rand(*batch, M, K), 0.2 + torch.rand(*batch, N, K)
    )


def _matrix_normal(*batch: int) -> MatrixNormal:
    return MatrixNormal(torch.randn(*batch, M, N), _tril(M, *batch), _tril(N, *batch))


def _dense(d: KTiedNormal | MatrixNormal) -> dist.MultivariateNormal:
    """The same distribution as a MultivariateNormal over column-major vec(W)."""
    if isinstance(d, KTiedNormal):
        cov = torch.diag_embed(_vec(d.stddev) ** 2)
    else:
        cov = torch.vmap(torch.kron)(
            d.col_covariance.reshape(-1, N, N), d.row_covariance.reshape(-1, M, M)
        ).reshape(d.batch_shape + (M * N, M * N))
    return dist.MultivariateNormal(_vec(d.loc), covariance_matrix=cov)


def _zoo_prior(scale: float = 0.7, loc: float = 0.0) -> dist.Independent:
    """The exact prior object zoo's models use for a weight matrix."""
    return dist.Normal(loc, scale).expand([M, N]).to_event(2)


# ------------------------------------------------------------------------- densities


@pytest.mark.parametrize("make", [_ktied, _matrix_normal], ids=["ktied", "matrix_normal"])
@pytest.mark.parametrize("batch", [(), (2,)], ids=["unbatched", "batched"])
def test_log_prob_entropy_moments_match_dense_mvn(make, batch):
    d = make(*batch)
    dense = _dense(d)
    assert d.batch_shape == batch and d.event_shape == (M, N)
    x = d.sample((5,))
    assert x.shape == (5, *batch, M, N)
    torch.testing.assert_close(d.log_prob(x), dense.log_prob(_vec(x)))
    torch.testing.assert_close(d.entropy(), dense.entropy())
    torch.testing.assert_close(_vec(d.mean), dense.mean)
    torch.testing.assert_close(_vec(d.variance), dense.variance)
    torch.testing.assert_close(d.stddev, d.variance.sqrt())


def test_ktied_stddev_is_u_vt():
    d = _ktied()
    torch.testing.assert_close(d.stddev, d.u @ d.v.T)
    assert d.rank == K


@pytest.mark.parametrize("make", [_ktied, _matrix_normal], ids=["ktied", "matrix_normal"])
def test_sample_mean_and_covariance_within_monte_carlo_error(make):
    d = make()
    dense = _dense(d)
    n = 20_000
    x = _vec(d.sample((n,)))
    mean, cov = dense.mean, dense.covariance_matrix
    se_mean = (cov.diagonal() / n).sqrt()
    assert ((x.mean(0) - mean).abs() <= 5 * se_mean).all()
    # sd of an empirical covariance entry of a Gaussian: sqrt((S_ii S_jj + S_ij^2) / n)
    emp = torch.cov(x.T)
    var_diag = cov.diagonal()
    se_cov = ((var_diag[:, None] * var_diag[None, :] + cov**2) / n).sqrt()
    assert ((emp - cov).abs() <= 5 * se_cov).all()
    if isinstance(d, MatrixNormal):  # the Kronecker structure is really sampled
        assert (cov - torch.diag_embed(var_diag)).abs().max() > 10 * se_cov.max()


@pytest.mark.parametrize("make", [_ktied, _matrix_normal], ids=["ktied", "matrix_normal"])
def test_gradients_flow_through_rsample(make):
    d = make()
    params = [d.loc] + ([d.u, d.v] if isinstance(d, KTiedNormal) else [d.scale_tril_row])
    params = [p.detach().requires_grad_() for p in params]
    if isinstance(d, KTiedNormal):
        d = KTiedNormal(*params)
    else:
        d = MatrixNormal(params[0], params[1], d.scale_tril_col)
    assert d.has_rsample
    d.rsample((3,)).pow(2).sum().backward()
    for p in params:
        assert p.grad is not None and p.grad.abs().sum() > 0


@pytest.mark.parametrize("make", [_ktied, _matrix_normal], ids=["ktied", "matrix_normal"])
def test_expand_and_broadcast_batch_shapes(make):
    d = make()
    e = d.expand((5, 1))
    assert e.batch_shape == (5, 1) and e.event_shape == (M, N)
    assert e.sample().shape == (5, 1, M, N)
    x = d.sample()
    torch.testing.assert_close(e.log_prob(x), d.log_prob(x).expand(5, 1))
    torch.testing.assert_close(e.entropy(), d.entropy().expand(5, 1))
    # parameters with different batch shapes broadcast
    if isinstance(d, KTiedNormal):
        b = KTiedNormal(torch.zeros(2, 1, M, N), d.u.expand(3, M, K), d.v)
    else:
        b = MatrixNormal(torch.zeros(2, 1, M, N), d.scale_tril_row.expand(3, M, M), _tril(N))
    assert b.batch_shape == (2, 3)
    assert b.log_prob(torch.zeros(M, N)).shape == (2, 3)


@pytest.mark.parametrize("cls", [KTiedNormal, MatrixNormal])
def test_event_dim_above_two_views_all_but_first_dim_as_columns(cls):
    event = (2, 3, 2)  # matrix view (2, 6): one "filter" per row
    assert matrix_shape(event) == (2, 6)
    assert matrix_shape((32, 1, 3, 3)) == (32, 9)  # PyTorch conv kernel (out, in, kh, kw)
    loc = torch.randn(event)
    if cls is KTiedNormal:
        d = cls(loc, torch.rand(2, 1) + 0.1, torch.rand(6, 1) + 0.1, event_dim=3)
        flat = cls(loc.reshape(2, 6), d.u, d.v)
        # row i of the matrix view is filter i: its stds are u_i * v
        torch.testing.assert_close(d.stddev[1], (d.u[1] * d.v[:, 0]).reshape(3, 2))
    else:
        d = cls(loc, _tril(2), _tril(6), event_dim=3)
        flat = cls(loc.reshape(2, 6), d.scale_tril_row, d.scale_tril_col)
    assert d.event_shape == event and d.batch_shape == ()
    x = d.sample((4,))
    assert x.shape == (4, *event)
    torch.testing.assert_close(d.log_prob(x), flat.log_prob(x.reshape(4, 2, 6)))
    torch.testing.assert_close(d.variance, flat.variance.reshape(event))
    prior = dist.Normal(0.0, 1.0).expand(event).to_event(3)
    prior_flat = dist.Normal(0.0, 1.0).expand([2, 6]).to_event(2)
    torch.testing.assert_close(kl_divergence(d, prior), kl_divergence(flat, prior_flat))


def test_invalid_arguments_raise():
    with pytest.raises(ValueError, match="u must have shape batch"):
        KTiedNormal(torch.zeros(M, N), torch.ones(N, K), torch.ones(N, K))
    with pytest.raises(ValueError, match="same rank k"):
        KTiedNormal(torch.zeros(M, N), torch.ones(M, K), torch.ones(N, K + 1))
    with pytest.raises(ValueError, match="event_dim must be an int >= 2"):
        KTiedNormal(torch.zeros(M, N), torch.ones(M, K), torch.ones(N, K), event_dim=1)
    with pytest.raises(ValueError, match="scale_tril_row must have shape"):
        MatrixNormal(torch.zeros(M, N), torch.eye(N), torch.eye(N))
    with pytest.raises(ValueError, match="at least 2 dims"):
        matrix_shape((3,))
    with pytest.raises(ValueError):  # validate_args catches a non-positive u
        KTiedNormal(torch.zeros(M, N), -torch.ones(M, K), torch.ones(N, K), validate_args=True)


# ------------------------------------------------------------------------------ KLs


def _dense_prior(loc: torch.Tensor, scale: torch.Tensor) -> dist.MultivariateNormal:
    loc, scale = torch.broadcast_tensors(loc, scale)
    return dist.MultivariateNormal(_vec(loc), torch.diag_embed(_vec(scale) ** 2))


@pytest.mark.parametrize("make", [_ktied, _matrix_normal], ids=["ktied", "matrix_normal"])
def test_kl_to_zoo_prior_dispatches_and_matches_dense(make):
    d = make()
    prior = _zoo_prior()
    # pyro's kl_divergence is torch's registry; it must pick our function for these objects
    fn = _dispatch_kl(type(d), type(prior))
    assert fn.__module__.startswith("guides.distributions.")
    kl = kl_divergence(d, prior)
    assert kl.shape == ()
    expected = kl_divergence(_dense(d), _dense_prior(prior.base_dist.loc, prior.base_dist.scale))
    torch.testing.assert_close(kl, expected)


@pytest.mark.parametrize("make", [_ktied, _matrix_normal], ids=["ktied", "matrix_normal"])
def test_kl_to_elementwise_prior_with_batch(make):
    d = make(2)
    loc_p = torch.randn(M, N)
    scale_p = 0.5 + torch.rand(2, 1, N)  # per-column prior scales, batch 2
    prior = dist.Normal(loc_p, scale_p).to_event(2)
    kl = kl_divergence(d, prior)
    assert kl.shape == (2,)
    expected = kl_divergence(_dense(d), _dense_prior(loc_p.expand(2, M, N), scale_p))
    torch.testing.assert_close(kl, expected)


@pytest.mark.parametrize("make", [_ktied, _matrix_normal], ids=["ktied", "matrix_normal"])
def test_kl_between_same_family_matches_dense(make):
    p, q = make(2), make()
    kl = kl_divergence(p, q)
    assert kl.shape == (2,)
    torch.testing.assert_close(kl, kl_divergence(_dense(p), _dense(q)))
    torch.testing.assert_close(kl_divergence(q, q), torch.zeros(()), atol=1e-5, rtol=0)


@pytest.mark.parametrize("make", [_ktied, _matrix_normal], ids=["ktied", "matrix_normal"])
def test_kl_to_unsupported_priors_raises_not_implemented(make):
    d = make()
    unsupported = [
        dist.Laplace(0.0, 1.0).expand([M, N]).to_event(2),  # not a Normal
        dist.Normal(0.0, 1.0).expand([M, N]).to_event(1),  # event shape (N,)
        dist.Normal(0.0, 1.0).expand([2, M, N]).to_event(3),  # event shape (2, M, N)
    ]
    for prior in unsupported:
        with pytest.raises(NotImplementedError):
            kl_divergence(d, prior)


def test_kl_matches_monte_carlo_estimate():
    """An independent check of the closed form that does not go through a dense MVN."""
    d = _matrix_normal()
    prior = _zoo_prior(scale=1.3, loc=0.2)
    x = d.sample((200_000,))
    log_ratio = d.log_prob(x) - prior.log_prob(x)
    se = float(log_ratio.std()) / math.sqrt(x.shape[0])
    assert abs(float(log_ratio.mean()) - float(kl_divergence(d, prior))) < 5 * se
