r"""Structured Gaussian distributions over weight matrices, with closed-form KL divergences.

Both distributions describe a random matrix :math:`W \in \mathbb{R}^{m \times n}`. An event
with more than two dims (e.g. a convolution kernel) is handled by viewing its event shape
``(d_1, ..., d_r)`` as the matrix ``(d_1, d_2 \cdots d_r)`` (all dims but the first are
flattened into columns). For a PyTorch convolution kernel ``(out, in, kh, kw)`` this puts
one output filter per row: the transpose of the view of Swiatkowski et al. (2020, D.3),
who flatten all dims but the last of a TensorFlow kernel ``(kh, kw, in, out)`` and so put
one filter per column; singular values and low-rank structure are the same. Samples, means
and variances keep the original event shape.

- :class:`KTiedNormal`: :math:`W \sim \mathcal{N}(M, \operatorname{diag}(\operatorname{vec}
  ((U V^\top)^{\circ 2})))` with positive :math:`U` (m x k) and :math:`V` (n x k)
  (Swiatkowski et al., 2020).
- :class:`MatrixNormal`: :math:`\operatorname{vec}(W) \sim \mathcal{N}(\operatorname{vec}(M),
  V \otimes U)` with :math:`U = A A^\top`, :math:`V = B B^\top` (Louizos & Welling, 2016);
  the Kronecker product is never formed.

KL divergences are registered with :func:`torch.distributions.kl.register_kl` (which
:func:`pyro.distributions.kl_divergence` and :class:`~pyro.infer.TraceMeanField_ELBO` use)
for each distribution against itself and against a diagonal Normal prior
``Normal(loc, scale).to_event(event_dim)`` with the same event shape. Other pairs raise
``NotImplementedError`` so that Pyro falls back to the Monte Carlo estimate.

References
----------
.. [1] J. Swiatkowski, K. Roth, B. S. Veeling, L. Tran, J. V. Dillon, J. Snoek, S. Mandt,
   T. Salimans, R. Jenatton and S. Nowozin, "The k-tied Normal Distribution: A Compact
   Parameterization of Gaussian Mean Field Posteriors in Bayesian Neural Networks",
   ICML 2020.
.. [2] C. Louizos and M. Welling, "Structured and Efficient Variational Deep Learning with
   Matrix Gaussian Posteriors", ICML 2016.
"""

from __future__ import annotations

import math
from typing import TypeVar

import torch
from pyro.distributions import TorchDistribution, constraints
from torch.distributions import Distribution, Independent, Normal
from torch.distributions.kl import register_kl

__all__ = ["KTiedNormal", "MatrixNormal", "matrix_shape"]

_LOG_2PI = math.log(2 * math.pi)
_M = TypeVar("_M", bound="_MatrixDistribution")


def matrix_shape(event_shape: tuple[int, ...] | torch.Size) -> tuple[int, int]:
    """The ``(rows, cols)`` matrix view of an event shape with at least two dims.

    Parameters
    ----------
    event_shape : tuple of int
        ``(d_1, ..., d_r)`` with ``r >= 2``.

    Returns
    -------
    tuple of int
        ``(d_1, d_2 * ... * d_r)``: all dims but the first are flattened into columns
        (one output filter per row for a PyTorch kernel ``(out, in, kh, kw)``).
    """
    if len(event_shape) < 2:
        raise ValueError(f"a matrix event needs at least 2 dims, got shape {tuple(event_shape)}")
    return int(event_shape[0]), math.prod(event_shape[1:])


def _check_event_dim(event_dim: int, loc: torch.Tensor) -> torch.Size:
    if isinstance(event_dim, bool) or not isinstance(event_dim, int) or event_dim < 2:
        raise ValueError(f"event_dim must be an int >= 2, got {event_dim!r}")
    if loc.dim() < event_dim:
        raise ValueError(f"loc must have at least event_dim={event_dim} dims, got {loc.shape}")
    return loc.shape[loc.dim() - event_dim :]


