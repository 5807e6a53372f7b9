"""Shared per-site plumbing for guides that give every latent sample site its own factor.

Every guide in this package has the same life cycle as Pyro's
:class:`~pyro.infer.autoguide.AutoNormal`:

1. ``__init__`` only stores and checks settings;
2. the first call runs :meth:`PerSiteGuide._setup_prototype`, which traces the model once
   (with the sites initialised by ``init_loc_fn``) and creates the parameters of each site;
3. every call samples each latent site inside its plates and returns ``{site: value}``.

What differs between guides is only the distribution of one site in *unconstrained* space
(diagonal Normal, k-tied Normal, matrix-normal, ...). :class:`PerSiteGuide` owns everything
else: it describes each site as a :class:`~guides._sites.LatentSite` (support, bijection, event dims, full
unconstrained shape, plate frames), enters the site's plates (including subsampled ones),
pushes the unconstrained distribution through ``biject_to(support)`` and samples from a *real*
distribution object, so that :class:`~pyro.infer.TraceMeanField_ELBO` can use a registered
closed-form KL divergence.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import pyro
import pyro.distributions as dist
import torch
from pyro.infer.autoguide import AutoGuide
from pyro.infer.autoguide.initialization import InitMessenger

from guides._sites import LatentSite, param_container, site_plates, unconstrained_init_value

__all__ = ["PerSiteGuide"]


class PerSiteGuide(AutoGuide):
    """Base class of guides that factorise over latent sample sites.

    Subclasses implement three hooks, all in unconstrained space:

    - :meth:`_init_site_params` creates the parameters of one site;
    - :meth:`_unconstrained_dist` returns the site's distribution (called inside the
      site's plates, so parameters declared with ``PyroParam(..., event_dim=...)`` come
      back already subsampled);
    - :meth:`_unconstrained_loc_scale` returns the marginal loc and scale of each
      unconstrained coordinate (used by :meth:`loc_scale`, :meth:`median` and
      :meth:`quantiles`).

    and declare :attr:`std_params`, the containers of their standard-deviation
    parameters (read by :meth:`is_std_param` and :func:`guides.std_param_names`).

    Parameters
    ----------
    model : callable
        A Pyro model.
    init_loc_fn : callable
        Per-site initialisation function (see :mod:`pyro.infer.autoguide.initialization`).
    create_plates : callable, optional
        Takes the model's ``*args, **kwargs`` and returns a :class:`pyro.plate` or an
        iterable of plates, used instead of automatically created ones (e.g. to share
        subsample indices with the model).

    Attributes
    ----------
    std_params : frozenset of str
        Class attribute of every concrete guide: the names of the parameter containers
        (attributes of the guide, the first dotted component after the guide's prefix
        in a param-store name, e.g. ``"scales"`` in ``"AutoMeanField.scales.w"``) whose
        parameters set the scale of q: standard deviations and the factors that shape
        them (low-rank or Kronecker factors, Cholesky factors of covariances). The other
        parameters (``locs``) set its location only. Empty when no scale is learned.
    """

    std_params: ClassVar[frozenset[str]]

    def __init__(
        self,
        model: Callable[..., Any],
        *,
        init_loc_fn: Callable[[dict], torch.Tensor],
        create_plates: Callable[..., pyro.plate | Sequence[pyro.plate]] | None = None,
    ) -> None:
        if not callable(init_loc_fn):
            raise ValueError(f"init_loc_fn must be callable, got {init_loc_fn!r}")
        if create_plates is not None and not callable(create_plates):
            raise ValueError(f"create_plates must be callable or None, got {create_plates!r}")
        self.init_loc_fn = init_loc_fn
        super().__init__(InitMessenger(init_loc_fn)(model), create_plates=create_plates)
        self._latent_sites: dict[str, LatentSite] | None = None

    # ----------------------------------------------------------------- hooks
    def _init_site_params(self, info: LatentSite, init_loc: torch.Tensor) -> None:
        raise NotImplementedError

    def _unconstrained_dist(self, info: LatentSite) -> dist.TorchDistribution:
        raise NotImplementedError

    def _unconstrained_loc_scale(self, info: LatentSite) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError

    # ------------------------------------------------------------- lifecycle
    def _setup_prototype(self, *args: Any, **kwargs: Any) -> None:
        super()._setup_prototype(*args, **kwargs)
        self._latent_sites = {}
        for name, site in self.prototype_trace.iter_stochastic_nodes():
            info = LatentSite.from_trace_site(site)
            self._latent_sites[name] = info
            self._init_site_params(info, unconstrained_init_value(site, info))

    def _require_setup(self) -> dict[str, LatentSite]:
        if self._latent_sites is None:
            raise RuntimeError(
                f"{type(self).__name__} has no parameters yet: call the guide once with the "
                "model's arguments, e.g. guide(*args, **kwargs), to trace the model first."
            )
        return self._latent_sites

    @property
    def latent_sites(self) -> Mapping[str, LatentSite]:
        """The model's latent sites, in model order (available after the first call)."""
        return dict(self._require_setup())

    def is_std_param(self, name: str) -> bool:
        """Whether a param-store name is one of this guide's standard-deviation parameters.

        Parameters
        ----------
        name : str
            A Pyro param-store name, ``"<prefix>.<container>.<site>"`` where ``prefix`` is
            the guide's Pyro name (its class name, e.g. ``"AutoMeanField"``, or a dotted
            path when the guide is a submodule, e.g. ``"AutoGuideList.0"``).

        Returns
        -------
        bool
            True when the name lies under this guide's prefix and its container is in
            :attr:`std_params`; False for the guide's location parameters and for names of
            other modules. Needs no setup: it answers from the name alone.

        Raises
        ------
        TypeError
            If the guide class does not declare :attr:`std_params`.
        """
        containers = getattr(type(self), "std_params", None)
        if containers is None:
            raise TypeError(
                f"{type(self).__name__} does not declare std_params, the containers of its "
                "standard-deviation parameters; set the class attribute "
                "std_params: ClassVar[frozenset[str]]"
            )
        return param_container(self._pyro_name, name) in containers

    def loc_scale(self, site: str) -> tuple[torch.Tensor, torch.Tensor]:
        """Marginal location and standard deviation of q at one latent site.

        Both are in *unconstrained* space: ``q`` pushes a Gaussian through
        ``biject_to(support)``, and these are the mean and standard deviation of each
        coordinate of that Gaussian (for a real-supported site, of the site itself). For a
        correlated guide they are the marginals (e.g. the row norms of a Cholesky factor,
        or :math:`\\sqrt{U_{ii} V_{jj}}` for a matrix normal).

        Parameters
        ----------
        site : str
            Latent site name (see :attr:`latent_sites`).

        Returns
        -------
        loc, scale : torch.Tensor
            Both of shape ``latent_sites[site].unconstrained_shape``: the site's shape
            (the unconstrained shape differs only for rank-changing supports such as the
            simplex), at full plate size for local sites of subsampled plates. They are
            built from the current parameters and are *not* detached (differentiable);
            detach them to record values.

        Raises
        ------
        RuntimeError
            If the guide has not been called yet (it has no parameters).
        ValueError
            If ``site`` is not a latent site of the model.
        """
        sites = self._require_setup()
        info = sites.get(site) if isinstance(site, str) else None
        if info is None:
            raise ValueError(
                f"{type(self).__name__} has no latent site {site!r}; latent sites are {list(sites)}"
            )
        loc, scale = self._unconstrained_loc_scale(info)
        shape = info.unconstrained_shape
        return loc.reshape(shape), scale.expand(loc.shape).reshape(shape)

    def loc_scales(self) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        """:meth:`loc_scale` of every latent site, ``{site: (loc, scale)}`` in model order.

        Raises
        ------
        RuntimeError
            If the guide has not been called yet (it has no parameters).
        """
        return {name: self.loc_scale(name) for name in self._require_setup()}

    def forward(self, *args: Any, **kwargs: Any) -> dict[str, torch.Tensor]:
        """Sample every latent site; same ``*args, **kwargs`` as the model.

        Returns
        -------
        dict of str to torch.Tensor
            Constrained sample of each latent site (subsampled where the site's plate is).
        """
        if self.prototype_trace is None:
            self._setup_prototype(*args, **kwargs)
        plates = self._create_plates(*args, **kwargs)
        result = {}
        for name, info in self._require_setup().items():
            with site_plates(info, plates):
                result[name] = pyro.sample(name, info.constrain(self._unconstrained_dist(info)))
        return result

    def get_posterior(self, *args: Any, **kwargs: Any) -> dist.TorchDistribution:
        """The variational distribution: the joint over all sites, or one site's.

        Pyro's convention, ``guide.get_posterior()`` or ``guide.get_posterior(*args,
        **kwargs)`` with the model's arguments (which this guide does not need), gives the
        joint distribution of the flat *unconstrained* latent vector: every site's
        unconstrained value flattened in row-major order, concatenated in model order, at
        full plate size, as Pyro's ``AutoContinuous`` guides give it. It is
        ``Normal(loc, scale).to_event(1)`` when q factorises over the coordinates, and a
        ``MultivariateNormal`` with a block-diagonal ``scale_tril`` otherwise.

        ``guide.get_posterior(name)`` (one string naming a latent site) gives that site's
        distribution in constrained space at full size, the distribution the guide samples
        the site from (for a guide that correlates sites, its marginal).

        Returns
        -------
        pyro.distributions.TorchDistribution
            Built from the current parameters (differentiable, not detached).

        Raises
        ------
        RuntimeError
            If the guide has not been called yet, or (joint) the model has no latent site.
        ValueError
            If a single string names no latent site, or (joint) a correlated guide's joint
            would need a dense covariance over more than :attr:`max_joint_dim`
            coordinates; the message names the per-site form.
        NotImplementedError
            (joint) If the guide class does not say how its sites' coordinates are
            correlated (:meth:`_site_scale_tril`); the message names the per-site form.
        """
        if len(args) == 1 and not kwargs and isinstance(args[0], str):
            return self._site_posterior(args[0])
        return self._joint_posterior()

    def _site_posterior(self, name: str) -> dist.TorchDistribution:
        sites = self._require_setup()
        if name not in sites:
            raise ValueError(
                f"{type(self).__name__} has no latent site {name!r}; latent sites are "
                f"{list(sites)}. get_posterior(name) takes a latent site name; "
                "get_posterior() (or the model's arguments) gives the joint posterior."
            )
        info = sites[name]
        return info.constrain(self._unconstrained_dist(info))

    #: Largest number of unconstrained coordinates for which :meth:`get_posterior` builds
    #: a dense joint covariance (guides that correlate the coordinates of a site).
    max_joint_dim: ClassVar[int] = 10_000

    def _site_scale_tril(self, info: LatentSite) -> torch.Tensor | None:
        """Cholesky factor of the covariance of one site's flat unconstrained value.

        Hook of :meth:`get_posterior`'s joint: return the lower-triangular ``(D, D)``
        factor (full plate size, row-major flattening), or None when the site's
        coordinates are independent (the joint then uses the scales of
        :meth:`_unconstrained_loc_scale`). Guides whose coordinates may be correlated
        must override it; the base class raises ``NotImplementedError``.
        """
        raise NotImplementedError

    def _joint_posterior(self) -> dist.TorchDistribution:
        sites = self._require_setup()
        cls = type(self).__name__
        per_site = (
            f"ask per site instead: {cls}.get_posterior(name) for name in guide.latent_sites, "
            "or loc_scales(), median(), quantiles()"
        )
        if not sites:
            raise RuntimeError(f"{cls} found no latent variables; Use an empty guide instead")
        locs, scales, trils = [], [], []
        try:
            for info in sites.values():
                loc, scale = self._unconstrained_loc_scale(info)
                locs.append(loc.reshape(-1))
                scales.append(scale.expand(loc.shape).reshape(-1))
                trils.append(self._site_scale_tril(info))
        except NotImplementedError:
            raise NotImplementedError(
                f"{cls} defines no joint posterior over all sites (it does not say how the "
                f"coordinates of a site are correlated: _site_scale_tril); {per_site}"
            ) from None
        loc = torch.cat(locs)
        if all(t is None for t in trils):
            return dist.Normal(loc, torch.cat(scales)).to_event(1)
        if loc.numel() > self.max_joint_dim:
            raise ValueError(
                f"{cls}.get_posterior(): the joint posterior over all {loc.numel()} "
                f"unconstrained coordinates would need a dense {loc.numel()} x {loc.numel()} "
                f"covariance (above max_joint_dim = {self.max_joint_dim}); {per_site}"
            )
        blocks = [torch.diag(s) if t is None else t for s, t in zip(scales, trils, strict=True)]
        return dist.MultivariateNormal(loc, scale_tril=torch.block_diag(*blocks))

    @torch.no_grad()
    def median(self, *args: Any, **kwargs: Any) -> dict[str, torch.Tensor]:
        """Posterior median of each latent site, ``{site: tensor}`` (constrained, full size).

        The median of each unconstrained coordinate is its loc; elementwise monotone
        bijections (exp, softplus, sigmoid, affine) map it to the constrained median.
        """
        result = {}
        for name, info in self._require_setup().items():
            loc, _ = self._unconstrained_loc_scale(info)
            result[name] = info.transform(loc).detach().clone()
        return result

    @torch.no_grad()
    def quantiles(
        self, quantiles: Sequence[float] | torch.Tensor, *args: Any, **kwargs: Any
    ) -> dict[str, torch.Tensor]:
        """Marginal posterior quantiles of each latent site (constrained, full size).

        Parameters
        ----------
        quantiles : sequence of float or torch.Tensor
            Probabilities in ``[0, 1]``.

        Returns
        -------
        dict of str to torch.Tensor
            Each value has shape ``(len(quantiles),) + site_shape``. Exact for elementwise
            monotone bijections; for rank-changing ones (e.g. the simplex) they are the
            images of unconstrained quantiles, as in Pyro's ``AutoNormal``.
        """
        result = {}
        for name, info in self._require_setup().items():
            loc, scale = self._unconstrained_loc_scale(info)
            q = torch.as_tensor(quantiles, dtype=loc.dtype, device=loc.device).reshape(-1)
            if not bool(((q >= 0) & (q <= 1)).all()):
                raise ValueError(f"quantiles must lie in [0, 1], got {q.tolist()}")
            q = q.reshape((-1,) + (1,) * loc.dim())
            result[name] = info.transform(dist.Normal(loc, scale).icdf(q)).detach()
        return result

    @property
    def num_variational_params(self) -> int:
        """Total number of scalar variational parameters (all sites, full plate size)."""
        self._require_setup()
        return sum(p.numel() for p in self.parameters())
