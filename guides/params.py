"""Which parameters of a guide are standard deviations, for any AutoGuide.

Code that treats a guide's scale parameters apart from its location parameters (a separate
learning rate, gradient signal-to-noise ratios of each kind, pruning by posterior width)
asks these functions instead of keeping lists of parameter names. Every guide of this
package declares its containers in the class attribute ``std_params``
(:attr:`guides._base.PerSiteGuide.std_params`); a guide class of another package can
declare it the same way. Pyro's own location-scale autoguides are known here, and
:class:`~pyro.infer.autoguide.AutoGuideList` asks its parts.
"""

from __future__ import annotations

from pyro.infer.autoguide import (
    AutoDelta,
    AutoDiagonalNormal,
    AutoGuide,
    AutoGuideList,
    AutoLaplaceApproximation,
    AutoLowRankMultivariateNormal,
    AutoMultivariateNormal,
    AutoNormal,
)

from guides._sites import param_container

__all__ = ["is_std_param", "std_param_containers", "std_param_names"]

# Pyro's autoguides, which cannot carry the class attribute: the containers of the
# parameters that shape their covariance.
_PYRO_STD_PARAMS: dict[type, frozenset[str]] = {
    AutoDelta: frozenset(),
    AutoLaplaceApproximation: frozenset(),
    AutoNormal: frozenset({"scales"}),
    AutoDiagonalNormal: frozenset({"scale"}),
    AutoMultivariateNormal: frozenset({"scale", "scale_tril"}),
    AutoLowRankMultivariateNormal: frozenset({"scale", "cov_factor"}),
}


def std_param_containers(guide: AutoGuide | type[AutoGuide]) -> frozenset[str]:
    """The containers of a guide's standard-deviation parameters.

    Parameters
    ----------
    guide : AutoGuide or AutoGuide subclass
        A guide (or guide class) that declares ``std_params``, or one of Pyro's
        ``AutoDelta``, ``AutoLaplaceApproximation``, ``AutoNormal``,
        ``AutoDiagonalNormal``, ``AutoMultivariateNormal``,
        ``AutoLowRankMultivariateNormal`` (or a subclass of one).

    Returns
    -------
    frozenset of str
        Attribute names of the guide (the first dotted component after the guide's prefix
        in a param-store name), e.g. ``{"scales", "log_u", "log_v"}``.

    Raises
    ------
    TypeError
        For a guide class that declares no ``std_params`` and is not one of the above
        (e.g. ``AutoGuideList``, whose parts each have their own, or a normalizing flow).
    """
    cls = guide if isinstance(guide, type) else type(guide)
    declared = getattr(cls, "std_params", None)
    if declared is not None:
        return frozenset(declared)
    for klass in cls.__mro__:
        if klass in _PYRO_STD_PARAMS:
            return _PYRO_STD_PARAMS[klass]
    raise TypeError(
        f"{cls.__name__} does not declare std_params (the containers of its "
        "standard-deviation parameters): set the class attribute "
        "std_params: ClassVar[frozenset[str]] on it"
    )


def is_std_param(guide: AutoGuide, name: str) -> bool:
    """Whether a param-store name is one of ``guide``'s standard-deviation parameters.

    Parameters
    ----------
    guide : AutoGuide
        See :func:`std_param_containers`; an ``AutoGuideList`` asks its parts.
    name : str
        A Pyro param-store name, ``"<guide prefix>.<container>.<site>"`` (e.g.
        ``"AutoKTiedNormal.log_u.layer0.weight"``). The site part never counts, so a site
        named like a container (``"row.weight"``) is not mistaken for one.

    Returns
    -------
    bool
        False for the guide's location parameters and for names of other modules. Answers
        from the name alone, so it works before the guide's first call (e.g. in a Pyro
        per-parameter optimizer argument function).

    Raises
    ------
    TypeError
        See :func:`std_param_containers`.
    """
    if isinstance(guide, AutoGuideList):
        return any(is_std_param(part, name) for part in guide)
    method = getattr(guide, "is_std_param", None)
    if callable(method):
        return bool(method(name))
    return param_container(guide._pyro_name, name) in std_param_containers(guide)


def std_param_names(guide: AutoGuide) -> set[str]:
    """The param-store names of a set-up guide's standard-deviation parameters.

    Parameters
    ----------
    guide : AutoGuide
        A guide that has been called once (so its parameters exist); see
        :func:`std_param_containers`.

    Returns
    -------
    set of str
        Names as in ``pyro.get_param_store()`` and in the names handed to Pyro's
        per-parameter optimizer arguments, e.g. ``{"AutoMeanField.scales.w", ...}``.

    Raises
    ------
    RuntimeError
        If the guide has not been called yet.
    TypeError
        See :func:`std_param_containers`.
    """
    if getattr(guide, "prototype_trace", None) is None:
        raise RuntimeError(
            f"{type(guide).__name__} has no parameters yet: call the guide once with the "
            "model's arguments, e.g. guide(*args, **kwargs), to trace the model first."
        )
    prefix = guide._pyro_name
    names = (f"{prefix}.{n}" if prefix else n for n, _ in guide.named_pyro_params())
    return {name for name in names if is_std_param(guide, name)}
