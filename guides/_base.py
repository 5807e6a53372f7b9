"""Shared per-site plumbing for guides that give every latent sample site its own factor.

Every guide in this package has the same life cycle as Pyro's
:class:`~pyro.infer.autoguide.AutoNormal`:

1. ``__init__`` only stores and checks settings;
2. the first call runs :meth:`PerSiteGuide._setup_prototype`, which traces the model once
   (with the sites initialised by ``init_loc_fn``) and creates the parameters of each site;
3. every call samples each latent site inside its plates and returns ``{site: value}``.

What differs between guides is only the distribution of one site in *unconstrained* space
(diagonal Normal, k-tied Normal, matrix-normal, ...). :class:`PerSiteGuide` owns everything
else: it describes each site as a :class:`LatentSite` (support, bijection, event dims, full
unconstrained shape, plate frames), enters the site's plates (including subsampled ones),
pushes the unconstrained distribution through ``biject_to(support)`` and samples from a *real*
distribution object, so that :class:`~pyro.infer.TraceMeanField_ELBO` can use a registered
closed-form KL divergence.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from numbers import Real
from operator import attrgetter
from typing import Any, ClassVar

import pyro
import pyro.distributions as dist
import torch
from pyro.distributions import constraints
from pyro.distributions.transforms import AffineTransform, ComposeTransform, IndependentTransform
from pyro.infer.autoguide import AutoGuide
from pyro.infer.autoguide.initialization import InitMessenger
from pyro.infer.autoguide.utils import deep_setattr, helpful_support_errors
from pyro.nn import PyroModule, PyroParam
from pyro.ops.tensor_utils import periodic_repeat
from pyro.poutine.indep_messenger import CondIndepStackFrame
from torch.distributions import Independent, Transform, biject_to
from torch.distributions.constraints import Constraint

__all__ = [
    "LatentSite",
    "PerSiteGuide",
    "check_init_scale",
    "check_scale",
    "is_identity_transform",
    "param_container",
    "simplify_transform",
    "site_plates",
    "unconstrained_init_value",
]


def check_scale(value: object, name: str, meaning: str | None = None) -> float:
    """Check a standard deviation given as a setting and return it as a float.

    Parameters
    ----------
    value : object
        The setting; it must be a finite real number > 0 (``bool`` is rejected).
    name : str
        How the error message names the setting, e.g. ``"scale"`` or ``"scale['w']"``.
    meaning : str, optional
        What the setting is, added in parentheses to the error message.

    Returns
    -------
    float

    Raises
    ------
    ValueError
        ``"<name> must be a finite number > 0 (<meaning>), got <value>"``.
    """
    if (
        isinstance(value, bool)
        or not isinstance(value, Real)
        or not math.isfinite(value)
        or value <= 0
    ):
        detail = f" ({meaning})" if meaning else ""
        raise ValueError(f"{name} must be a finite number > 0{detail}, got {value!r}")
    return float(value)


def check_init_scale(init_scale: object) -> float:
    """:func:`check_scale` for the ``init_scale`` setting shared by the guides."""
    return check_scale(
        init_scale,
        "init_scale",
        "the initial standard deviation of each unconstrained coordinate",
    )


def is_identity_transform(transform: Transform) -> bool:
    """Whether ``transform`` is the identity (possibly wrapped in ``IndependentTransform``).

    ``biject_to(constraints.real)`` is an empty :class:`ComposeTransform` and
    ``biject_to(constraints.real_vector)`` wraps it in an :class:`IndependentTransform`.
    """
    while isinstance(transform, IndependentTransform):
        transform = transform.base_transform
    if isinstance(transform, ComposeTransform):
        return all(is_identity_transform(part) for part in transform.parts)
    return False


def _is_unit_affine(transform: Transform) -> bool:
    return (
        isinstance(transform, AffineTransform)
        and transform.event_dim == 0
        and isinstance(transform.loc, Real)
        and isinstance(transform.scale, Real)
        and transform.loc == 0
        and transform.scale == 1
    )


def simplify_transform(transform: Transform) -> Transform:
    """Drop identity ``AffineTransform(0, 1)`` parts and flatten compositions.

    torch's ``biject_to(constraints.positive)`` is ``ComposeTransform([ExpTransform(),
    AffineTransform(0., 1.)])``; simplified it is ``ExpTransform()``, which compares equal
    to the transform of a ``LogNormal``, so that torch's registered KL between two
    ``TransformedDistribution`` objects with equal transforms applies to such priors.
    """
    if isinstance(transform, IndependentTransform):
        return IndependentTransform(
            simplify_transform(transform.base_transform), transform.reinterpreted_batch_ndims
        )
    if isinstance(transform, ComposeTransform):
        parts: list[Transform] = []
        for part in transform.parts:
            part = simplify_transform(part)
            if isinstance(part, ComposeTransform):
                parts.extend(part.parts)
            elif not _is_unit_affine(part):
                parts.append(part)
        return parts[0] if len(parts) == 1 else ComposeTransform(parts)
    return transform


def param_container(prefix: str, name: str) -> str | None:
    """The container of a param-store name under a module prefix, or None if outside it.

    Pyro names the parameter ``<attr>`` of a :class:`~pyro.nn.PyroModule` named ``prefix``
    ``"<prefix>.<attr>"``, with one dotted component per submodule: a guide's
    ``scales.<site>`` is ``"AutoMeanField.scales.<site>"`` (and a site ``"layer.weight"``
    adds two components). The container is the first component after the prefix
    (``"scales"``); the site name never counts.

    Parameters
    ----------
    prefix : str
        The module's Pyro name (``module._pyro_name``; ``""`` for an unnamed module).
    name : str
        A param-store name.

    Returns
    -------
    str or None
        None when ``name`` is not a parameter under ``prefix``.
    """
    if prefix:
        if not name.startswith(prefix + "."):
            return None
        name = name[len(prefix) + 1 :]
    return name.split(".", 1)[0] or None


def _site_transform(site: Mapping[str, Any]) -> Transform:
    with helpful_support_errors(site):
        return simplify_transform(biject_to(site["fn"].support))


def _unconstrain(site: Mapping[str, Any]) -> torch.Tensor:
    """The site's (detached) init value mapped to unconstrained space, at trace size."""
    return _site_transform(site).inv(site["value"].detach()).detach()


