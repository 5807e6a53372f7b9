"""Hostile data files: sizes checked before they are allocated, content never echoed.

An IDX header that declares absurd sizes and a small compressed file that inflates past the
ceiling (a decompression bomb; the ceiling is lowered here, not the file made gigabytes)
are refused with a message naming the file, at load and by ``zoo validate`` and ``zoo run``
(exit 2, no traceback).
"""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np
import pytest

from tests import specs
from tests.zoo.data.test_data_checks import CLASSIFY, REGRESS, _bad_input, _idx_bytes, _idx_dir
from zoo.data import DataError
from zoo.data.idx import read_idx
from zoo.data.table import read_text


def _header(*dims: int, code: int = 0x08) -> bytes:
    return struct.pack(">BBBB", 0, 0, code, len(dims)) + struct.pack(f">{len(dims)}I", *dims)


@pytest.mark.parametrize(
    "dims",
    [(2**31, 2**31), (2**31, 2**31, 4), (2**32 - 1,) * 3],  # the product overflows int64
)
def test_an_idx_header_of_absurd_sizes_is_refused_before_allocating(
    tmp_path: Path, capsys, dims: tuple[int, ...]
) -> None:
    d = _idx_dir(tmp_path / "idx", **{"train-images-idx3-ubyte": _header(*dims) + b"\0" * 64})
    with pytest.raises(DataError, match=r"the header declares shape \([0-9]+, "):
        read_idx(d / "train-images-idx3-ubyte")
    spec = specs.write_spec(tmp_path, data=specs.idx("idx", validation=4), **CLASSIFY)
    for args in (["validate", str(spec)], ["run", str(spec), "--out", str(tmp_path / "o")]):
        err = _bad_input(args, capsys)
        assert "data.dir: " in err and "train-images-idx3-ubyte: the header declares" in err


def test_a_gzip_bomb_is_refused_past_the_ceiling(tmp_path: Path) -> None:
    limit = 100_000
    # a header that declares what it holds, 1 MB of zeros: 1 kB compressed
    honest = tmp_path / "honest-idx1-ubyte.gz"
    honest.write_bytes(gzip.compress(_header(1_000_000) + bytes(1_000_000)))
    assert honest.stat().st_size < 5_000
    with pytest.raises(DataError, match="declares shape .* at most 100,000"):
        read_idx(honest, limit=limit)
    # a small header followed by far more than it declares: only what it declares is read
    bomb = tmp_path / "bomb-idx1-ubyte.gz"
    bomb.write_bytes(gzip.compress(_header(10) + bytes(10_000_000)))
    with pytest.raises(DataError, match=r"header says shape \(10,\) .* the file has more"):
        read_idx(bomb, limit=limit)
    fits = tmp_path / "fits-idx1-ubyte.gz"
    fits.write_bytes(gzip.compress(_idx_bytes(np.arange(10))))
    assert read_idx(fits, limit=10).tolist() == list(range(10))  # at the ceiling: read
    # a table that inflates past the ceiling
    table = tmp_path / "t.csv.gz"
    table.write_bytes(gzip.compress(b"a,y\n" + b"1,2\n" * 100_000))
    with pytest.raises(DataError, match=r"t.csv.gz: more than 100,000 bytes decompressed"):
        read_text(table, limit=limit)
    plain = tmp_path / "t.csv"
    plain.write_bytes(b"a,y\n" + b"1,2\n" * 100_000)
    with pytest.raises(DataError, match=r"t.csv: more than 100,000 bytes;"):
        read_text(plain, limit=limit)


def test_a_data_error_names_the_position_not_the_content(tmp_path: Path, capsys) -> None:
    """A file the spec should not have named (a secret) is not echoed by the messages."""
    secret = "admin:x:0:0:SECRET-LINE:/home/admin:/bin/bash\nuser:x:1000:1000::/home/u:/bin/sh\n"
    p = tmp_path / "passwd"
    p.write_text(secret)
    spec = specs.write_spec(tmp_path, data=specs.csv("passwd", "y"), **REGRESS)
    err = _bad_input(["validate", str(spec)], capsys)
    assert "SECRET" not in err and "bin/bash" not in err and str(p) in err, err
    assert f"{p}:1: has no column" in err  # the file and its line
    d = _idx_dir(tmp_path / "idx", **{"train-images-idx3-ubyte": b"SECRETxyz"})
    spec = specs.write_spec(tmp_path, data=specs.idx("idx", validation=4), **CLASSIFY)
    err = _bad_input(["validate", str(spec)], capsys)
    assert "SECRET" not in err and "SEC" not in err and "bytes 0-3" in err, err
    assert str(d / "train-images-idx3-ubyte") in err
