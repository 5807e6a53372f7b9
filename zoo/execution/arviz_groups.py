"""The arrays of a cell's ArviZ tree: shape checks and storage dtypes.

Storage (the rules of :mod:`zoo.execution.arviz_io`'s "Storage" section): integers take the
smallest signed integer type that holds them, real values are float32, class labels are
:func:`label_dtype` (int8 up to 128 classes, int16 up to 32768). An
:class:`ObservationSet` checks the groups of one set of observations (training or test)
against each other and against the posterior's ``(chain, draw)`` shape.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["ObservationSet", "as_labels", "check_sample_shape", "compact", "label_dtype"]


def label_dtype(n_classes: int) -> np.dtype:
    """The smallest signed integer type that holds class labels ``0 .. n_classes - 1``.

    Parameters
    ----------
    n_classes : int
        Number of classes (> 0).

    Returns
    -------
    numpy.dtype
        int8 up to 128 classes, int16 up to 32768, int32 beyond.
    """
    if n_classes < 1:
        raise ValueError(f"n_classes must be >= 1, got {n_classes}")
    return _smallest_int(0, n_classes - 1)


def _smallest_int(lo: int, hi: int) -> np.dtype:
    for t in (np.int8, np.int16, np.int32, np.int64):
        if np.iinfo(t).min <= lo and hi <= np.iinfo(t).max:
            return np.dtype(t)
    raise ValueError(f"integers {lo}..{hi} do not fit int64")


def compact(arr: np.ndarray) -> np.ndarray:
    """Integers in the smallest signed type holding them; floats as float32; bools as is."""
    if arr.dtype.kind in "iu":
        if arr.size == 0:
            return arr.astype(np.int8)
        return arr.astype(_smallest_int(int(arr.min()), int(arr.max())))
    if arr.dtype.kind == "f":
        return arr.astype(np.float32)
    return arr


def as_labels(arr: np.ndarray, n_classes: int, what: str) -> np.ndarray:
    """``arr`` as targets: class labels in :func:`label_dtype`, or float32 when real."""
    if n_classes == 0:
        return arr.astype(np.float32)
    bad = (arr != np.round(arr)) | (arr < 0) | (arr >= n_classes)
    if np.any(bad):
        raise ValueError(
            f"{what} holds values that are not class labels 0..{n_classes - 1}, "
            f"e.g. {arr[bad].flat[0]!r}"
        )
    return arr.astype(label_dtype(n_classes))


def check_sample_shape(
    group: str, name: str, value: Any, shape: tuple[int, int] | None, min_ndim: int
) -> tuple[np.ndarray, tuple[int, int]]:
    """``value`` as an array of at least ``min_ndim`` axes whose ``(chain, draw)`` is ``shape``.

    Returns the array and its ``(chain, draw)`` (``shape=None``: any); raises
    :class:`ValueError` naming the group and variable otherwise.
    """
    arr = np.asarray(value)
    if arr.ndim < min_ndim:
        raise ValueError(
            f"{group} variable {name!r} has shape {arr.shape}; expected (chain, draw, ...) "
            f"with at least {min_ndim} axes"
        )
    if shape is not None and arr.shape[:2] != shape:
        raise ValueError(
            f"{group} variable {name!r} has (chain, draw) = {arr.shape[:2]}, "
            f"but the posterior has {shape}"
        )
    return arr, arr.shape[:2]


class ObservationSet:
    """The groups of one set of observations (training or test) and their checks."""

    def __init__(self, label: str, dim: str, shape: tuple[int, int]):
        self.label, self.dim, self.shape = label, dim, shape
        self.n: dict[str, int] = {}  # group -> number of points
        self.event: tuple[str, tuple[int, ...]] | None = None  # (group, event shape of y)

    def loglik(self, group: str, value: Any) -> np.ndarray:
        ll, _ = check_sample_shape(group, "y", value, self.shape, 3)
        if ll.ndim != 3:
            raise ValueError(f"{group} must be (chain, draw, n_{self.label}), got {ll.shape}")
        self.n[group] = ll.shape[2]
        return ll.astype(np.float32)

    def draws(self, group: str, value: Any, n_classes: int) -> np.ndarray:
        arr, _ = check_sample_shape(group, "y", value, self.shape, 3)
        self.n[group] = arr.shape[2]
        self._event(group, arr.shape[3:])
        return as_labels(arr, n_classes, group)

    def targets(self, group: str, value: Any, n_classes: int) -> np.ndarray:
        arr = np.asarray(value)
        if arr.ndim == 0:
            raise ValueError(f"{group} variable 'y' must have an observation axis, got a scalar")
        self.n[group] = arr.shape[0]
        self._event(group, arr.shape[1:])
        return as_labels(arr, n_classes, group)

    def inputs(self, group: str, values: Mapping[str, Any]) -> dict[str, np.ndarray]:
        out = {}
        for name, value in values.items():
            arr = np.asarray(value)
            if arr.ndim == 0:
                raise ValueError(f"{group} variable {name!r} must have an observation axis")
            self.n[f"{group}.{name}"] = arr.shape[0]
            out[name] = compact(arr)
        return out

    def _event(self, group: str, event: tuple[int, ...]) -> None:
        if self.event is not None and self.event[1] != event:
            raise ValueError(
                f"{group} 'y' has event shape {event}, but {self.event[0]} has {self.event[1]}"
            )
        self.event = (group, event)

    def check(self) -> None:
        if len(set(self.n.values())) > 1:
            raise ValueError(
                f"{self.label}-set groups disagree on the number of {self.label} points: "
                + ", ".join(f"{g}: {n}" for g, n in self.n.items())
            )

    def dims(self, name: str, arr: np.ndarray, sampled: bool) -> list[str]:
        lead = 3 if sampled else 1
        return [self.dim] + [f"{name}_dim_{k}" for k in range(1, arr.ndim - lead + 1)]