@dataclass(frozen=True)
class LatentSite:
    """Static description of one latent sample site of a prototype trace.

    Attributes
    ----------
    name : str
        Sample-site name in the model.
    support : torch.distributions.constraints.Constraint
        Support of the prior at this site.
    transform : torch.distributions.Transform
        ``biject_to(support)`` (simplified by :func:`simplify_transform`): maps
        unconstrained values to the support.
    event_dim : int
        Event dims of the site in constrained space (``site["fn"].event_dim``).
    unconstrained_event_dim : int
        Event dims in unconstrained space; differs from ``event_dim`` only for
        supports whose bijection changes the rank.
    unconstrained_shape : torch.Size
        Shape of the unconstrained value at *full* plate size (subsampled plate dims
        are expanded to the plate's full size). Guide parameters have this shape.
    frames : tuple of CondIndepStackFrame
        The site's (vectorized) plate frames, as recorded by the prototype trace.
    """

    name: str
    support: Constraint
    transform: Transform
    event_dim: int
    unconstrained_event_dim: int
    unconstrained_shape: torch.Size
    frames: tuple[CondIndepStackFrame, ...]

    @classmethod
    def from_trace_site(cls, site: Mapping[str, Any]) -> LatentSite:
        """Describe a latent sample site of a prototype trace.

        Parameters
        ----------
        site : dict
            A stochastic (non-observed) site of a :class:`pyro.poutine.Trace`.

        Returns
        -------
        LatentSite
        """
        init = _unconstrain(site)
        event_dim = site["fn"].event_dim
        unconstrained_event_dim = event_dim + init.dim() - site["value"].dim()
        shape = list(init.shape)
        for frame in site["cond_indep_stack"]:
            full_size = frame.full_size or frame.size
            shape[frame.dim - unconstrained_event_dim] = full_size
        return cls(
            name=site["name"],
            support=site["fn"].support,
            transform=_site_transform(site),
            event_dim=event_dim,
            unconstrained_event_dim=unconstrained_event_dim,
            unconstrained_shape=torch.Size(shape),
            frames=tuple(f for f in site["cond_indep_stack"] if f.vectorized),
        )

    @property
    def is_constrained(self) -> bool:
        """False when the support is the whole real space (no bijection is applied)."""
        return not is_identity_transform(self.transform)

    @property
    def is_subsampled(self) -> bool:
        """True when at least one of the site's plates is subsampled."""
        return any((f.full_size or f.size) != f.size for f in self.frames)

    @property
    def unconstrained_event_shape(self) -> torch.Size:
        """Rightmost ``unconstrained_event_dim`` dims of :attr:`unconstrained_shape`."""
        n = len(self.unconstrained_shape) - self.unconstrained_event_dim
        return self.unconstrained_shape[n:]

    @property
    def unconstrained_batch_shape(self) -> torch.Size:
        """:attr:`unconstrained_shape` without its rightmost ``unconstrained_event_dim`` dims."""
        n = len(self.unconstrained_shape) - self.unconstrained_event_dim
        return self.unconstrained_shape[:n]

    @property
    def numel(self) -> int:
        """Number of unconstrained scalars at full plate size."""
        return self.unconstrained_shape.numel()

    @property
    def elementwise_transform(self) -> Transform | None:
        """The scalar bijection if :attr:`transform` acts elementwise, else None."""
        transform = self.transform
        while isinstance(transform, IndependentTransform):
            transform = transform.base_transform
        if transform.domain.event_dim == 0 and transform.codomain.event_dim == 0:
            return transform
        return None

    def constrain(self, base: dist.TorchDistribution) -> dist.TorchDistribution:
        """Push an unconstrained distribution onto the site's support.

        Real-supported sites get ``base`` itself, so a Normal stays a Normal and
        closed-form KLs apply. For an elementwise bijection ``t`` and
        ``base = Independent(b, k)`` the result is
        ``Independent(TransformedDistribution(b, t), k)`` (the same distribution as
        ``TransformedDistribution(base, IndependentTransform(t, k))``), so that a prior
        such as ``LogNormal(...).to_event(k)`` still meets a registered KL. Other sites
        get ``TransformedDistribution(base, transform)``. The bijection caches its last
        input, so the guide's ``log_prob`` does not invert its own sample numerically.
        """
        if not self.is_constrained:
            return base
        elementwise = self.elementwise_transform
        if elementwise is not None:
            inner, ndims = base, 0
            if isinstance(base, Independent):
                inner, ndims = base.base_dist, base.reinterpreted_batch_ndims
            if inner.event_shape == ():
                constrained = dist.TransformedDistribution(inner, [elementwise.with_cache(1)])
                return constrained.to_event(ndims) if ndims else constrained
        return dist.TransformedDistribution(base, [self.transform.with_cache(1)])


