r"""Orbit coordinates of ReLU / leaky-ReLU MLP draws: where each hidden unit sits on its
rescaling orbit, and what the rescaling leaves unchanged.

A positively homogeneous activation (ReLU, leaky ReLU: :math:`\sigma(cz) = c\,\sigma(z)` for
:math:`c > 0`) makes every hidden unit :math:`j` of layer :math:`l` a one-parameter family
of networks with the same function: its incoming weights and bias times :math:`c`, its
outgoing weights divided by :math:`c`,

.. math::

    (W_l[j, :],\, b_l[j]) \to c\,(W_l[j, :],\, b_l[j]), \qquad
    W_{l+1}[:, j] \to W_{l+1}[:, j] / c .

Hidden-unit alignment (:mod:`reports.alignment`) quotients the permutations, not these
orbits: the reference stays in raw coordinates, where mean field pays for the ridge the
orbits make. So a converged reference needs the chains to agree on two things per unit,
which the weights' own R-hat mixes together:

- the **log balance** :math:`\beta_j = \log \lVert (W_l[j,:], b_l[j]) \rVert - \log \lVert
  W_{l+1}[:, j] \rVert` of the raw draws, the coordinate that moves along the orbit
  (by :math:`2 \log c`); a chain stuck at another balance shows here;
- the **invariant** :math:`\iota_j`: the log of the product of the norms of the incoming and
  the outgoing weights, taken in the gauge where every hidden unit's incoming vector has
  unit norm (the network rescaled layer by layer from the input, which changes no function
  and removes every unit's rescaling, the neighbours' included). With one hidden layer it
  is exactly :math:`\log(\lVert(W_0[j,:], b_0[j])\rVert\,\lVert W_1[:, j]\rVert)`; deeper,
  the plain product would move when a neighbouring unit is rescaled, the gauge-fixed one
  does not.

:func:`orbit_rhat` gives the largest rank-normalized split :math:`\hat R` (Vehtari et al.
2021) of each over the units, and the nested one over superchains (Margossian et al. 2024).
Compute it on aligned draws (:func:`reports.alignment.align_to_pivot`): unaligned, a label
switch exchanges two units' balances and the per-unit R-hat reads the switch.

NumPy and arviz-stats only; nothing here knows about Pyro or torch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

import arviz_stats as azs
import numpy as np

from reports.alignment import hidden_layers
from reports.rank_normal import split_rank_diagnostics
from reports.superchains import max_rhat_nested

__all__ = [
    "HOMOGENEOUS",
    "OrbitCoordinates",
    "OrbitRhat",
    "max_split_rhat",
    "min_bulk_ess",
    "orbit_coordinates",
    "orbit_rhat",
]

#: Activations whose units have rescaling orbits (positively homogeneous).
HOMOGENEOUS = frozenset({"relu", "leaky_relu"})

_TINY = 1e-300


class OrbitCoordinates(NamedTuple):
    """Per hidden unit (all hidden layers, in order), each of shape ``(*sample_shape, U)``.

    Attributes
    ----------
    balance : np.ndarray
        Log balance: log norm of the incoming weights and bias minus log norm of the
        outgoing weights, in raw coordinates.
    invariant : np.ndarray
        Log product of the two norms in the gauge with unit-norm incoming vectors.
    units : list of str
        ``"layer{l}[j]"`` per column.
    """

    balance: np.ndarray
    invariant: np.ndarray
    units: list[str]


class OrbitRhat(NamedTuple):
    """Largest R-hat over the units of the log balances and of the invariants.

    Attributes
    ----------
    balance, invariant : float or None
        Split R-hat; NaN when some unit's is not finite, None with fewer than two chains.
    balance_nested, invariant_nested : float or None
        Nested R-hat over superchains; None without two or more superchains.
    """

    balance: float | None
    invariant: float | None
    balance_nested: float | None
    invariant_nested: float | None

    @property
    def split(self) -> float | None:
        """The larger split R-hat (None when neither applies; NaN when either is NaN)."""
        return _worst(self.balance, self.invariant)

    @property
    def nested(self) -> float | None:
        """The larger nested R-hat (None when neither applies; NaN when either is NaN)."""
        return _worst(self.balance_nested, self.invariant_nested)


def _worst(*values: float | None) -> float | None:
    known = [v for v in values if v is not None]
    if not known:
        return None
    return float("nan") if any(np.isnan(v) for v in known) else float(max(known))


def _in_vectors(sites: Mapping[str, np.ndarray], layer: int) -> np.ndarray:
    """``(*sample, H, F)``: each unit's incoming weights, with its bias when the layer has one."""
    w = np.asarray(sites[f"layer{layer}.weight"], dtype=float)
    b = sites.get(f"layer{layer}.bias")
    return w if b is None else np.concatenate([w, np.asarray(b, dtype=float)[..., None]], -1)


def _log_norm(v: np.ndarray, axis: int) -> np.ndarray:
    return np.log(np.maximum(np.linalg.norm(v, axis=axis), _TINY))


