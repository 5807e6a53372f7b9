r"""Parts shared by the distributions: the matrix view of an event, diagonal Normal KLs.

The matrix view flattens all dims of an event but the first into columns (see
:func:`matrix_shape`); :class:`MatrixDistribution` holds a location and two matrix factors
whose batch dims broadcast, the common layout of :class:`~guides.distributions.KTiedNormal`
and :class:`~guides.distributions.MatrixNormal`.
"""

from __future__ import annotations

import math
from typing import TypeVar

import torch
from pyro.distributions import TorchDistribution, constraints
from pyro.util import ignore_jit_warnings
from torch.distributions import Distribution, Independent, Normal

__all__ = [
    "LOG_2PI",
    "MatrixDistribution",
    "check_event_dim",
    "diag_normal_kl",
    "matrix_shape",
    "normal_prior",
    "unwrap_independent",
]

LOG_2PI = math.log(2 * math.pi)
_M = TypeVar("_M", bound="MatrixDistribution")


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
    with ignore_jit_warnings():  # a traced size is a tensor; shapes are static per trace
        return int(event_shape[0]), int(math.prod(event_shape[1:]))


def check_event_dim(event_dim: int, loc: torch.Tensor) -> torch.Size:
    if isinstance(event_dim, bool) or not isinstance(event_dim, int) or event_dim < 2:
        raise ValueError(f"event_dim must be an int >= 2, got {event_dim!r}")
    if loc.dim() < event_dim:
        raise ValueError(f"loc must have at least event_dim={event_dim} dims, got {loc.shape}")
    return loc.shape[loc.dim() - event_dim :]


def diag_normal_kl(
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


def unwrap_independent(d: Distribution) -> tuple[Distribution, int]:
    """The base of (nested) ``Independent`` wrappers and how many dims they reinterpret."""
    ndims = 0
    while isinstance(d, Independent):
        d, ndims = d.base_dist, ndims + d.reinterpreted_batch_ndims
    return d, ndims


def normal_prior(q: Independent, event_shape: torch.Size) -> Normal:
    """The base ``Normal`` of a diagonal prior with exactly ``event_shape``, else raise."""
    base, ndims = unwrap_independent(q)
    with ignore_jit_warnings():
        same = bool(ndims == len(event_shape) and q.event_shape == event_shape)
    if not isinstance(base, Normal) or not same:
        raise NotImplementedError
    return base


class MatrixDistribution(TorchDistribution):
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
