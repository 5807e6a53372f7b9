"""Latent sites of a prototype trace and the small checks and transforms guides share.

:class:`LatentSite` describes one latent sample site (support, bijection, event dims, full
unconstrained shape, plate frames) and pushes an unconstrained distribution onto the
site's support; :func:`unconstrained_init_value` gives its initial value at full plate size
and :func:`site_plates` enters its plates. The checks validate guide settings with
messages that name the setting.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from numbers import Real
from typing import Any

import pyro
import pyro.distributions as dist
import torch
from pyro.distributions.transforms import AffineTransform, ComposeTransform, IndependentTransform
from pyro.infer.autoguide.utils import helpful_support_errors
from pyro.ops.tensor_utils import periodic_repeat
from pyro.poutine.indep_messenger import CondIndepStackFrame
from torch.distributions import Independent, Transform, biject_to
from torch.distributions.constraints import Constraint

__all__ = [
    "LatentSite",
    "check_init_scale",
    "check_scale",
    "check_structural",
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


def check_structural(value: object, guide: str, name: str) -> None:
    """Refuse a function passed as a guide's structural positional argument.

    Pyro's autoguides take ``init_loc_fn`` as their second positional argument
    (``AutoNormal(model, init_to_mean)``); the guides of this package use that place for
    their structure (``rank``, ``blocks``, ...), where a function is a mistake.

    Raises
    ------
    ValueError
        If ``value`` is callable, naming the argument and the keyword form.
    """
    if callable(value):
        raise ValueError(
            f"{guide}: {name} got the function {value!r}; the second positional argument "
            f"of {guide} is {name} (structural), unlike Pyro's autoguides, whose second "
            "positional argument is init_loc_fn: pass init_loc_fn=... by keyword"
        )


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
