r"""Full-covariance Gaussian guides: one block per latent site, or one global block.

Per site this is the "FC" (full covariance per layer) family of Trippe & Turner (2018); the
global block is Pyro's :class:`~pyro.infer.autoguide.AutoMultivariateNormal`, but sampled site
by site from real conditional distributions so that closed-form KLs apply.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from operator import attrgetter
from typing import Any, ClassVar

import pyro
import torch
from pyro.distributions import constraints
from pyro.distributions.torch_distribution import TorchDistribution
from pyro.infer.autoguide.initialization import init_to_median
from pyro.infer.autoguide.utils import deep_setattr
from pyro.nn import PyroModule, PyroParam
from torch.distributions import Independent, MultivariateNormal, Normal, register_kl
from torch.distributions.utils import _standard_normal

from guides._base import LatentSite, PerSiteGuide, check_init_scale
from guides.distributions import _unwrap_independent

__all__ = ["AutoFullRankNormal", "FullRankNormal"]

_EMPTY = torch.Size()


class FullRankNormal(TorchDistribution):
    r"""A multivariate Normal over a tensor-valued event, flattened in row-major order.

    .. math::

        \operatorname{vec}(W) \sim \mathcal{N}(\mu, L L^\top),

    where :math:`W` has shape ``event_shape`` and :math:`D = \prod` ``event_shape``.

    Parameters
    ----------
    loc : torch.Tensor
        Shape ``batch_shape + (D,)``.
    scale_tril : torch.Tensor
        Lower-triangular with positive diagonal, shape ``batch_shape + (D, D)``.
    event_shape : torch.Size
        Shape of one draw (``()`` needs ``D == 1``).
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
        validate_args: bool | None = None,
    ) -> None:
        event_shape = torch.Size(event_shape)
        if event_shape.numel() != loc.shape[-1]:
            raise ValueError(
                f"event_shape {tuple(event_shape)} has {event_shape.numel()} entries but loc "
                f"has {loc.shape[-1]} in its last dim"
            )
        self.base = MultivariateNormal(loc, scale_tril=scale_tril, validate_args=False)
        super().__init__(self.base.batch_shape, event_shape, validate_args=validate_args)

    @property
    def loc(self) -> torch.Tensor:
        """Flat mean, shape ``batch_shape + (D,)``."""
        return self.base.loc

    @property
    def scale_tril(self) -> torch.Tensor:
        """Cholesky factor :math:`L`, shape ``batch_shape + (D, D)``."""
        return self.base.scale_tril

    @property
    def covariance_matrix(self) -> torch.Tensor:
        """:math:`L L^\\top`, shape ``batch_shape + (D, D)``."""
        return self.base.covariance_matrix

    @constraints.dependent_property(is_discrete=False, event_dim=0)
    def support(self) -> constraints.Constraint:
        return constraints.independent(constraints.real, len(self.event_shape))

    def _unflatten(self, flat: torch.Tensor) -> torch.Tensor:
        return flat.reshape(flat.shape[:-1] + self.event_shape)

    def _flatten(self, value: torch.Tensor) -> torch.Tensor:
        k = len(self.event_shape)
        return value.reshape(value.shape[: value.dim() - k] + (-1,))

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
        d = self.base.loc.shape[-1]
        loc = self.base.loc.expand(batch_shape + (d,))
        tril = self.base.scale_tril.expand(batch_shape + (d, d))
        return FullRankNormal(loc, tril, self.event_shape, validate_args=False)

    def rsample(self, sample_shape: Sequence[int] = _EMPTY) -> torch.Tensor:
        # as MultivariateNormal.rsample (same random numbers), keeping the standard-normal
        # draw so that a caller can reuse it instead of solving L eps = value - loc, which
        # is ill-conditioned when L's off-diagonal entries dwarf its diagonal
        shape = self.base._extended_shape(torch.Size(sample_shape))
        eps = _standard_normal(shape, dtype=self.base.loc.dtype, device=self.base.loc.device)
        flat = self.base.loc + (self.base.scale_tril @ eps.unsqueeze(-1)).squeeze(-1)
        value = self._unflatten(flat)
        self.last_draw = (value, eps)
        return value

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        return self.base.log_prob(self._flatten(value))

    def entropy(self) -> torch.Tensor:
        return self.base.entropy()


def _normal_parts(p: Normal | Independent) -> tuple[torch.Tensor, torch.Tensor, int]:
    """loc, scale and number of event dims of a (possibly Independent) Normal, or raise."""
    base, ndims = _unwrap_independent(p)
    if not isinstance(base, Normal):
        raise NotImplementedError
    return base.loc, base.scale, ndims


