"""MNIST-family data sets from IDX files (MNIST, Fashion-MNIST), gzipped or not.

The IDX format (LeCun et al.): a big-endian header ``0, 0, dtype code, ndim``, then
``ndim`` big-endian uint32 dimensions, then the data in C order. MNIST and Fashion-MNIST
use unsigned bytes (code 0x08): images ``(n, 28, 28)`` and labels ``(n,)``.

:func:`load_idx` follows Swiatkowski et al. (2020, D.1): pixels scaled to [-1, 1], the last
10,000 training examples held out as the validation set.
"""

from __future__ import annotations

import math
import struct
from pathlib import Path

import numpy as np

from zoo.data.checks import MIN_TRAIN_ROWS, class_count, list_items
from zoo.data.dataset import Dataset
from zoo.data.errors import DataError, DataFilesMissing
from zoo.data.files import MAX_DATA_BYTES, READ_ERRORS, open_data, read_at_most
from zoo.spec.sections.data import IDX_FILES, IdxData

__all__ = [
    "IDX_FILES",
    "DataFilesMissing",
    "check_idx_dir",
    "find_idx_file",
    "load_idx",
    "read_idx",
]


_DTYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def read_idx(path: str | Path, limit: int = MAX_DATA_BYTES) -> np.ndarray:
    """Read one IDX file (``.gz`` is decompressed) into an array of its stored shape.

    The header is read first: the size it declares (an exact product, which cannot
    overflow) must be at most ``limit`` bytes before the data are read, and the data must
    be exactly that size, so a header of absurd sizes or a decompression bomb is refused
    without allocating it.

    Raises
    ------
    DataError
        If the file does not decompress, its header is not IDX (the magic number) or is cut
        short, declares more than ``limit`` bytes, or its size does not match the header (a
        truncated file); the message names the file and the byte, not its content.
    """
    path = Path(path)
    try:
        with open_data(path) as fh:
            head = read_at_most(fh, 4)
            if (
                len(head) < 4
                or head[0] != 0
                or head[1] != 0
                or head[2] not in _DTYPES
                or not head[3]
            ):
                raise DataError(
                    f"{path}: not an IDX file (bytes 0-3 are not an IDX magic number; IDX "
                    "files start with 0, 0, a type code and the number of dimensions)"
                )
            ndim, dtype = head[3], np.dtype(_DTYPES[head[2]])
            raw_dims = read_at_most(fh, 4 * ndim)
            if len(raw_dims) < 4 * ndim:
                raise DataError(
                    f"{path}: the IDX header is cut short ({4 + len(raw_dims)} bytes, a header "
                    f"of {ndim} dimensions needs {4 + 4 * ndim}); the file is truncated"
                )
            dims = struct.unpack(f">{ndim}I", raw_dims)
            n = math.prod(dims)
            if n * dtype.itemsize > limit:
                raise DataError(
                    f"{path}: the header declares shape {dims}, {n * dtype.itemsize:,} bytes "
                    f"of data; an IDX file may hold at most {limit:,}: the header is corrupt, "
                    "or the file too large to read"
                )
            raw = read_at_most(fh, n * dtype.itemsize + 1)
    except DataError:
        raise
    except READ_ERRORS as e:
        raise DataError(
            f"{path}: cannot be read ({getattr(e, 'strerror', None) or e}); the file is "
            "truncated or corrupt: get it again"
        ) from None
    if len(raw) != n * dtype.itemsize:
        has = "more" if len(raw) > n * dtype.itemsize else len(raw)
        raise DataError(
            f"{path}: header says shape {dims} ({n * dtype.itemsize} bytes of data) but the "
            f"file has {has}; the file is truncated or corrupt"
        )
    return np.frombuffer(raw, dtype, count=n).reshape(dims)


def _how_to_get(directory: Path) -> str:
    return (
        f"the IDX files {', '.join(IDX_FILES)} (each optionally .gz) are expected in "
        f"{directory}. Fashion-MNIST: `apt-get install dataset-fashion-mnist` (installs them "
        "under /usr/share/datasets/fashion-mnist). MNIST: download the four IDX files from "
        "http://yann.lecun.com/exdb/mnist/ (or a mirror) into one directory and set data.dir "
        "to it"
    )


