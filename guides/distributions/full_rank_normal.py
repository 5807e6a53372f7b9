r"""A multivariate Normal over a tensor-valued event with correlated batch dims, and its KLs.

The site distribution of :class:`~guides.AutoFullRankNormal`: one Gaussian block whose
coupled batch dims (a site's plates) stay correlated while Pyro sees the usual batch shapes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from pyro.distributions import constraints
from pyro.distributions.torch_distribution import TorchDistribution
from pyro.util import ignore_jit_warnings
from torch.distributions import Independent, MultivariateNormal, Normal, register_kl
from torch.distributions.utils import _standard_normal

from guides.distributions.shared import LOG_2PI, unwrap_independent

__all__ = ["FullRankNormal"]

_EMPTY = torch.Size()


class FullRankNormal(TorchDistribution):
    r"""A multivariate Normal over a tensor-valued event, flattened in row-major order.

    .. math::

        \operatorname{vec}(W) \sim \mathcal{N}(\mu, L L^\top),

    where :math:`W` has shape ``coupled_shape + event_shape`` and :math:`D` entries.

    With ``coupled_shape == ()`` (the default) this is a plain multivariate Normal whose
    event has shape ``event_shape``. A non-empty ``coupled_shape`` declares the rightmost
    *batch* dims of :math:`W` (e.g. the dims of the plates a latent site lies in) whose
    elements are correlated: they are batch dims for Pyro (the distribution can be sampled
    inside those plates), and :meth:`log_prob`, :meth:`entropy` and the registered KL
    divergences are split over them by the chain rule,

    .. math::

        \log q(W) = \sum_i \log q(W_i \mid W_{<i}),

    element :math:`i` of the coupled dims taking the terms of its coordinates (as
    :math:`L` is lower triangular and the coordinates of one element are contiguous in
    row-major order, these are exactly the conditional densities); summed over the
    coupled dims they give the joint values. Expanding the distribution adds independent
    copies on the left of the coupled dims, never inside them.

    Parameters
    ----------
    loc : torch.Tensor
        Shape ``outer + (D,)``.
    scale_tril : torch.Tensor
        Lower-triangular with positive diagonal, shape ``outer + (D, D)``.
    event_shape : torch.Size
        Shape of one element (``()`` for scalar elements).
    coupled_shape : torch.Size, default ()
        Correlated batch dims; ``D = prod(coupled_shape) * prod(event_shape)``.
    """

    arg_constraints = {
        "loc": constraints.real_vector,
        "scale_tril": constraints.lower_cholesky,
    }
    has_rsample = True

    def __init__(
        self,
        loc: torch.Tensor,
        scale_tril: torch.Tensor,
        event_shape: Sequence[int] = _EMPTY,
        coupled_shape: Sequence[int] = _EMPTY,
        validate_args: bool | None = None,
    ) -> None:
        event_shape = torch.Size(event_shape)
        coupled_shape = torch.Size(coupled_shape)
        size = coupled_shape.numel() * event_shape.numel()
        with ignore_jit_warnings():  # a traced size is a tensor; shapes are static per trace
            bad = bool(size != loc.shape[-1])
        if bad:
            raise ValueError(
                f"coupled_shape {tuple(coupled_shape)} and event_shape {tuple(event_shape)} "
                f"have {size} entries but loc has {loc.shape[-1]} in its last dim"
            )
        self.base = MultivariateNormal(loc, scale_tril=scale_tril, validate_args=False)
        self.coupled_shape = coupled_shape
        # the last (value, standard normals) drawn, shared with expanded copies
        self._draws: list[tuple[torch.Tensor, torch.Tensor] | None] = [None]
        super().__init__(
            self.base.batch_shape + coupled_shape, event_shape, validate_args=validate_args
        )

    @property
    def loc(self) -> torch.Tensor:
        """Flat mean, shape ``outer + (D,)``."""
        return self.base.loc

    @property
    def scale_tril(self) -> torch.Tensor:
        """Cholesky factor :math:`L`, shape ``outer + (D, D)``."""
        return self.base.scale_tril

    @property
    def covariance_matrix(self) -> torch.Tensor:
        """:math:`L L^\\top`, shape ``outer + (D, D)``."""
        return self.base.covariance_matrix

    @constraints.dependent_property(is_discrete=False, event_dim=0)
    def support(self) -> constraints.Constraint:
        return constraints.independent(constraints.real, len(self.event_shape))

    def _unflatten(self, flat: torch.Tensor) -> torch.Tensor:
        return flat.reshape(flat.shape[:-1] + self.coupled_shape + self.event_shape)

    def _flatten(self, value: torch.Tensor) -> torch.Tensor:
        k = len(self.coupled_shape) + len(self.event_shape)
        return value.reshape(value.shape[: value.dim() - k] + (-1,))

    def _split(self, terms: torch.Tensor) -> torch.Tensor:
        """Sum per-coordinate terms (``... + (D,)``) over each element of the coupled dims."""
        return terms.reshape(terms.shape[:-1] + self.coupled_shape + (-1,)).sum(-1)

    @property
    def mean(self) -> torch.Tensor:
        return self._unflatten(self.base.loc)

    @property
    def mode(self) -> torch.Tensor:
        return self.mean

    @property
    def variance(self) -> torch.Tensor:
        return self._unflatten(self.base.scale_tril.pow(2).sum(-1))

    def expand(self, batch_shape: Sequence[int], _instance: Any = None) -> FullRankNormal:
        batch_shape = torch.Size(batch_shape)
        n = len(batch_shape) - len(self.coupled_shape)
        if n < 0 or batch_shape[n:] != self.coupled_shape:
            raise ValueError(
                f"FullRankNormal with coupled_shape {tuple(self.coupled_shape)} cannot be "
                f"expanded to batch_shape {tuple(batch_shape)}: the coupled dims must stay "
                "the rightmost batch dims, unchanged"
            )
        d = self.base.loc.shape[-1]
        loc = self.base.loc.expand(batch_shape[:n] + (d,))
        tril = self.base.scale_tril.expand(batch_shape[:n] + (d, d))
        new = FullRankNormal(loc, tril, self.event_shape, self.coupled_shape, validate_args=False)
        new._draws = self._draws
        return new

    def rsample(self, sample_shape: Sequence[int] = _EMPTY) -> torch.Tensor:
        # as MultivariateNormal.rsample (same random numbers), keeping the standard-normal
        # draw so that a caller can reuse it instead of solving L eps = value - loc, which
        # is ill-conditioned when L's off-diagonal entries dwarf its diagonal
        shape = self.base._extended_shape(torch.Size(sample_shape))
        eps = _standard_normal(shape, dtype=self.base.loc.dtype, device=self.base.loc.device)
        flat = self.base.loc + (self.base.scale_tril @ eps.unsqueeze(-1)).squeeze(-1)
        value = self._unflatten(flat)
        self._draws[0] = (value, eps)
        return value

    def whiten(self, value: torch.Tensor) -> torch.Tensor:
        r"""The standard-normal draw :math:`\varepsilon = L^{-1}(\operatorname{vec}(W) - \mu)`.

        Shape ``value``'s batch dims (without the coupled dims) ``+ (D,)``. The draw kept
        by the last :meth:`rsample` (of this distribution or of an expanded copy) is reused
        when ``value`` is its result.
        """
        last = self._draws[0]
        if last is not None and last[0] is value:
            return last[1]
        diff = self._flatten(value) - self.base.loc
        tril = self.base.scale_tril
        d = diff.shape[-1]
        if tril.dim() == 2:  # one factor: solve for all batch elements at once
            flat = diff.reshape(-1, d).mT
            eps = torch.linalg.solve_triangular(tril, flat, upper=False).mT
            return eps.reshape(diff.shape)
        batch = torch.broadcast_shapes(diff.shape[:-1], tril.shape[:-2])
        tril = tril.expand(batch + (d, d))
        diff = diff.expand(batch + (d,)).unsqueeze(-1)
        return torch.linalg.solve_triangular(tril, diff, upper=False).squeeze(-1)

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        eps = self.whiten(value)
        log_diag = self.base.scale_tril.diagonal(dim1=-2, dim2=-1).log()
        return self._split(-0.5 * eps.pow(2) - log_diag - 0.5 * LOG_2PI)

    def entropy(self) -> torch.Tensor:
        log_diag = self.base.scale_tril.diagonal(dim1=-2, dim2=-1).log()
        return self._split(0.5 * (1 + LOG_2PI) + log_diag.expand(self.base.loc.shape))


def _normal_parts(p: Normal | Independent) -> tuple[torch.Tensor, torch.Tensor, int]:
    """loc, scale and number of event dims of a (possibly Independent) Normal, or raise."""
    base, ndims = unwrap_independent(p)
    if not isinstance(base, Normal):
        raise NotImplementedError
    return base.loc, base.scale, ndims


def _kl_full_rank_diag(q: FullRankNormal, p: Normal | Independent) -> torch.Tensor:
    r""":math:`\mathrm{KL}(\mathcal{N}(\mu, LL^\top) \,\|\, \prod_i \mathcal{N}(m_i, s_i^2))`.

    Equal to :math:`\sum_i \big(\tfrac12 [((LL^\top)_{ii} + (\mu_i - m_i)^2) / s_i^2 - 1 +
    \log s_i^2] - \log L_{ii}\big)`; the prior's event dims must be trailing dims of
    ``q``'s. With coupled dims the terms of each element's coordinates are summed apart:
    element :math:`i` gets :math:`\mathbb{E}_q\,\mathrm{KL}(q(W_i \mid W_{<i}) \,\|\,
    p(W_i))` (its conditional mean varies with :math:`W_{<i}` by the earlier columns of
    its rows of :math:`L`, which the full row norms count), so the sum over elements is
    the joint KL (the chain rule).
    """
    p_loc, p_scale, p_event = _normal_parts(p)
    k = len(q.event_shape)
    if p_event > k:
        raise NotImplementedError
    full = torch.broadcast_shapes(q.batch_shape + q.event_shape, p.batch_shape + p.event_shape)
    c = len(q.coupled_shape)
    outer = full[: len(full) - k - c]
    with ignore_jit_warnings():
        bad = bool(full[len(outer) :] != q.coupled_shape + q.event_shape)
    if bad:
        raise NotImplementedError
    flat = outer + (-1,)
    p_loc = torch.broadcast_to(p_loc, full).reshape(flat)
    p_var = torch.broadcast_to(p_scale, full).reshape(flat).pow(2)
    d = q.base.loc.shape[-1]
    tril = q.base.scale_tril.expand(outer + (d, d))
    loc = q.base.loc.expand(outer + (d,))
    quad = (tril.pow(2).sum(-1) + (loc - p_loc).pow(2)) / p_var
    log_diag = tril.diagonal(dim1=-2, dim2=-1).log()
    return q._split(0.5 * (quad - 1 + p_var.log()) - log_diag)


register_kl(FullRankNormal, Normal)(_kl_full_rank_diag)
register_kl(FullRankNormal, Independent)(_kl_full_rank_diag)


@register_kl(FullRankNormal, MultivariateNormal)
def _kl_full_rank_mvn(q: FullRankNormal, p: MultivariateNormal) -> torch.Tensor:
    if len(q.event_shape) != 1 or q.coupled_shape:
        raise NotImplementedError
    return torch.distributions.kl_divergence(q.base, p)


@register_kl(FullRankNormal, FullRankNormal)
def _kl_full_rank_full_rank(q: FullRankNormal, p: FullRankNormal) -> torch.Tensor:
    if q.event_shape != p.event_shape or q.coupled_shape or p.coupled_shape:
        raise NotImplementedError
    return torch.distributions.kl_divergence(q.base, p.base)
