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
import pyro.distributions as dist
import torch
from pyro.distributions import constraints
from pyro.infer.autoguide.initialization import init_to_median
from pyro.infer.autoguide.utils import deep_setattr
from pyro.nn import PyroModule, PyroParam
from torch.distributions import Distribution, Independent, TransformedDistribution

from guides._base import PerSiteGuide
from guides._sites import LatentSite, check_init_scale, check_structural, site_plates
from guides.distributions import FullRankNormal

__all__ = ["AutoFullRankNormal"]


def _base_value(fn: Distribution, value: torch.Tensor) -> torch.Tensor:
    """The draw of the base distribution under ``fn``'s (cached) transforms.

    For a value that ``fn`` drew itself, the caches give back the very tensor the base
    distribution drew; for a replayed value the transforms are inverted.
    """
    while isinstance(fn, Independent):
        fn = fn.base_dist
    if isinstance(fn, TransformedDistribution):
        for transform in reversed(fn.transforms):
            value = transform.inv(value)
    return value


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
    sites concatenated in model order, Pyro's ``AutoMultivariateNormal``. It is sampled
    site by site from the exact conditionals
    :math:`q(w_s \mid w_{<s}) = \mathcal{N}(\mu_s + L_{s,<s}\,\varepsilon_{<s},\ L_{ss}
    L_{ss}^\top)`, with :math:`\varepsilon_{<s} = L_{<s,<s}^{-1}(w_{<s} - \mu_{<s})`, so
    every site has a real distribution object and :class:`~pyro.infer.TraceMeanField_ELBO`
    adds the conditional closed-form KLs, whose sum is an unbiased estimate of the joint
    KL (the chain rule of the KL divergence). A site inside plates is sampled inside them
    from a :class:`~guides.distributions.FullRankNormal` whose plate dims are ``coupled_shape``: its elements
    stay correlated, and its density and KL are split over them by the same chain rule, so
    enumeration and plate-aware ELBOs see the usual batch shapes. As for Pyro's
    ``AutoContinuous`` guides, the model's structure must be fixed and the plates must
    not be subsampled (one joint covariance has no per-minibatch part): a site in a
    subsampled plate is refused with an error, and a model without latent sites too.

    Each site is a :class:`~guides.distributions.FullRankNormal` (pushed through ``biject_to(support)`` for
    constrained sites), with closed-form KLs registered against (Independent) Normal,
    MultivariateNormal and FullRankNormal priors.

    Parameters
    ----------
    model : callable
        A Pyro model.
    blocks : {"site", "global"}, default "site"
        One covariance block per site, or one over everything. This second positional
        argument is structural, unlike Pyro's ``AutoMultivariateNormal(model,
        init_loc_fn)``: pass ``init_loc_fn`` by keyword.
    init_loc_fn : callable, default ``init_to_median``
        Per-site initialisation of :math:`\mu` (see :class:`~guides.AutoMeanField`): the
        default of Pyro's ``AutoMultivariateNormal`` too, not ``AutoNormal``'s
        ``init_to_feasible``.
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

    ``get_posterior()`` (no argument, or the model's arguments, as Pyro calls it) is the
    joint over the flat unconstrained latent: for "global" exactly Pyro's
    ``MultivariateNormal(loc, scale_tril)``; ``get_posterior(name)`` is one site's
    (marginal) distribution.

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
        check_structural(blocks, "AutoFullRankNormal", "blocks")
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
        try:
            super()._setup_prototype(*args, **kwargs)
            if self.blocks == "global":
                self._init_global_params()
        except BaseException:
            self.prototype_trace = None  # the next call traces the model again
            self._latent_sites = None
            raise
        finally:
            del self._init_locs

    def _init_global_params(self) -> None:
        if not self._init_locs:
            raise RuntimeError(
                f"{type(self).__name__}(blocks='global') found no latent variables; "
                "Use an empty guide instead"
            )
        init = torch.cat(self._init_locs)
        d = init.numel()
        self._check_block("all sites", d)
        eye = torch.eye(d, dtype=init.dtype, device=init.device)
        self.loc = PyroParam(init, constraints.real_vector)
        self.scale = PyroParam(
            torch.full_like(init, self.init_scale), constraints.softplus_positive
        )
        self.scale_tril = PyroParam(eye, constraints.unit_lower_cholesky)

    def _init_site_params(self, info: LatentSite, init_loc: torch.Tensor) -> None:
        if self.blocks == "global":
            if info.is_subsampled:
                plates = ", ".join(
                    f"{f.name!r} (size {f.full_size}, subsample size {f.size})"
                    for f in info.frames
                    if (f.full_size or f.size) != f.size
                )
                raise ValueError(
                    f"AutoFullRankNormal(blocks='global') cannot sample site {info.name!r}: "
                    f"it lies in the subsampled plate(s) {plates}, and one joint covariance "
                    "over all coordinates has no per-minibatch part. Use blocks='site' (one "
                    "block per plate element), or an AutoGuideList with a global part for "
                    "the other sites."
                )
            start = sum(t.numel() for t in self._init_locs)
            self._offsets[info.name] = (start, start + init_loc.numel())
            self._init_locs.append(init_loc.reshape(-1))
            return
        batch = info.unconstrained_batch_shape
        d = info.unconstrained_event_shape.numel()
        self._check_block(repr(info.name), d)
        eye = torch.eye(d, dtype=init_loc.dtype, device=init_loc.device)
        tril = eye.expand(batch + (d, d)).clone()
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

    def _site_scale_tril(self, info: LatentSite) -> torch.Tensor:
        _, tril = self._site_params(info.name)
        d = tril.shape[-1]
        return torch.block_diag(*tril.reshape(-1, d, d))

    def _joint_posterior(self) -> dist.TorchDistribution:
        if self.blocks == "site":
            return super()._joint_posterior()
        self._require_setup()
        return dist.MultivariateNormal(self.loc, scale_tril=self._global_tril)

    def forward(self, *args: Any, **kwargs: Any) -> dict[str, torch.Tensor]:
        """Sample every latent site; same ``*args, **kwargs`` as the model."""
        if self.prototype_trace is None:
            self._setup_prototype(*args, **kwargs)
        if self.blocks == "site":
            return super().forward(*args, **kwargs)
        plates = self._create_plates(*args, **kwargs)
        loc, tril = self.loc, self._global_tril
        # standard-normal draws of the sites so far, flat (last dim); the dims before it are
        # the batch dims of the draws laid out as Pyro's plates lay out batch dims (size 1
        # at the dims of the model's plates, particle dims of outer plates on the left)
        eps_prev: torch.Tensor | None = None
        result = {}
        for name, info in self._require_setup().items():
            start, end = self._offsets[name]
            coupled = info.unconstrained_batch_shape
            cond_loc = loc[start:end]
            if eps_prev is not None:
                outer = eps_prev.shape[:-1]
                outer = outer[: max(len(outer) - len(coupled), 0)]  # drop the plate dims
                eps = eps_prev.reshape(outer + (start,))
                cond_loc = cond_loc + (tril[start:end, :start] @ eps.unsqueeze(-1)).squeeze(-1)
            q = FullRankNormal(
                cond_loc,
                tril[start:end, start:end],
                info.unconstrained_event_shape,
                coupled,
                validate_args=False,
            )
            fn = info.constrain(q)
            with site_plates(info, plates):
                value = pyro.sample(name, fn)
            result[name] = value
            u = _base_value(fn, value)
            # this block's standard normals (reused when drawn here, solved when replayed)
            eps = q.whiten(u)
            eps = eps.reshape(eps.shape[:-1] + (1,) * len(coupled) + eps.shape[-1:])
            if eps_prev is not None:
                batch = torch.broadcast_shapes(eps_prev.shape[:-1], eps.shape[:-1])
                eps = torch.cat(
                    [eps_prev.expand(batch + (start,)), eps.expand(batch + eps.shape[-1:])], -1
                )
            while eps.dim() > 1 and eps.shape[0] == 1:  # leading 1s: no batch dims of a site
                eps = eps[0]
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