def find_idx_file(directory: str | Path, stem: str) -> Path:
    """The path of ``stem`` or ``stem.gz`` in ``directory`` (the plain file first).

    Raises
    ------
    DataFilesMissing
        With a message that says where the files are expected and how to get them.
    """
    directory = Path(directory)
    for name in (stem, stem + ".gz"):
        if (directory / name).is_file():
            return directory / name
    what = "directory does not exist" if not directory.is_dir() else f"{stem}[.gz] is missing"
    raise DataFilesMissing(f"data.dir: {what}; {_how_to_get(directory)}")


def check_idx_dir(directory: str | Path) -> None:
    """Raise :class:`DataFilesMissing` unless all four IDX files are in ``directory``."""
    for stem in IDX_FILES:
        find_idx_file(directory, stem)


def _scale(images: np.ndarray, pixel_range: str) -> np.ndarray:
    x = images.reshape(len(images), -1).astype(np.float32)
    x /= np.float32(255.0)  # in place: one float copy of the images (MNIST: 188 MB), not four
    if pixel_range == "minus_one_one":
        x *= np.float32(2.0)
        x -= np.float32(1.0)
    return x


def load_idx(spec: IdxData, seed: int) -> Dataset:
    """Train, validation and test splits of an MNIST-family directory.

    Images are flattened to ``(n, rows * cols)`` float32 in [-1, 1] (or [0, 1]); labels are
    int64. The last ``spec.validation`` training examples are the validation split; of the
    rest, a seeded random subset of ``spec.n_train`` is trained on if given.

    Raises
    ------
    DataFilesMissing
        If a file is missing (the message says where and how to get it).
    DataError
        If a file is not IDX or truncated, images are not unsigned bytes, images and labels
        disagree in number or shape, the training labels are not ``0..K-1`` with every class
        present, a test label is not one of them, or ``spec.validation`` leaves fewer than
        2 training examples.
    """
    d = Path(spec.dir)
    paths = [find_idx_file(d, stem) for stem in IDX_FILES]
    try:
        xtr, ytr, xte, yte = (read_idx(p) for p in paths)
    except DataError as e:
        raise DataError(f"data.dir: {e}") from None
    for x, y, px, py in ((xtr, ytr, *paths[:2]), (xte, yte, *paths[2:])):
        if x.ndim < 2 or x.dtype != np.uint8:
            raise DataError(
                f"data.dir: {px}: images of shape {x.shape} and type {x.dtype}; "
                "expected unsigned bytes of shape (n, rows, cols)"
            )
        if y.ndim != 1 or not np.issubdtype(y.dtype, np.integer):
            raise DataError(
                f"data.dir: {py}: labels of shape {y.shape} and type {y.dtype}; "
                "expected integers of shape (n,)"
            )
        if len(x) != len(y):
            raise DataError(
                f"data.dir: {d}: {len(x)} images in {px.name} but {len(y)} labels in {py.name}"
            )
    if xtr.shape[1:] != xte.shape[1:]:
        raise DataError(
            f"data.dir: {d}: training images are {xtr.shape[1:]}, test images {xte.shape[1:]}"
        )
    n_classes = class_count(ytr, f"data.dir: {paths[1]}")
    labels = yte.astype(np.int64)
    out = np.flatnonzero((labels < 0) | (labels >= n_classes))
    if len(out):
        items = [f"item {i}: {labels[i]}" for i in out]
        raise DataError(
            f"data.dir: {paths[3]}: test labels outside the training classes "
            f"0..{n_classes - 1}: {list_items(items)}"
        )
    n_fit = len(xtr) - spec.validation
    if n_fit < MIN_TRAIN_ROWS:
        raise DataError(
            f"data.validation: {spec.validation} leaves {max(n_fit, 0)} training examples of "
            f"{len(xtr)}; at least {MIN_TRAIN_ROWS} are needed: lower it"
        )
    x_all = _scale(xtr, spec.pixel_range)
    y_all = ytr.astype(np.int64)
    x_fit, y_fit = x_all[:n_fit], y_all[:n_fit]
    if spec.n_train is not None and spec.n_train < n_fit:
        rng = np.random.default_rng(spec.seed if spec.seed is not None else seed)
        keep = np.sort(rng.choice(n_fit, size=spec.n_train, replace=False))
        x_fit, y_fit = x_fit[keep], y_fit[keep]
    n_test = len(xte) if spec.n_test is None else min(spec.n_test, len(xte))
    return Dataset(
        x_fit,
        y_fit,
        _scale(xte[:n_test], spec.pixel_range),
        yte[:n_test].astype(np.int64),
        n_classes,
        x_val=x_all[n_fit:],
        y_val=y_all[n_fit:],
    )
