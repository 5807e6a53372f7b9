"""k-tied Normal guide: mean-field Gaussian whose per-matrix standard deviations are low rank."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from operator import attrgetter
from typing import Any, ClassVar

import pyro
import pyro.distributions as dist
import torch
from pyro.distributions import constraints
from pyro.infer.autoguide.initialization import init_to_median
from pyro.infer.autoguide.utils import deep_setattr
from pyro.nn import PyroParam
from torch.distributions.constraints import Constraint

from guides._loc_scale import LocScaleGuide
from guides._sites import LatentSite, check_init_scale, check_structural
from guides.distributions import KTiedNormal, matrix_shape

__all__ = ["AutoKTiedNormal", "is_matrix_site"]


def is_matrix_site(info: LatentSite) -> bool:
    """Whether a latent site gets a structured matrix distribution.

    A site qualifies when its support is the whole real space, its event has at least
    two dims (a ``Linear`` weight ``(out, in)``, or a convolution kernel, viewed as a
    matrix with all dims but the first flattened into columns) and none of its plates is
    subsampled (local latents of a data plate stay mean-field). Batch dims of plates
    that are not subsampled become batch dims of the distribution. Sites whose shape is
    a matrix only because of plates (``event_dim == 0``) are not matrix sites.
    """
    return (
        not info.is_constrained
        and info.unconstrained_event_dim >= 2
        and not info.is_subsampled
        and info.unconstrained_event_shape.numel() > 0
    )


class _MatrixSiteGuide(LocScaleGuide):
    """Shared part of guides that treat matrix sites specially and others as mean-field.

    Non-matrix sites get exactly :class:`~guides.AutoMeanField`'s factor (softplus scale):
    parameters ``locs.<site>`` and ``scales.<site>``. Matrix sites (see
    :func:`is_matrix_site`) get ``locs.<site>`` plus whatever :meth:`_init_matrix_params`
    creates (in the containers named by ``_extra_modules``). Subclasses set
    ``_extra_modules`` and implement :meth:`_init_matrix_params`, :meth:`_matrix_dist` and
    :meth:`_matrix_stddev`.
    """

    def __init__(
        self,
        model: Callable[..., Any],
        *,
        init_loc_fn: Callable[[dict], torch.Tensor],
        init_scale: float,
        create_plates: Callable[..., pyro.plate | Sequence[pyro.plate]] | None,
    ) -> None:
        self.init_scale = check_init_scale(init_scale)
        super().__init__(model, init_loc_fn=init_loc_fn, create_plates=create_plates)

    # hooks of subclasses -------------------------------------------------------------
    def _init_matrix_params(self, info: LatentSite, init_loc: torch.Tensor) -> None:
        raise NotImplementedError

    def _matrix_dist(self, info: LatentSite, loc: torch.Tensor) -> dist.TorchDistribution:
        raise NotImplementedError

    def _matrix_stddev(self, info: LatentSite) -> torch.Tensor:
        raise NotImplementedError

    # PerSiteGuide hooks --------------------------------------------------------------
    #: Constraint of ``scales.<site>`` (the mean-field sites): softplus of the raw parameter.
    scale_constraint: ClassVar[Constraint] = constraints.softplus_positive

    def _init_site_params(self, info: LatentSite, init_loc: torch.Tensor) -> None:
        self._init_loc(info, init_loc)
        if is_matrix_site(info):
            self._init_matrix_params(info, init_loc)
        else:
            self._init_scale(info, init_loc, self.scale_constraint)

    def _unconstrained_dist(self, info: LatentSite) -> dist.TorchDistribution:
        if is_matrix_site(info):
            return self._matrix_dist(info, self._site_loc(info.name))
        return self._mean_field_dist(info)

    def _unconstrained_loc_scale(self, info: LatentSite) -> tuple[torch.Tensor, torch.Tensor]:
        if is_matrix_site(info):
            loc = self._site_loc(info.name)
            return loc, self._matrix_stddev(info).reshape(loc.shape)
        return self._get_loc_and_scale(info.name)

    @property
    def matrix_sites(self) -> list[str]:
        """Names of the sites with a structured matrix distribution (after the first call)."""
        return [name for name, info in self._require_setup().items() if is_matrix_site(info)]


class AutoKTiedNormal(_MatrixSiteGuide):
    r"""k-tied Normal guide (Swiatkowski et al., 2020) over any Pyro model.

    Every matrix site :math:`W \in \mathbb{R}^{m \times n}` (see :func:`is_matrix_site`;
    convolution kernels are viewed as matrices with all dims but the first flattened into
    columns, one output filter per row) gets

    .. math::

        q(W) = \mathcal{N}\big(W \mid M, \operatorname{diag}(\operatorname{vec}
        ((U V^\top)^{\circ 2}))\big), \qquad U = e^{\tilde U} \in \mathbb{R}_+^{m \times k},
        \quad V = e^{\tilde V} \in \mathbb{R}_+^{n \times k},

    a diagonal Gaussian with :math:`mn + k(m + n)` parameters instead of :math:`2mn`
    (Table 1 of the paper). Every other site (vectors, scalars, constrained sites, local
    sites of subsampled plates) gets the mean-field factor of :class:`~guides.AutoMeanField`
    (:math:`2d` parameters for :math:`d` coordinates). Matrix sites are sampled from
    :class:`~guides.distributions.KTiedNormal`, whose KL to a diagonal Normal prior is
    registered, so :class:`~pyro.infer.TraceMeanField_ELBO` computes it in closed form.

    Parameters
    ----------
    model : callable
        A Pyro model.
    rank : int, default 2
        :math:`k \ge 1`. Ranks :math:`\ge \min(m, n)` are allowed: they span every
        positive standard-deviation matrix that a rank-``min(m, n)`` product can, and in
        particular reach the mean-field optimum in the tests. This second positional
        argument is structural, unlike Pyro's ``AutoNormal(model, init_loc_fn)``: pass
        ``init_loc_fn`` by keyword.
    init_loc_fn : callable, default ``init_to_median``
        Initialisation of the means, as in :class:`~guides.AutoMeanField` (not Pyro's
        ``AutoNormal`` default ``init_to_feasible``, on purpose: see there).
    init_scale : float, default 0.1
        :math:`\sigma_0`. As in Appendix D.4 of the paper, :math:`\tilde U, \tilde V`
        start at :math:`\tfrac12(\log\sigma_0 - \log k)` plus
        :math:`\mathcal{N}(0, 0.1^2)` noise (from torch's global RNG, so seed it), so
        that :math:`(U V^\top)_{ij} \approx \sigma_0`. Mean-field sites start at
        :math:`\sigma_0` exactly.
    create_plates : callable, optional
        As in :class:`~guides.AutoMeanField`.

    Notes
    -----
    Parameters: ``locs.<site>`` (all sites), ``scales.<site>`` (mean-field sites, softplus
    constrained), ``log_u.<site>`` (:math:`\tilde U`, shape ``batch + (m, k)``) and
    ``log_v.<site>`` (:math:`\tilde V`, ``batch + (n, k)``). Saving and restoring a
    ``state_dict`` works as for :class:`~guides.AutoMeanField` (call the new guide once,
    then ``load_state_dict``).

    References
    ----------
    .. [1] J. Swiatkowski et al., "The k-tied Normal Distribution: A Compact
       Parameterization of Gaussian Mean Field Posteriors in Bayesian Neural Networks",
       ICML 2020.
    """

    _extra_modules = ("log_u", "log_v")
    #: ``scales.<site>`` (mean-field sites) and the log factors ``log_u.<site>``,
    #: ``log_v.<site>`` of the standard deviations :math:`U V^\top` of matrix sites.
    std_params: ClassVar[frozenset[str]] = frozenset({"scales", "log_u", "log_v"})

    def __init__(
        self,
        model: Callable[..., Any],
        rank: int = 2,
        *,
        init_loc_fn: Callable[[dict], torch.Tensor] = init_to_median,
        init_scale: float = 0.1,
        create_plates: Callable[..., pyro.plate | Sequence[pyro.plate]] | None = None,
    ) -> None:
        check_structural(rank, "AutoKTiedNormal", "rank")
        if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
            raise ValueError(f"rank must be a positive int (k of the k-tied Normal), got {rank!r}")
        self.rank = rank
        super().__init__(
            model, init_loc_fn=init_loc_fn, init_scale=init_scale, create_plates=create_plates
        )

    def _init_matrix_params(self, info: LatentSite, init_loc: torch.Tensor) -> None:
        batch = info.unconstrained_batch_shape
        m, n = matrix_shape(info.unconstrained_event_shape)
        center = 0.5 * (math.log(self.init_scale) - math.log(self.rank))
        opts = {"dtype": init_loc.dtype, "device": init_loc.device}
        for module, rows in ((self.log_u, m), (self.log_v, n)):
            init = center + 0.1 * torch.randn(batch + (rows, self.rank), **opts)
            deep_setattr(module, info.name, PyroParam(init, constraints.real, 2))

    def _factors(self, name: str) -> tuple[torch.Tensor, torch.Tensor]:
        return attrgetter(name)(self.log_u).exp(), attrgetter(name)(self.log_v).exp()

    def _matrix_dist(self, info: LatentSite, loc: torch.Tensor) -> dist.TorchDistribution:
        u, v = self._factors(info.name)
        return KTiedNormal(loc, u, v, event_dim=info.unconstrained_event_dim)

    def _matrix_stddev(self, info: LatentSite) -> torch.Tensor:
        u, v = self._factors(info.name)
        return u @ v.mT
