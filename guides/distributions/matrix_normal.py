r"""The matrix-variate normal distribution (Louizos & Welling, 2016), and its KLs.

References
----------
.. [1] C. Louizos and M. Welling, "Structured and Efficient Variational Deep Learning with
   Matrix Gaussian Posteriors", ICML 2016.
"""

from __future__ import annotations

import torch
from pyro.distributions import constraints
from pyro.util import ignore_jit_warnings
from torch.distributions import Independent
from torch.distributions.kl import register_kl

from guides.distributions.shared import (
    LOG_2PI,
    MatrixDistribution,
    check_event_dim,
    matrix_shape,
    normal_prior,
)

__all__ = ["MatrixNormal"]


class MatrixNormal(MatrixDistribution):
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
        event_shape = check_event_dim(event_dim, loc)
        m, n = matrix_shape(event_shape)
        a, b = scale_tril_row, scale_tril_col
        with ignore_jit_warnings():  # a traced size is a tensor; shapes are static per trace
            bad = bool(
                a.dim() < 2 or b.dim() < 2 or a.shape[-2:] != (m, m) or b.shape[-2:] != (n, n)
            )
        if bad:
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
        return -0.5 * (m * n * LOG_2PI + self._log_det_cov() + mahalanobis)

    def entropy(self) -> torch.Tensor:
        m, n = self.matrix_shape
        return 0.5 * (m * n * (1 + LOG_2PI) + self._log_det_cov())


@register_kl(MatrixNormal, Independent)
def _kl_matrix_normal_normal(p: MatrixNormal, q: Independent) -> torch.Tensor:
    r"""KL(MN(M, U, V) || N(mu, diag(s^2))): only the diagonal of V (x) U enters."""
    base = normal_prior(q, p.event_shape)
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
