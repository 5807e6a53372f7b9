"""The IDX (MNIST-family) loader: real Fashion-MNIST files and small files written here."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np
import pytest

import zoo.data
from tests import specs
from zoo.data.idx import DataFilesMissing, check_idx_dir, load_idx, read_idx
from zoo.spec.sections.data import IdxData

FASHION = Path("/usr/share/datasets/fashion-mnist")
needs_fashion = pytest.mark.skipif(
    not FASHION.is_dir(),
    reason=f"Fashion-MNIST IDX files not in {FASHION}: apt-get install dataset-fashion-mnist",
)


def _write_idx(path: Path, arr: np.ndarray, gz: bool = False) -> Path:
    header = struct.pack(">BBBB", 0, 0, 0x08, arr.ndim) + struct.pack(f">{arr.ndim}I", *arr.shape)
    data = header + arr.astype(np.uint8).tobytes()
    if gz:
        path = path.with_name(path.name + ".gz")
        with gzip.open(path, "wb") as fh:
            fh.write(data)
    else:
        path.write_bytes(data)
    return path


def _fake_dir(tmp_path: Path, n_train: int = 30, n_test: int = 7, gz: bool = False) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    _write_idx(tmp_path / "train-images-idx3-ubyte", rng.integers(0, 256, (n_train, 4, 4)), gz)
    _write_idx(tmp_path / "train-labels-idx1-ubyte", np.arange(n_train) % 10, gz)
    _write_idx(tmp_path / "t10k-images-idx3-ubyte", rng.integers(0, 256, (n_test, 4, 4)), gz)
    _write_idx(tmp_path / "t10k-labels-idx1-ubyte", np.arange(n_test) % 10, gz)
    return tmp_path


@pytest.mark.parametrize("gz", [False, True])
def test_read_idx_round_trip(tmp_path: Path, gz: bool) -> None:
    arr = np.arange(2 * 3 * 5).reshape(2, 3, 5) % 256
    path = _write_idx(tmp_path / "x-idx3-ubyte", arr, gz=gz)
    out = read_idx(path)
    assert out.shape == (2, 3, 5) and out.dtype == np.uint8
    np.testing.assert_array_equal(out, arr)


def test_read_idx_rejects_bad_files(tmp_path: Path) -> None:
    bad = tmp_path / "bad"
    bad.write_bytes(b"\x01\x02\x03\x04rest")
    with pytest.raises(ValueError, match="not an IDX file"):
        read_idx(bad)
    short = _write_idx(tmp_path / "short", np.zeros((4, 2)))
    short.write_bytes(short.read_bytes()[:-3])
    with pytest.raises(ValueError, match="truncated or corrupt"):
        read_idx(short)


@pytest.mark.parametrize("gz", [False, True])
def test_loader_splits_scales_and_subsets(tmp_path: Path, gz: bool) -> None:
    d = _fake_dir(tmp_path, gz=gz)
    raw = read_idx(next(d.glob("train-images*")))
    ds = load_idx(IdxData(kind="idx", dir=str(d), validation=10), seed=0)
    assert ds.x_train.shape == (20, 16) and ds.x_val.shape == (10, 16)
    assert ds.x_test.shape == (7, 16) and ds.n_classes == 10
    assert ds.x_train.dtype == np.float32 and ds.y_train.dtype == np.int64
    # pixels scaled to [-1, 1]; the validation set is the LAST 10 training examples
    np.testing.assert_allclose(ds.x_val, raw[20:].reshape(10, 16) / 255.0 * 2 - 1, atol=1e-6)
    np.testing.assert_array_equal(ds.y_val, np.arange(20, 30) % 10)
    assert ds.x_train.min() >= -1 and ds.x_train.max() <= 1
    sub = load_idx(IdxData(kind="idx", dir=str(d), validation=10, n_train=5, n_test=3), 1)
    assert sub.x_train.shape == (5, 16) and sub.x_test.shape == (3, 16)
    again = load_idx(IdxData(kind="idx", dir=str(d), validation=10, n_train=5, n_test=3), 1)
    np.testing.assert_array_equal(sub.x_train, again.x_train)  # seeded subset
    unit = load_idx(IdxData(kind="idx", dir=str(d), pixel_range="zero_one", validation=0), 0)
    assert unit.x_val.shape == (0, 16) and unit.x_train.min() >= 0
    with pytest.raises(ValueError, match="data.validation"):
        load_idx(IdxData(kind="idx", dir=str(d), validation=30), 0)


def test_missing_directory_says_where_and_how(tmp_path: Path) -> None:
    with pytest.raises(DataFilesMissing, match="apt-get install dataset-fashion-mnist") as e:
        check_idx_dir(tmp_path / "nowhere")
    assert str(tmp_path / "nowhere") in str(e.value) and "train-images-idx3-ubyte" in str(e.value)
    _write_idx(tmp_path / "train-images-idx3-ubyte", np.zeros((2, 2, 2)))
    with pytest.raises(DataFilesMissing, match="train-labels-idx1-ubyte"):
        check_idx_dir(tmp_path)
    # zoo.data.check runs the same check from the section, before any cell
    with pytest.raises(DataFilesMissing, match="train-labels-idx1-ubyte"):
        zoo.data.check(IdxData(kind="idx", dir=str(tmp_path)))
    ok = str(_fake_dir(tmp_path / "ok", gz=True))
    zoo.data.check(IdxData(kind="idx", dir=ok, validation=10))
    # and, as load does, the contents: the default validation (10000) leaves nothing to train
    with pytest.raises(zoo.data.DataError, match="data.validation: 10000 leaves 0 training"):
        zoo.data.check(IdxData(kind="idx", dir=ok))


def test_zoo_run_with_missing_files_exits_2_without_traceback(tmp_path: Path, capsys) -> None:
    from zoo.cli import main

    spec = specs.write_spec(
        tmp_path,
        name="m",
        data=specs.idx("no_such_dir"),
        model=specs.mlp(depth=1, width=4),
        inference=[specs.svi("mf", steps=1)],
    )
    assert main(["validate", str(spec)]) == 0  # the files are only needed to run
    capsys.readouterr()
    assert main(["run", str(spec), "--out", str(tmp_path / "out"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert "data.dir" in err and str(tmp_path / "no_such_dir") in err
    assert "dataset-fashion-mnist" in err and not (tmp_path / "out" / "cells").exists()


@needs_fashion
def test_real_fashion_mnist_files() -> None:
    ds = load_idx(IdxData(kind="idx", dir=str(FASHION)), seed=0)
    assert ds.x_train.shape == (50000, 784) and ds.x_val.shape == (10000, 784)
    assert ds.x_test.shape == (10000, 784)
    for x in (ds.x_train, ds.x_val, ds.x_test):
        assert x.dtype == np.float32 and x.min() == -1.0 and x.max() == 1.0
    for y in (ds.y_train, ds.y_val, ds.y_test):
        assert set(np.unique(y)) == set(range(10))
    assert ds.n_classes == 10
    # the files are gzipped; the same parser reads their decompressed copies
    labels = read_idx(FASHION / "t10k-labels-idx1-ubyte.gz")
    np.testing.assert_array_equal(labels, ds.y_test)
    assert np.bincount(labels).tolist() == [1000] * 10  # Fashion-MNIST's balanced test set