def _diag_normal_kl(
    loc_q: torch.Tensor,
    scale_q: torch.Tensor,
    loc_p: torch.Tensor,
    scale_p: torch.Tensor,
    event_dim: int,
) -> torch.Tensor:
    """Sum over the rightmost ``event_dim`` dims of elementwise KL(N(q) || N(p))."""
    var_ratio = (scale_q / scale_p) ** 2
    term = ((loc_q - loc_p) / scale_p) ** 2
    kl = 0.5 * (var_ratio + term - 1 - var_ratio.log())
    return kl.sum(tuple(range(-event_dim, 0)))


def _unwrap_independent(d: Distribution) -> tuple[Distribution, int]:
    """The base of (nested) ``Independent`` wrappers and how many dims they reinterpret."""
    ndims = 0
    while isinstance(d, Independent):
        d, ndims = d.base_dist, ndims + d.reinterpreted_batch_ndims
    return d, ndims


def _normal_prior(q: Independent, event_shape: torch.Size) -> Normal:
    """The base ``Normal`` of a diagonal prior with exactly ``event_shape``, else raise."""
    base, ndims = _unwrap_independent(q)
    if not isinstance(base, Normal) or ndims != len(event_shape) or q.event_shape != event_shape:
        raise NotImplementedError
    return base