def unconstrained_init_value(site: Mapping[str, Any], info: LatentSite) -> torch.Tensor:
    """The site's initial value in unconstrained space, repeated to full plate size.

    Parameters
    ----------
    site : dict
        The prototype-trace site (its ``value`` was set by ``init_loc_fn``).
    info : LatentSite
        Its description, from :meth:`LatentSite.from_trace_site`.

    Returns
    -------
    torch.Tensor
        Detached tensor of shape ``info.unconstrained_shape``. Along subsampled plate
        dims the init value of the traced minibatch is repeated periodically, as in
        :class:`~pyro.infer.autoguide.AutoNormal`.
    """
    init = _unconstrain(site)
    for frame in site["cond_indep_stack"]:
        full_size = frame.full_size or frame.size
        if full_size != frame.size:
            init = periodic_repeat(init, full_size, frame.dim - info.unconstrained_event_dim)
    return init.contiguous()


@contextmanager
def site_plates(info: LatentSite, plates: Mapping[str, pyro.plate]) -> Iterator[None]:
    """Enter the guide's plates of one site (in the order the model entered them)."""
    with ExitStack() as stack:
        for frame in info.frames:
            stack.enter_context(plates[frame.name])
        yield


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

    def get_posterior(self, name: str) -> dist.TorchDistribution:
        """The variational distribution of one site, in constrained space, at full size.

        Parameters
        ----------
        name : str
            Latent site name.

        Returns
        -------
        pyro.distributions.TorchDistribution
            Built from the current parameters (differentiable, not detached). Local sites
            of subsampled plates have their full plate size.
        """
        sites = self._require_setup()
        if name not in sites:
            raise KeyError(f"unknown latent site {name!r}; latent sites are {sorted(sites)}")
        info = sites[name]
        return info.constrain(self._unconstrained_dist(info))

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


class _LocScaleGuide(PerSiteGuide):
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

    def _mean_field_dist(self, info: LatentSite) -> dist.TorchDistribution:
        """The mean-field factor ``Normal(loc, scale).to_event(unconstrained_event_dim)``."""
        loc, scale = self._get_loc_and_scale(info.name)
        return dist.Normal(loc, scale).to_event(info.unconstrained_event_dim)