def _kl_full_rank_diag(q: FullRankNormal, p: Normal | Independent) -> torch.Tensor:
    r""":math:`\mathrm{KL}(\mathcal{N}(\mu, LL^\top) \,\|\, \prod_i \mathcal{N}(m_i, s_i^2))`.

    Equal to :math:`\tfrac12 \sum_i [((LL^\top)_{ii} + (\mu_i - m_i)^2) / s_i^2 - 1 + \log
    s_i^2] - \sum_i \log L_{ii}`; the prior's event dims must be trailing dims of ``q``'s.
    """
    p_loc, p_scale, p_event = _normal_parts(p)
    k = len(q.event_shape)
    if p_event > k:
        raise NotImplementedError
    shape = q.batch_shape + q.event_shape
    flat = q.batch_shape + (-1,)
    p_loc = torch.broadcast_to(p_loc, shape).reshape(flat)
    p_var = torch.broadcast_to(p_scale, shape).reshape(flat).pow(2)
    tril = q.base.scale_tril
    quad = (tril.pow(2).sum(-1) + (q.base.loc - p_loc).pow(2)) / p_var
    log_det_q = 2 * tril.diagonal(dim1=-2, dim2=-1).log().sum(-1)
    return 0.5 * (quad - 1 + p_var.log()).sum(-1) - 0.5 * log_det_q


register_kl(FullRankNormal, Normal)(_kl_full_rank_diag)
register_kl(FullRankNormal, Independent)(_kl_full_rank_diag)


@register_kl(FullRankNormal, MultivariateNormal)
def _kl_full_rank_mvn(q: FullRankNormal, p: MultivariateNormal) -> torch.Tensor:
    if len(q.event_shape) != 1:
        raise NotImplementedError
    return torch.distributions.kl_divergence(q.base, p)


@register_kl(FullRankNormal, FullRankNormal)
def _kl_full_rank_full_rank(q: FullRankNormal, p: FullRankNormal) -> torch.Tensor:
    if q.event_shape != p.event_shape:
        raise NotImplementedError
    return torch.distributions.kl_divergence(q.base, p.base)