class _MatrixDistribution(TorchDistribution):
    """Shared part of :class:`KTiedNormal` and :class:`MatrixNormal`.

    Both hold ``loc`` (``batch + event_shape``) and two factors of shape ``batch + (r, c)``
    (named by ``_factor_names``), whose batch dims broadcast against ``loc``'s.
    """

    _factor_names: tuple[str, str]
    loc: torch.Tensor
    _event_dim: int

    def _set_params(
        self,
        loc: torch.Tensor,
        factors: tuple[torch.Tensor, torch.Tensor],
        event_dim: int,
        batch_shape: torch.Size | None = None,
    ) -> torch.Size:
        """Set ``loc`` and the factors, expanded to ``batch_shape`` (default: broadcast)."""
        if batch_shape is None:
            batch_shape = torch.broadcast_shapes(
                loc.shape[: loc.dim() - event_dim], *(f.shape[:-2] for f in factors)
            )
        self.loc = loc.expand(batch_shape + loc.shape[loc.dim() - event_dim :])
        for name, factor in zip(self._factor_names, factors, strict=True):
            setattr(self, name, factor.expand(batch_shape + factor.shape[-2:]))
        self._event_dim = event_dim
        return batch_shape

    def _expand_into(self, new: _M, batch_shape: torch.Size) -> _M:
        """Fill ``new`` (a fresh instance of this class) as ``self`` expanded to ``batch_shape``."""
        batch_shape = torch.Size(batch_shape)
        factors = tuple(getattr(self, name) for name in self._factor_names)
        new._set_params(self.loc, factors, self._event_dim, batch_shape)
        TorchDistribution.__init__(new, batch_shape, self.event_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @property
    def support(self) -> constraints.Constraint:
        return constraints.independent(constraints.real, self._event_dim)

    @property
    def mean(self) -> torch.Tensor:
        return self.loc

    @property
    def mode(self) -> torch.Tensor:
        return self.loc


class KTiedNormal(_MatrixDistribution):
    r"""k-tied Normal distribution over matrices (Swiatkowski et al., 2020, eq. 8).

    .. math::

        W \sim \mathcal{N}\big(M, \operatorname{diag}(\operatorname{vec}
        ((U V^\top)^{\circ 2}))\big), \qquad
        \operatorname{sd}(W_{ij}) = \sum_{l=1}^k U_{il} V_{jl},

    a diagonal Gaussian whose :math:`mn` standard deviations are tied through
    :math:`k(m + n)` positive parameters. With ``k = 1`` it is the matrix normal with
    diagonal row and column covariances.

    Parameters
    ----------
    loc : torch.Tensor
        :math:`M`, shape ``batch + event_shape``.
    u : torch.Tensor
        Positive :math:`U`, shape ``batch + (m, k)``.
    v : torch.Tensor
        Positive :math:`V`, shape ``batch + (n, k)``.
    event_dim : int, default 2
        Number of rightmost dims of ``loc`` forming the event; with ``event_dim > 2`` the
        event ``(d_1, ..., d_r)`` is the matrix ``m = d_1``, ``n = d_2 \cdots d_r``.
    validate_args : bool, optional
        Check the arguments and the samples passed to :meth:`log_prob`.
    """

    arg_constraints = {
        "loc": constraints.real,
        "u": constraints.independent(constraints.positive, 2),
        "v": constraints.independent(constraints.positive, 2),
    }
    has_rsample = True
    _factor_names = ("u", "v")

    def __init__(
        self,
        loc: torch.Tensor,
        u: torch.Tensor,
        v: torch.Tensor,
        *,
        event_dim: int = 2,
        validate_args: bool | None = None,
    ) -> None:
        event_shape = _check_event_dim(event_dim, loc)
        m, n = matrix_shape(event_shape)
        if u.dim() < 2 or v.dim() < 2 or u.shape[-2] != m or v.shape[-2] != n:
            raise ValueError(
                f"u must have shape batch + ({m}, k) and v batch + ({n}, k) for an event of "
                f"shape {tuple(event_shape)}, got u {tuple(u.shape)} and v {tuple(v.shape)}"
            )
        if u.shape[-1] != v.shape[-1]:
            raise ValueError(f"u and v need the same rank k, got {u.shape[-1]} and {v.shape[-1]}")
        batch_shape = self._set_params(loc, (u, v), event_dim)
        super().__init__(batch_shape, event_shape, validate_args=validate_args)

    @property
    def rank(self) -> int:
        """The number of tied components :math:`k`."""
        return self.u.shape[-1]

    def expand(self, batch_shape: torch.Size, _instance: KTiedNormal | None = None) -> KTiedNormal:
        return self._expand_into(self._get_checked_instance(KTiedNormal, _instance), batch_shape)

    @property
    def stddev(self) -> torch.Tensor:
        """:math:`U V^\\top` in the event shape (the marginal standard deviations)."""
        return (self.u @ self.v.mT).reshape(self.loc.shape)

    @property
    def variance(self) -> torch.Tensor:
        return self.stddev.pow(2)

    def rsample(self, sample_shape: torch.Size = torch.Size()) -> torch.Tensor:  # noqa: B008
        shape = self._extended_shape(sample_shape)
        eps = torch.randn(shape, dtype=self.loc.dtype, device=self.loc.device)
        return self.loc + eps * self.stddev

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        if self._validate_args:
            self._validate_sample(value)
        scale = self.stddev
        z = (value - self.loc) / scale
        log_density = -0.5 * z.pow(2) - scale.log() - 0.5 * _LOG_2PI
        return log_density.sum(tuple(range(-self._event_dim, 0)))

    def entropy(self) -> torch.Tensor:
        numel = self.event_shape.numel()
        log_scale = self.stddev.log().sum(tuple(range(-self._event_dim, 0)))
        return 0.5 * numel * (1 + _LOG_2PI) + log_scale


class MatrixNormal(_MatrixDistribution):
    r"""Matrix-variate normal distribution (Gupta & Nagar; Louizos & Welling, 2016).

    .. math::

        \operatorname{vec}(W) \sim \mathcal{N}(\operatorname{vec}(M), V \otimes U),
        \qquad U = A A^\top \ (m \times m), \quad V = B B^\top \ (n \times n),

    i.e. :math:`W = M + A Z B^\top` with :math:`Z_{ij} \sim \mathcal{N}(0, 1)` iid;
    :math:`U` is the covariance among rows and :math:`V` among columns, and
    :math:`\operatorname{Cov}(W_{ij}, W_{kl}) = U_{ik} V_{jl}`.

    Parameters
    ----------
    loc : torch.Tensor
        :math:`M`, shape ``batch + event_shape``.
    scale_tril_row : torch.Tensor
        :math:`A`, lower triangular with positive diagonal, shape ``batch + (m, m)``.
    scale_tril_col : torch.Tensor
        :math:`B`, lower triangular with positive diagonal, shape ``batch + (n, n)``.
    event_dim : int, default 2
        As in :class:`KTiedNormal`: ``event_dim > 2`` views the event as the matrix with
        all dims but the first flattened into columns.
    validate_args : bool, optional
        Check the arguments and the samples passed to :meth:`log_prob`.

    Notes
    -----
    Costs per draw are :math:`O(m^2 n + m n^2)`; :meth:`log_prob` uses two triangular
    solves, :math:`\operatorname{tr}(V^{-1} X^\top U^{-1} X) = \|A^{-1} X B^{-\top}\|_F^2`
    with :math:`X = W - M`, and :math:`\log|V \otimes U| = n \log|U| + m \log|V|`.
    """

    arg_constraints = {
        "loc": constraints.real,
        "scale_tril_row": constraints.lower_cholesky,
        "scale_tril_col": constraints.lower_cholesky,
    }
    has_rsample = True
    _factor_names = ("scale_tril_row", "scale_tril_col")

    def __init__(
        self,
        loc: torch.Tensor,
        scale_tril_row: torch.Tensor,
        scale_tril_col: torch.Tensor,
        *,
        event_dim: int = 2,
        validate_args: bool | None = None,
    ) -> None:
        event_shape = _check_event_dim(event_dim, loc)
        m, n = matrix_shape(event_shape)
        a, b = scale_tril_row, scale_tril_col
        if a.dim() < 2 or b.dim() < 2 or a.shape[-2:] != (m, m) or b.shape[-2:] != (n, n):
            raise ValueError(
                f"scale_tril_row must have shape batch + ({m}, {m}) and scale_tril_col "
                f"batch + ({n}, {n}) for an event of shape {tuple(event_shape)}, got "
                f"{tuple(a.shape)} and {tuple(b.shape)}"
            )
        batch_shape = self._set_params(loc, (a, b), event_dim)
        super().__init__(batch_shape, event_shape, validate_args=validate_args)

    @property
    def matrix_shape(self) -> tuple[int, int]:
        """``(m, n)``, the matrix view of the event shape."""
        return matrix_shape(self.event_shape)

    def expand(
        self, batch_shape: torch.Size, _instance: MatrixNormal | None = None
    ) -> MatrixNormal:
        return self._expand_into(self._get_checked_instance(MatrixNormal, _instance), batch_shape)

    @property
    def row_covariance(self) -> torch.Tensor:
        """:math:`U = A A^\\top`, shape ``batch + (m, m)``."""
        return self.scale_tril_row @ self.scale_tril_row.mT

    @property
    def col_covariance(self) -> torch.Tensor:
        """:math:`V = B B^\\top`, shape ``batch + (n, n)``."""
        return self.scale_tril_col @ self.scale_tril_col.mT

    @property
    def variance(self) -> torch.Tensor:
        """:math:`\\operatorname{diag}(U) \\operatorname{diag}(V)^\\top` in the event shape."""
        row = self.scale_tril_row.pow(2).sum(-1)
        col = self.scale_tril_col.pow(2).sum(-1)
        return (row.unsqueeze(-1) * col.unsqueeze(-2)).reshape(self.loc.shape)

    @property
    def stddev(self) -> torch.Tensor:
        return self.variance.sqrt()

    def _log_det_cov(self) -> torch.Tensor:
        """:math:`\\log|V \\otimes U| = n \\log|U| + m \\log|V|`, shape ``batch``."""
        m, n = self.matrix_shape
        log_det_row = 2 * self.scale_tril_row.diagonal(dim1=-2, dim2=-1).abs().log().sum(-1)
        log_det_col = 2 * self.scale_tril_col.diagonal(dim1=-2, dim2=-1).abs().log().sum(-1)
        return n * log_det_row + m * log_det_col

    def _as_matrix(self, x: torch.Tensor) -> torch.Tensor:
        return x.reshape(x.shape[: x.dim() - self._event_dim] + self.matrix_shape)

    def rsample(self, sample_shape: torch.Size = torch.Size()) -> torch.Tensor:  # noqa: B008
        shape = torch.Size(sample_shape) + self.batch_shape + self.matrix_shape
        z = torch.randn(shape, dtype=self.loc.dtype, device=self.loc.device)
        noise = self.scale_tril_row @ z @ self.scale_tril_col.mT
        return self.loc + noise.reshape(self._extended_shape(sample_shape))

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        if self._validate_args:
            self._validate_sample(value)
        m, n = self.matrix_shape
        x = self._as_matrix(value - self.loc)
        batch = x.shape[:-2]
        a = self.scale_tril_row.expand(batch + (m, m))
        b = self.scale_tril_col.expand(batch + (n, n))
        y = torch.linalg.solve_triangular(a, x, upper=False)  # A^-1 X
        y = torch.linalg.solve_triangular(b, y.mT, upper=False)  # B^-1 (A^-1 X)^T
        mahalanobis = y.pow(2).sum((-2, -1))
        return -0.5 * (m * n * _LOG_2PI + self._log_det_cov() + mahalanobis)

    def entropy(self) -> torch.Tensor:
        m, n = self.matrix_shape
        return 0.5 * (m * n * (1 + _LOG_2PI) + self._log_det_cov())


@register_kl(KTiedNormal, KTiedNormal)
def _kl_ktied_ktied(p: KTiedNormal, q: KTiedNormal) -> torch.Tensor:
    if p.event_shape != q.event_shape:
        raise NotImplementedError
    return _diag_normal_kl(p.loc, p.stddev, q.loc, q.stddev, len(p.event_shape))


@register_kl(KTiedNormal, Independent)
def _kl_ktied_normal(p: KTiedNormal, q: Independent) -> torch.Tensor:
    base = _normal_prior(q, p.event_shape)
    return _diag_normal_kl(p.loc, p.stddev, base.loc, base.scale, len(p.event_shape))


@register_kl(MatrixNormal, Independent)
def _kl_matrix_normal_normal(p: MatrixNormal, q: Independent) -> torch.Tensor:
    r"""KL(MN(M, U, V) || N(mu, diag(s^2))): only the diagonal of V (x) U enters."""
    base = _normal_prior(q, p.event_shape)
    event_dims = tuple(range(-len(p.event_shape), 0))
    var_p = base.scale.pow(2)
    quad = ((p.variance + (p.loc - base.loc).pow(2)) / var_p).sum(event_dims)
    log_det_p = var_p.log().sum(event_dims)  # Normal broadcasts loc, scale to its shape
    return 0.5 * (quad - p.event_shape.numel() + log_det_p - p._log_det_cov())


@register_kl(MatrixNormal, MatrixNormal)
def _kl_matrix_normal_matrix_normal(p: MatrixNormal, q: MatrixNormal) -> torch.Tensor:
    if p.event_shape != q.event_shape:
        raise NotImplementedError
    m, n = p.matrix_shape
    batch = torch.broadcast_shapes(p.batch_shape, q.batch_shape)
    a_q = q.scale_tril_row.expand(batch + (m, m))
    b_q = q.scale_tril_col.expand(batch + (n, n))
    # tr(Sq^-1 Sp) = tr(Uq^-1 Up) tr(Vq^-1 Vp) = |Aq^-1 Ap|^2 |Bq^-1 Bp|^2
    row = torch.linalg.solve_triangular(a_q, p.scale_tril_row.expand(batch + (m, m)), upper=False)
    col = torch.linalg.solve_triangular(b_q, p.scale_tril_col.expand(batch + (n, n)), upper=False)
    trace = row.pow(2).sum((-2, -1)) * col.pow(2).sum((-2, -1))
    diff = p._as_matrix(p.loc) - q._as_matrix(q.loc)
    y = torch.linalg.solve_triangular(a_q, diff.expand(batch + (m, n)), upper=False)
    y = torch.linalg.solve_triangular(b_q, y.mT, upper=False)
    mahalanobis = y.pow(2).sum((-2, -1))
    return 0.5 * (trace + mahalanobis - m * n + q._log_det_cov() - p._log_det_cov())
