r"""The k-tied Normal distribution over matrices (Swiatkowski et al., 2020), and its KLs.

References
----------
.. [1] J. Swiatkowski, K. Roth, B. S. Veeling, L. Tran, J. V. Dillon, J. Snoek, S. Mandt,
   T. Salimans, R. Jenatton and S. Nowozin, "The k-tied Normal Distribution: A Compact
   Parameterization of Gaussian Mean Field Posteriors in Bayesian Neural Networks",
   ICML 2020.
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
    diag_normal_kl,
    matrix_shape,
    normal_prior,
)

__all__ = ["KTiedNormal"]


class KTiedNormal(MatrixDistribution):
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
        event_shape = check_event_dim(event_dim, loc)
        m, n = matrix_shape(event_shape)
        with ignore_jit_warnings():  # a traced size is a tensor; shapes are static per trace
            bad_shape = bool(u.dim() < 2 or v.dim() < 2 or u.shape[-2] != m or v.shape[-2] != n)
            bad_rank = not bad_shape and bool(u.shape[-1] != v.shape[-1])
        if bad_shape:
            raise ValueError(
                f"u must have shape batch + ({m}, k) and v batch + ({n}, k) for an event of "
                f"shape {tuple(event_shape)}, got u {tuple(u.shape)} and v {tuple(v.shape)}"
            )
        if bad_rank:
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
        log_density = -0.5 * z.pow(2) - scale.log() - 0.5 * LOG_2PI
        return log_density.sum(tuple(range(-self._event_dim, 0)))

    def entropy(self) -> torch.Tensor:
        numel = self.event_shape.numel()
        log_scale = self.stddev.log().sum(tuple(range(-self._event_dim, 0)))
        return 0.5 * numel * (1 + LOG_2PI) + log_scale


@register_kl(KTiedNormal, KTiedNormal)
def _kl_ktied_ktied(p: KTiedNormal, q: KTiedNormal) -> torch.Tensor:
    if p.event_shape != q.event_shape:
        raise NotImplementedError
    return diag_normal_kl(p.loc, p.stddev, q.loc, q.stddev, len(p.event_shape))


@register_kl(KTiedNormal, Independent)
def _kl_ktied_normal(p: KTiedNormal, q: Independent) -> torch.Tensor:
    base = normal_prior(q, p.event_shape)
    return diag_normal_kl(p.loc, p.stddev, base.loc, base.scale, len(p.event_shape))