def _gauge(sites: Mapping[str, np.ndarray], layers: list[int]) -> dict[int, np.ndarray]:
    """Every ``layer{l}.weight`` (``l`` = 1 .. L) in the gauge of unit-norm incoming vectors.

    From the input up: each hidden layer's incoming vectors (weights and bias, its columns
    already carrying the scales of the layer below) are divided by their norms, and those
    norms multiply the columns of the layer above. The function is unchanged, and the result
    is the same for every point of a draw's rescaling orbit.
    """
    out: dict[int, np.ndarray] = {}
    scale = None
    for layer in [*layers, len(layers)]:
        w = np.asarray(sites[f"layer{layer}.weight"], dtype=float)
        w = w if scale is None else w * scale[..., None, :]
        if layer == len(layers):
            out[layer] = w
            break
        parts = {f"layer{layer}.weight": w}
        if f"layer{layer}.bias" in sites:
            parts[f"layer{layer}.bias"] = sites[f"layer{layer}.bias"]
        scale = np.maximum(np.linalg.norm(_in_vectors(parts, layer), axis=-1), _TINY)
        out[layer] = w / scale[..., :, None]
    return out


def orbit_coordinates(sites: Mapping[str, np.ndarray]) -> OrbitCoordinates:
    """The log balance and the invariant of every hidden unit of every draw.

    Parameters
    ----------
    sites : mapping of str to np.ndarray
        Draws of an MLP's ``layer{l}.weight`` (``(*sample_shape, out, in)``) and
        ``layer{l}.bias`` sites (optional), any leading sample shape; other sites ignored.

    Returns
    -------
    OrbitCoordinates
        A unit whose weights are all zero gets a log norm of about -690 (not -inf).
    """
    layers = hidden_layers(sites)
    gauge = _gauge(sites, layers)
    balance, invariant, units = [], [], []
    for layer in layers:
        w_out = np.asarray(sites[f"layer{layer + 1}.weight"], dtype=float)
        balance.append(_log_norm(_in_vectors(sites, layer), -1) - _log_norm(w_out, -2))
        invariant.append(_log_norm(gauge[layer + 1], -2))
        units += [f"layer{layer}[{j}]" for j in range(w_out.shape[-1])]
    return OrbitCoordinates(np.concatenate(balance, -1), np.concatenate(invariant, -1), units)


def _largest(r: np.ndarray) -> float | None:
    """The largest R-hat; NaN if one is not finite, None without any."""
    if not r.size:
        return None
    return float(r.max()) if np.isfinite(r).all() else float("nan")


def _smallest_ess(e: np.ndarray, v: np.ndarray) -> float | None:
    """The smallest ESS; NaN if one is not finite or its column never moves, None without
    any."""
    if not e.size:
        return None
    stuck = np.all(v == v[:, :1], axis=(0, 1)).ravel()
    return float(e.min()) if np.isfinite(e).all() and not stuck.any() else float("nan")


def max_split_rhat(values: np.ndarray) -> float | None:
    """Largest rank-normalized split R-hat over the columns of ``(chain, draw, n)`` values.

    NaN as soon as one column has none (a quantity that never moved), as
    :func:`reports.diagnostics.diagnostic_gates` reads the weights; None (not applicable)
    with fewer than two chains. Arviz-stats' numbers, ranked in one sort for all columns
    (:func:`reports.rank_normal.split_rank_diagnostics`).
    """
    v = np.asarray(values, dtype=float)
    if v.shape[0] < 2:
        return None
    return _largest(split_rank_diagnostics(v, ess=False)[0])


def min_bulk_ess(values: np.ndarray) -> float | None:
    """Smallest bulk ESS over the columns of ``(chain, draw, n)`` values (arviz-stats).

    NaN as soon as one column has none or never moves within any chain (arviz-stats gives
    such a column a full ESS, its ranks all tied; :func:`reports.diagnostics.diagnostic_gates`
    does not trust it either); None without columns.
    """
    v = np.asarray(values, dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        e = np.asarray(azs.ess(v, method="bulk", chain_axis=0, draw_axis=1), dtype=float).ravel()
    return _smallest_ess(e, v)


def rhat_and_ess(values: np.ndarray) -> tuple[float | None, float | None]:
    """``(max_split_rhat(values), min_bulk_ess(values))`` from one ranking of the columns
    (two or more chains; the bulk ranks serve both)."""
    v = np.asarray(values, dtype=float)
    if v.shape[0] < 2:
        return None, min_bulk_ess(v)
    r, e = split_rank_diagnostics(v)
    return _largest(r), _smallest_ess(e, v)


def orbit_rhat(
    sites: Mapping[str, np.ndarray], superchain_ids: Sequence[int] | None = None
) -> OrbitRhat:
    """Split and nested R-hat of every hidden unit's log balance and invariant, largest each.

    Parameters
    ----------
    sites : mapping of str to np.ndarray
        ``(chain, draw, *site_shape)`` draws of a ReLU or leaky-ReLU MLP, aligned to a pivot
        (:func:`reports.alignment.align_to_pivot`) so that a column is one unit throughout.
    superchain_ids : sequence of int, optional
        The superchain of each chain (:func:`reports.superchains.max_rhat_nested`).

    Returns
    -------
    OrbitRhat
    """
    coords = orbit_coordinates(sites)
    return OrbitRhat(
        balance=max_split_rhat(coords.balance),
        invariant=max_split_rhat(coords.invariant),
        balance_nested=max_rhat_nested(coords.balance, superchain_ids),
        invariant_nested=max_rhat_nested(coords.invariant, superchain_ids),
    )
