"""Names of a weight or bias site's axes in ArviZ files: the units a layer connects.

A linear layer's weight ``X.weight`` of shape ``(out, in)`` gets the dimensions ``X_out``
and ``X_in``, its bias ``X.bias`` of shape ``(out,)`` gets ``X_out``, so that the unit axes
of a layer's sites line up (``layer1.weight``'s ``layer1_out`` is ``layer1.bias``'s, and
``layer2.weight``'s ``layer2_in`` has their size). Every other site ``name`` of ``k`` event
axes gets ArviZ's default ``name_dim_0 .. name_dim_{k-1}``. The zoo's cells
(:mod:`zoo.execution.arviz_io`) and :func:`zoo.inference.mcmc.user.sample_nuts` name them alike.
"""

from __future__ import annotations

import re

__all__ = ["site_dims"]

_WEIGHT = re.compile(r"^(.+)\.weight$")
_BIAS = re.compile(r"^(.+)\.bias$")


def site_dims(name: str, event_ndim: int) -> list[str]:
    """Dimension names of a site's event axes.

    Parameters
    ----------
    name : str
        Site name, e.g. ``layer2.weight`` or ``linear.bias``.
    event_ndim : int
        Number of axes after ``(chain, draw)``.

    Returns
    -------
    list of str
        For example ``["layer2_out", "layer2_in"]``, ``["linear_out"]`` or
        ``["noise_dim_0"]`` (a convolution's 4-axis kernel keeps the default names).
    """
    if (m := _WEIGHT.match(name)) and event_ndim == 2:
        return [f"{m[1]}_out", f"{m[1]}_in"]
    if (m := _BIAS.match(name)) and event_ndim == 1:
        return [f"{m[1]}_out"]
    return [f"{name}_dim_{k}" for k in range(event_ndim)]
