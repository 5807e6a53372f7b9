"""Per-site guides whose parameters are a location and a scale per site.

:class:`LocScaleGuide` is the shared part of :class:`~guides.AutoMeanField` (and through it
:class:`~guides.AutoFixedVarianceNormal`), :class:`~guides.AutoKTiedNormal` and
:class:`~guides.AutoMatrixNormal`: ``locs.<site>`` for every site, ``scales.<site>`` for the
sites sampled mean field.
"""

from __future__ import annotations

from operator import attrgetter
from typing import Any

import pyro.distributions as dist
import torch
from pyro.distributions import constraints
from pyro.infer.autoguide.utils import deep_setattr
from pyro.nn import PyroModule, PyroParam
from torch.distributions.constraints import Constraint

from guides._base import PerSiteGuide
from guides._sites import LatentSite

__all__ = ["LocScaleGuide"]


class LocScaleGuide(PerSiteGuide):
    """Shared part of guides with parameters ``locs.<site>`` and ``scales.<site>``.

    Every site has a mean ``locs.<site>``; mean-field sites also have a standard deviation
    ``scales.<site>``. :meth:`_setup_prototype` creates the empty containers ``locs`` and
    ``scales`` (and those named by ``_extra_modules``) before the model is traced; subclasses
    fill them in :meth:`_init_site_params` with :meth:`_init_loc` and :meth:`_init_scale`,
    and sample a mean-field site from :meth:`_mean_field_dist`. Subclasses set
    ``self.init_scale``.
    """

    init_scale: float
    #: Names of further (empty) parameter containers to create before the model is traced.
    _extra_modules: tuple[str, ...] = ()

    def _setup_prototype(self, *args: Any, **kwargs: Any) -> None:
        for name in ("locs", "scales", *self._extra_modules):
            setattr(self, name, PyroModule())
        super()._setup_prototype(*args, **kwargs)

    def _init_loc(self, info: LatentSite, init_loc: torch.Tensor) -> None:
        """Register ``locs.<site>``, starting at ``init_loc``."""
        event_dim = info.unconstrained_event_dim
        deep_setattr(self.locs, info.name, PyroParam(init_loc, constraints.real, event_dim))

    def _init_scale(self, info: LatentSite, init_loc: torch.Tensor, constraint: Constraint) -> None:
        """Register ``scales.<site>`` (``constraint``), every entry at ``self.init_scale``."""
        init_scale = torch.full_like(init_loc, self.init_scale)
        scale = PyroParam(init_scale, constraint, info.unconstrained_event_dim)
        deep_setattr(self.scales, info.name, scale)

    def _site_loc(self, name: str) -> torch.Tensor:
        """Unconstrained :math:`\\mu` of a site (subsampled inside its plates)."""
        return attrgetter(name)(self.locs)

    def _get_loc_and_scale(self, name: str) -> tuple[torch.Tensor, torch.Tensor]:
        """Unconstrained :math:`(\\mu, \\sigma)` of a mean-field site (subsampled in its plates)."""
        return self._site_loc(name), attrgetter(name)(self.scales)

    def _site_scale_tril(self, info: LatentSite) -> torch.Tensor | None:
        """None: the coordinates of a site are independent (override for matrix sites)."""
        return None

    def _mean_field_dist(self, info: LatentSite) -> dist.TorchDistribution:
        """The mean-field factor ``Normal(loc, scale).to_event(unconstrained_event_dim)``."""
        loc, scale = self._get_loc_and_scale(info.name)
        return dist.Normal(loc, scale).to_event(info.unconstrained_event_dim)
