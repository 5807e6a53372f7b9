"""The :class:`Dataset` every loader returns (NumPy) and its one trip into torch.

A data set stays NumPy from the loader to the cell: arrays are cheap to pickle to worker
processes and free of any device. :meth:`Dataset.to_torch` turns it into tensors once per
cell, through the cell's runtime (device and floating dtype), as :class:`TorchData`.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Protocol

import numpy as np

__all__ = ["Dataset", "TensorMaker", "TorchData"]


class TensorMaker(Protocol):
    """What :meth:`Dataset.to_torch` needs of a runtime (:class:`zoo.runtime.Runtime` has it).

    ``tensor(x)`` returns a tensor of ``x`` on the runtime's device: floating arrays in the
    runtime's floating dtype, integer arrays (class labels) keep their integer kind.
    """

    def tensor(self, x: Any, dtype: Any = None) -> Any: ...


class TorchData(NamedTuple):
    """The arrays of a :class:`Dataset` as tensors on one device (None where absent).

    Attributes
    ----------
    x_train, y_train, x_test, y_test : Tensor
    x_val, y_val : Tensor or None
    true_params : dict of str to Tensor, or None
        The generating weights (teacher data), by model site name.
    """

    x_train: Any
    y_train: Any
    x_test: Any
    y_test: Any
    x_val: Any = None
    y_val: Any = None
    true_params: dict[str, Any] | None = None


class Dataset(NamedTuple):
    """A train/test split.

    Attributes
    ----------
    x_train, x_test : ndarray, float32, shape (n, d)
    y_train, y_test : ndarray, int64 labels (classification) or float32 targets
    n_classes : int
        Number of classes; 0 for regression.
    y_shift, y_scale : float
        Regression targets were standardized as ``(y - y_shift) / y_scale``; metrics in
        original units undo it. 0 and 1 for classification.
    true_params : dict of str to ndarray, optional
        The weights that generated the data (teacher data), by model site name.
    x_val, y_val : ndarray or None
        A validation split held out of training (IDX data), or None.
    x_ood : ndarray or None
        Inputs of a class held out of every split (``data.holdout_class``,
        :func:`zoo.data.holdout.hold_out_class`): out-of-distribution inputs with no label
        among the classes trained on. None when no class is held out.
    noise : float or None
        The standard deviation of the noise that made the targets, in original units, where
        the data know it (teacher data); what ``likelihood: {noise: data}`` uses.
    """

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    n_classes: int
    y_shift: float = 0.0
    y_scale: float = 1.0
    true_params: dict[str, np.ndarray] | None = None
    x_val: np.ndarray | None = None
    y_val: np.ndarray | None = None
    x_ood: np.ndarray | None = None
    noise: float | None = None

    @property
    def in_dim(self) -> int:
        """Number of inputs (columns of ``x_train``)."""
        return int(self.x_train.shape[1])

    @property
    def out_dim(self) -> int:
        """Network outputs: the number of classes, or 1 for regression."""
        return self.n_classes if self.n_classes > 0 else 1

    @property
    def task(self) -> str:
        """``"classification"`` (``n_classes > 0``) or ``"regression"``."""
        return "classification" if self.n_classes > 0 else "regression"

    def to_torch(self, runtime: TensorMaker) -> TorchData:
        """The arrays as tensors made by ``runtime`` (its device; floats in its dtype).

        Class labels stay int64. On a float32 CPU runtime the tensors hold the same
        numbers as ``torch.as_tensor`` of the arrays.
        """

        def t(a: np.ndarray | None) -> Any:
            return None if a is None else runtime.tensor(a)

        true = None
        if self.true_params is not None:
            true = {k: runtime.tensor(v) for k, v in self.true_params.items()}
        return TorchData(
            t(self.x_train),
            t(self.y_train),
            t(self.x_test),
            t(self.y_test),
            t(self.x_val),
            t(self.y_val),
            true,
        )