class AutoFullRankNormal(PerSiteGuide):
    r"""Gaussian guide with a full covariance per latent site (``"site"``) or overall.

    With :math:`w_s` the unconstrained value of site :math:`s` flattened to length
    :math:`D_s`, ``blocks="site"`` is

    .. math::

        q(w) = \prod_s \mathcal{N}(w_s \mid \mu_s, L_s L_s^\top),

    the "FC" guide of Trippe & Turner (2018) for a network whose layers are sites (they
    treat the weights and biases of a layer as one block; here the weight and bias sites
    are two blocks). Batch dims of a site (its plates, or dims the model did not declare
    as event dims) index independent blocks, so local latents of (subsampled) plates work;
    declare dims as event dims with ``.to_event()`` to correlate them.

    ``blocks="global"`` is one Gaussian :math:`q(w) = \mathcal{N}(\mu, LL^\top)` over all
    sites concatenated in model order (Pyro's ``AutoMultivariateNormal``). It is sampled
    site by site from the exact conditionals
    :math:`q(w_s \mid w_{<s}) = \mathcal{N}(\mu_s + L_{s,<s}\,\varepsilon_{<s},\ L_{ss}
    L_{ss}^\top)`, with :math:`\varepsilon_{<s} = L_{<s,<s}^{-1}(w_{<s} - \mu_{<s})`, so
    every site has a real distribution object and :class:`~pyro.infer.TraceMeanField_ELBO`
    adds the conditional closed-form KLs, whose sum is an unbiased estimate of the joint
    KL (the chain rule of the KL divergence). Sites inside plates are not supported.

    Each site is a :class:`FullRankNormal` (pushed through ``biject_to(support)`` for
    constrained sites), with closed-form KLs registered against (Independent) Normal,
    MultivariateNormal and FullRankNormal priors.

    Parameters
    ----------
    model : callable
        A Pyro model.
    blocks : {"site", "global"}, default "site"
        One covariance block per site, or one over everything.
    init_loc_fn : callable, default ``init_to_median``
        Per-site initialisation of :math:`\mu` (see :class:`~guides.AutoMeanField`).
    init_scale : float, default 0.1
        Initial :math:`s` (every entry), with :math:`C = I`.
    max_block_dim : int, default 10000
        Largest block dimension :math:`D` allowed; a :math:`D \times D` factor is stored
        (the factor of a 784x400 weight matrix would hold ~10^11 numbers).
    create_plates : callable, optional
        As in :class:`~guides.AutoMeanField`.

    Notes
    -----
    :math:`L = \operatorname{diag}(s)\,C` with a positive scale vector :math:`s`
    (``scales.<site>``, or ``scale`` for "global"; softplus of free numbers) and a unit
    lower-triangular :math:`C` (``scale_trils.<site>``, or ``scale_tril``; Pyro's
    ``unit_lower_cholesky``), as Pyro's ``AutoMultivariateNormal`` does. The magnitudes and
    the correlations then live on their own scales: with a free Cholesky factor, Adam's
    first steps (about ``lr`` on every entry) make the off-diagonal entries dwarf a small
    diagonal such as ``init_scale=1e-4``, and the factor becomes numerically singular. The
    raw storage of :math:`C` is a full :math:`D \times D` matrix whose upper triangle is
    unused; :attr:`num_variational_params` counts the free numbers only,
    :math:`D + D(D+1)/2` per block.

    References
    ----------
    .. [1] B. Trippe and R. Turner, "Overpruning in Variational Bayesian Neural Networks",
       NeurIPS 2017 workshop on Advances in Approximate Bayesian Inference, 2018.
    """

    #: :math:`s` and :math:`C` of :math:`L = \operatorname{diag}(s) C`: ``scales.<site>`` and
    #: ``scale_trils.<site>`` ("site"), ``scale`` and ``scale_tril`` ("global").
    std_params: ClassVar[frozenset[str]] = frozenset(
        {"scales", "scale_trils", "scale", "scale_tril"}
    )

    def __init__(
        self,
        model: Callable[..., Any],
        blocks: str = "site",
        *,
        init_loc_fn: Callable[[dict], torch.Tensor] = init_to_median,
        init_scale: float = 0.1,
        max_block_dim: int = 10_000,
        create_plates: Callable[..., pyro.plate | Sequence[pyro.plate]] | None = None,
    ) -> None:
        if blocks not in ("site", "global"):
            raise ValueError(f"blocks must be 'site' or 'global', got {blocks!r}")
        init_scale = check_init_scale(init_scale)
        if isinstance(max_block_dim, bool) or not isinstance(max_block_dim, int):
            raise ValueError(f"max_block_dim must be an int, got {max_block_dim!r}")
        self.blocks = blocks
        self.init_scale = init_scale
        self.max_block_dim = max_block_dim
        super().__init__(model, init_loc_fn=init_loc_fn, create_plates=create_plates)

    # ------------------------------------------------------------------ setup
    def _check_block(self, name: str, d: int) -> None:
        if d > self.max_block_dim:
            gb = d * d * 4 / 1e9
            raise ValueError(
                f"AutoFullRankNormal(blocks={self.blocks!r}): the block of {name} has "
                f"D = {d} coordinates, above max_block_dim = {self.max_block_dim}; its "
                f"D x D Cholesky factor would take {gb:.3g} GB. Use AutoMatrixNormal or "
                "AutoKTiedNormal for large weight matrices, or raise max_block_dim."
            )

    def _setup_prototype(self, *args: Any, **kwargs: Any) -> None:
        self.locs = PyroModule()
        self.scales = PyroModule()
        self.scale_trils = PyroModule()
        self._init_locs: list[torch.Tensor] = []
        self._offsets: dict[str, tuple[int, int]] = {}
        super()._setup_prototype(*args, **kwargs)
        if self.blocks == "global":
            init = torch.cat(self._init_locs)
            d = init.numel()
            self._check_block("all sites", d)
            self.loc = PyroParam(init, constraints.real_vector)
            self.scale = PyroParam(torch.full_like(init, self.init_scale),
                                   constraints.softplus_positive)  # fmt: skip
            self.scale_tril = PyroParam(torch.eye(d, dtype=init.dtype),
                                        constraints.unit_lower_cholesky)  # fmt: skip
        del self._init_locs

    def _init_site_params(self, info: LatentSite, init_loc: torch.Tensor) -> None:
        if self.blocks == "global":
            if info.frames:
                plates = ", ".join(repr(f.name) for f in info.frames)
                raise ValueError(
                    f"AutoFullRankNormal(blocks='global') does not support site {info.name!r}"
                    f" inside plate(s) {plates}: a joint covariance over local latents "
                    "cannot be subsampled. Use blocks='site' (one block per plate element)."
                )
            start = sum(t.numel() for t in self._init_locs)
            self._offsets[info.name] = (start, start + init_loc.numel())
            self._init_locs.append(init_loc.reshape(-1))
            return
        batch = info.unconstrained_batch_shape
        d = info.unconstrained_event_shape.numel()
        self._check_block(repr(info.name), d)
        tril = torch.eye(d, dtype=init_loc.dtype).expand(batch + (d, d)).clone()
        loc = init_loc.reshape(batch + (d,))
        scale = torch.full_like(loc, self.init_scale)
        deep_setattr(self.locs, info.name, PyroParam(loc, constraints.real_vector, 1))
        deep_setattr(self.scales, info.name, PyroParam(scale, constraints.softplus_positive, 1))
        deep_setattr(
            self.scale_trils, info.name, PyroParam(tril, constraints.unit_lower_cholesky, 2)
        )

    # ---------------------------------------------------------------- access
    def _site_params(self, name: str) -> tuple[torch.Tensor, torch.Tensor]:
        """Unconstrained flat loc and scale_tril of a "site" block (subsampled in plates)."""
        scale = attrgetter(name)(self.scales)
        return attrgetter(name)(self.locs), scale.unsqueeze(-1) * attrgetter(name)(self.scale_trils)

    @property
    def _global_tril(self) -> torch.Tensor:
        r""":math:`\operatorname{diag}(s) L` of the "global" block."""
        return self.scale.unsqueeze(-1) * self.scale_tril

    def _unconstrained_dist(self, info: LatentSite) -> FullRankNormal:
        """Site block; for "global" the marginal of the site (used by get_posterior)."""
        if self.blocks == "site":
            loc, tril = self._site_params(info.name)
            return FullRankNormal(loc, tril, info.unconstrained_event_shape, validate_args=False)
        start, end = self._offsets[info.name]
        rows = self._global_tril[start:end, :end]
        tril = torch.linalg.cholesky(rows @ rows.T)
        return FullRankNormal(
            self.loc[start:end], tril, info.unconstrained_shape, validate_args=False
        )

    def _unconstrained_loc_scale(self, info: LatentSite) -> tuple[torch.Tensor, torch.Tensor]:
        if self.blocks == "site":
            loc, tril = self._site_params(info.name)
        else:
            start, end = self._offsets[info.name]
            loc, tril = self.loc[start:end], self._global_tril[start:end, :end]
        shape = info.unconstrained_shape
        return loc.reshape(shape), tril.pow(2).sum(-1).sqrt().reshape(shape)

    def forward(self, *args: Any, **kwargs: Any) -> dict[str, torch.Tensor]:
        """Sample every latent site; same ``*args, **kwargs`` as the model."""
        if self.blocks == "site" or self.prototype_trace is None:
            return super().forward(*args, **kwargs)
        loc, tril = self.loc, self._global_tril
        eps_prev: torch.Tensor | None = None
        result = {}
        for name, info in self._require_setup().items():
            start, end = self._offsets[name]
            cond_loc = loc[start:end]
            if eps_prev is not None:
                cond_loc = cond_loc + (tril[start:end, :start] @ eps_prev.unsqueeze(-1)).squeeze(-1)
            block = tril[start:end, start:end]
            q = FullRankNormal(cond_loc, block, info.unconstrained_shape, validate_args=False)
            value = pyro.sample(name, info.constrain(q))
            result[name] = value
            # recover this block's standard-normal draw from the value (exact under replay)
            u = info.transform.inv(value) if info.is_constrained else value
            last = getattr(q, "last_draw", None)
            if last is not None and last[0] is u:  # drawn here: reuse its standard normals
                eps = last[1]
            else:  # replayed or conditioned value: recover them
                eps = torch.linalg.solve_triangular(
                    block, (u.reshape(u.shape[: u.dim() - len(info.unconstrained_shape)] + (-1,))
                            - cond_loc).unsqueeze(-1), upper=False,
                ).squeeze(-1)  # fmt: skip
            if eps_prev is not None:
                batch = torch.broadcast_shapes(eps_prev.shape[:-1], eps.shape[:-1])
                eps = torch.cat(
                    [eps_prev.expand(batch + (start,)), eps.expand(batch + eps.shape[-1:])], -1
                )
            eps_prev = eps
        return result

    @property
    def num_variational_params(self) -> int:
        """Free variational numbers: :math:`D + D(D+1)/2` per block (full plate size)."""
        sites = self._require_setup()
        if self.blocks == "global":
            d = self.loc.numel()
            return d + d * (d + 1) // 2
        total = 0
        for info in sites.values():
            d = info.unconstrained_event_shape.numel()
            total += (info.numel // d) * (d + d * (d + 1) // 2)
        return total
