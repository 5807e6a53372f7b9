"""Posterior draws of several sites as one matrix: labels and per-layer column blocks.

NumPy only; nothing here knows about Pyro or torch.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import NamedTuple

import numpy as np

__all__ = ["FlatDraws", "column_blocks", "flatten_sites", "param_labels"]


class FlatDraws(NamedTuple):
    """Posterior draws of several sites flattened into one matrix.

    Attributes
    ----------
    draws : np.ndarray
        Shape ``(S, D)``: all sample dimensions merged, site values flattened (C order) and
        concatenated in the order of the input mapping.
    labels : tuple of str
        One label per column, e.g. ``layer1.weight[3,0]`` (see :func:`param_labels`).
    blocks : dict of str to np.ndarray
        Column indices per layer: the site-name prefix before the first ``.``
        (``layer1.weight`` and ``layer1.bias`` -> ``layer1``; ``noise`` -> ``noise``).
    """

    draws: np.ndarray
    labels: tuple[str, ...]
    blocks: dict[str, np.ndarray]


def param_labels(name: str, shape: tuple[int, ...], base: int = 0) -> list[str]:
    """Labels of the scalar entries of a site, in C order.

    Parameters
    ----------
    name : str
        Site name, e.g. ``layer1.weight``.
    shape : tuple of int
        Event shape of the site (without sample dimensions).
    base : int, default 0
        The first index: 0 as the zoo's reports name entries, 1 as Stan and posteriordb
        do (``theta[1]``).

    Returns
    -------
    list of str
        ``[name]`` for a scalar site, else ``name[i,j,...]`` for every index, e.g.
        ``layer1.weight[3,0]`` (``layer1.weight[4,1]`` with ``base=1``).
    """
    if len(shape) == 0:
        return [name]
    return [f"{name}[{','.join(str(i + base) for i in idx)}]" for idx in np.ndindex(*shape)]


def flatten_sites(sites: Mapping[str, np.ndarray], *, sample_ndim: int = 2) -> FlatDraws:
    """Flatten per-site draws into one ``(S, D)`` matrix with labels and per-layer blocks.

    Parameters
    ----------
    sites : mapping of str to np.ndarray
        Site name -> draws whose first ``sample_ndim`` axes are sample axes, e.g.
        ``(chain, draw, *site_shape)`` for ``sample_ndim=2``.
    sample_ndim : int, default 2
        Number of leading sample axes; they are merged into one axis of length ``S``.

    Returns
    -------
    FlatDraws
        The matrix, column labels and per-layer column indices.

    Raises
    ------
    ValueError
        If there are no sites or the sites disagree on the sample shape.
    """
    if not sites:
        raise ValueError("sites is empty: nothing to flatten")
    sample_shape: tuple[int, ...] | None = None
    cols, labels = [], []
    blocks: dict[str, list[int]] = {}
    for name, value in sites.items():
        arr = np.asarray(value, dtype=float)
        if arr.ndim < sample_ndim:
            raise ValueError(
                f"site {name!r} has shape {arr.shape}; expected {sample_ndim} sample axes"
            )
        if sample_shape is None:
            sample_shape = arr.shape[:sample_ndim]
        elif arr.shape[:sample_ndim] != sample_shape:
            raise ValueError(
                f"site {name!r} has sample shape {arr.shape[:sample_ndim]}, other sites "
                f"{sample_shape}"
            )
        flat = arr.reshape(math.prod(sample_shape), -1)
        start = sum(c.shape[1] for c in cols)
        blocks.setdefault(name.split(".", 1)[0], []).extend(range(start, start + flat.shape[1]))
        cols.append(flat)
        labels.extend(param_labels(name, arr.shape[sample_ndim:]))
    return FlatDraws(
        np.concatenate(cols, axis=1),
        tuple(labels),
        {k: np.asarray(v, dtype=np.intp) for k, v in blocks.items()},
    )


def column_blocks(
    labels: tuple[str, ...] | list[str], weight: str, bias: str | None = None
) -> dict[str, np.ndarray]:
    """Column indices of each input column of a weight site (and of its bias), as blocks.

    For an output layer ``weight`` of shape ``(C, H)`` the block ``"{weight}[:,j]"`` holds
    the ``C`` weights from hidden unit ``j`` to the ``C`` outputs; ``bias`` (shape ``(C,)``)
    is one more block. With a softmax over ``C`` classes only the differences between the
    ``C`` logits reach the likelihood, so each such block is correlated in the posterior
    whatever the rest of the network does.

    Parameters
    ----------
    labels : sequence of str
        Column labels of :func:`flatten_sites`.
    weight : str
        A 2-D site, e.g. ``layer2.weight``.
    bias : str, optional
        Its bias site, e.g. ``layer2.bias``.

    Returns
    -------
    dict of str to np.ndarray
        Block name -> column indices, in order of ``j``, then the bias.

    Raises
    ------
    ValueError
        If ``weight`` has no 2-D entries among ``labels`` or ``bias`` has none.
    """
    cols: dict[str, list[int]] = {}
    prefix = weight + "["
    for i, lab in enumerate(labels):
        if lab.startswith(prefix):
            idx = lab[len(prefix) : -1].split(",")
            if len(idx) != 2:
                raise ValueError(f"site {weight!r} is not 2-D (label {lab!r})")
            cols.setdefault(f"{weight}[:,{idx[1]}]", []).append(i)
    if not cols:
        raise ValueError(f"no columns of site {weight!r} among the labels")
    if bias is not None:
        b = [i for i, lab in enumerate(labels) if lab == bias or lab.startswith(bias + "[")]
        if not b:
            raise ValueError(f"no columns of site {bias!r} among the labels")
        cols[bias] = b
    return {k: np.asarray(v, dtype=np.intp) for k, v in cols.items()}
