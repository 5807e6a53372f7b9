"""Bad data is found at ``zoo validate`` and at load, with one error type and a message that
names the file, the column and the rows; the CLI turns it into exit 2 without a traceback.

Every case writes a small real file to ``tmp_path``.
"""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np
import pytest

import zoo.data
from tests import specs
from zoo.cli import main
from zoo.data import DataError, DataFilesMissing, Dataset
from zoo.data.checks import MIN_TRAIN_ROWS, check_dataset, class_count
from zoo.data.idx import load_idx, read_idx
from zoo.data.table import read_table
from zoo.spec.sections.data import CsvData, IdxData, TeacherData, TwoMoonsData

GOOD = "a,b,y\n" + "".join(f"{i},{(i * 7) % 5},{i % 2}\n" for i in range(12))


def _csv(tmp_path: Path, text: str | bytes, name: str = "d.csv") -> Path:
    p = tmp_path / name
    if isinstance(text, bytes):
        p.write_bytes(text)
    else:
        p.write_text(text)
    return p


def _section(path: Path, task: str = "regression", target: str = "y", **kw) -> CsvData:
    return CsvData.model_validate(
        {"kind": "csv", "path": str(path), "target": target, "task": task, **kw}
    )


#: A spec around the data of each test: regression, or classification (``**CLASSIFY``).
REGRESS = {
    "name": "s",
    "model": specs.mlp(depth=1, width=4),
    "likelihood": specs.section("gaussian", noise=0.5),
    "inference": [specs.svi("mf", steps=1)],
}
CLASSIFY = {**REGRESS, "likelihood": specs.section("categorical")}


def _bad_input(args: list[str], capsys) -> str:
    """Run the CLI, assert exit 2 without a traceback, return stderr."""
    capsys.readouterr()
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


# --- files that are not tables ----------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "name", "says"),
    [
        ("", "d.csv", "is empty"),
        ("  \n\n", "d.csv", "is empty"),
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "d.csv", "binary file"),
        ("a,y\n\xe9t\xe9,1\n".encode("latin-1"), "d.csv", "not UTF-8"),
        (gzip.compress(GOOD.encode())[:-12], "d.csv.gz", "truncated or corrupt"),
        ("a,y\n", "d.csv", "no rows"),
        ('a,y\n1,2\n3,"4\n5,6\n', "d.csv", ":3: a quoted field is never closed"),
    ],
)
def test_unreadable_files_fail_at_validate_and_load(tmp_path, capsys, content, name, says) -> None:
    p = _csv(tmp_path, content, name)
    with pytest.raises(DataError, match=says) as e:
        zoo.data.load(_section(p), 0)
    assert str(p) in str(e.value)
    err = _bad_input(
        ["validate", str(specs.write_spec(tmp_path, data=specs.csv(name, "y"), **REGRESS))], capsys
    )
    assert says in err and str(p) in err


def test_missing_target_column_fails_at_validate(tmp_path, capsys) -> None:
    _csv(tmp_path, GOOD)
    err = _bad_input(
        ["validate", str(specs.write_spec(tmp_path, data=specs.csv("d.csv", "price"), **REGRESS))],
        capsys,
    )
    assert "data.target" in err and "no column 'price' (3 columns in the header" in err
    assert "a, b" not in err  # the header's content is not echoed (the file may be any file)
    # a wrong delimiter reads as one column: the message says which delimiter it may be
    p = _csv(tmp_path, GOOD.replace(",", ";"), "semi.csv")
    with pytest.raises(DataError, match="is the delimiter ';'"):
        zoo.data.load(_section(p), 0)


def test_duplicate_and_unnamed_columns_are_refused_not_renamed(tmp_path) -> None:
    p = _csv(tmp_path, "a,b,a,y\n" + "1,2,3,4\n" * 6)
    with pytest.raises(
        DataError, match=r"d.csv:1: columns 1 and 3 of the header have the same name"
    ):
        zoo.data.load(_section(p), 0)
    p = _csv(tmp_path, ",a,y\n" + "".join(f"{i},{i},{i}\n" for i in range(6)), "idx.csv")
    with pytest.raises(DataError, match="idx.csv:1: column 1 of the header has no name"):
        zoo.data.load(_section(p), 0)


def test_ragged_row_names_its_line(tmp_path) -> None:
    p = _csv(tmp_path, GOOD.replace("4,3,0\n", "4,3,0,9\n"))
    with pytest.raises(DataError, match=r"d.csv:6: 4 fields, but the header has 3"):
        zoo.data.load(_section(p), 0)


# --- values that cannot be trained on ---------------------------------------------------


def test_nonfinite_and_non_numeric_values_name_column_and_lines(tmp_path, capsys) -> None:
    text = (
        GOOD.replace("3,1,1\n", "nan,1,1\n")
        .replace("5,0,1\n", "cat,0,1\n")
        .replace("7,4,1\n", "inf,,1\n")
        .replace("9,3,1\n", "9,3,-inf\n")
    )
    p = _csv(tmp_path, text)
    with pytest.raises(DataError) as e:
        zoo.data.load(_section(p), 0)
    msg = str(e.value)
    assert f"{p}: 4 of 12 rows cannot be used" in msg
    assert "column 'a': line 5: NaN; line 7: not a number; line 9: infinite" in msg
    assert "column 'b': line 9: empty" in msg
    assert "column 'y': line 11: infinite" in msg
    # a short row leaves empty fields; a value beyond float32 would be inf in the network
    p = _csv(tmp_path, GOOD.replace("4,3,0\n", "4\n").replace("6,2,0\n", "1e39,2,0\n"))
    with pytest.raises(DataError, match=r"column 'a': line 8: beyond the float32"):
        zoo.data.load(_section(p), 0)
    err = _bad_input(
        ["validate", str(specs.write_spec(tmp_path, data=specs.csv("d.csv", "y"), **REGRESS))],
        capsys,
    )
    assert "column 'b': line 6: empty" in err


def test_many_bad_rows_are_counted_after_the_first_five(tmp_path) -> None:
    p = _csv(tmp_path, "a,y\n" + "x,1\n" * 8 + "".join(f"{i},{i}\n" for i in range(6)))
    with pytest.raises(DataError, match=r"line 6: not a number; and 3 more"):
        zoo.data.load(_section(p), 0)


@pytest.mark.parametrize(
    ("label", "says"),
    [
        ("nan", "NaN"),
        ("cat", "not a number"),
        ("0.5", "not an integer class label"),
        ("-1", "a negative class label"),
        ("", "empty"),
        ("1e12", "too large for a class label"),
    ],
)
def test_class_labels_must_be_integers(tmp_path, capsys, label: str, says: str) -> None:
    p = _csv(tmp_path, GOOD.replace("2,4,0\n", f"2,4,{label}\n"))
    with pytest.raises(DataError, match=f"column 'y': line 4: {says}"):
        zoo.data.load(_section(p, "classification"), 0)
    data = specs.csv("d.csv", "y", task="classification")
    spec = specs.write_spec(tmp_path, data=data, **CLASSIFY)
    assert says in _bad_input(["validate", str(spec)], capsys)


def test_labels_written_as_integer_floats_are_classes(tmp_path) -> None:
    p = _csv(tmp_path, GOOD.replace(",0\n", ",0.0\n").replace(",1\n", ",1.0\n"))
    ds = zoo.data.load(_section(p, "classification"), 0)
    assert ds.n_classes == 2 and ds.y_train.dtype == np.int64
    assert set(np.unique(np.concatenate([ds.y_train, ds.y_test]))) == {0, 1}


def test_labels_from_one_and_a_single_class_are_refused(tmp_path) -> None:
    p = _csv(tmp_path, "a,y\n" + "".join(f"{i},{1 + i % 3}\n" for i in range(12)))
    with pytest.raises(DataError, match=r"class 0 has no rows \(labels numbered from 1\?\)"):
        zoo.data.load(_section(p, "classification"), 0)
    p = _csv(tmp_path, "a,y\n" + "".join(f"{i},0\n" for i in range(12)))
    with pytest.raises(DataError, match="column 'y': only class 0; a classifier needs at least 2"):
        zoo.data.load(_section(p, "classification"), 0)


def test_training_split_with_a_single_class_is_refused(tmp_path) -> None:
    # one row of class 1 among 11 of class 0: for some split seeds it is the test row, and the
    # classifier would see one class and score accuracy 1 on a test set of it
    p = _csv(tmp_path, "a,y\n" + "".join(f"{i},{int(i == 5)}\n" for i in range(12)))
    section = _section(p, "classification", test_fraction=0.1)
    outcomes = {}
    for seed in range(60):
        try:
            zoo.data.load(section, seed)
            outcomes[seed] = "ok"
        except DataError as e:
            outcomes[seed] = str(e)
    bad = [s for s, o in outcomes.items() if o != "ok"]
    assert bad and len(bad) < 60  # the seed decides, and both happen
    msg = outcomes[bad[0]]
    assert f"data.path: {p} (seed {bad[0]})" in msg
    assert "training split has only class 0 (11 rows)" in msg
    with pytest.raises(DataError, match="only class 0"):
        zoo.data.check(section, bad[0])  # check runs what load runs


def test_one_training_row_is_refused(tmp_path) -> None:
    p = _csv(tmp_path, "a,y\n1,2\n2,3\n")
    with pytest.raises(
        DataError,
        match=f"{p}: 2 rows, of which test_fraction 0.1 holds out 1, "
        "leave 1 to train on; at least 2",
    ):
        zoo.data.load(_section(p), 0)
    assert MIN_TRAIN_ROWS == 2
    ok = zoo.data.load(_section(_csv(tmp_path, "a,y\n1,2\n2,3\n4,4\n", "three.csv")), 0)
    assert len(ok.x_train) == 2 and len(ok.x_test) == 1
    with pytest.raises(DataError, match=r"data.kind: teacher \(seed 0\): 1 training row"):
        zoo.data.load(TeacherData(kind="teacher", n_train=1), 0)
    with pytest.raises(DataError, match=r"data.kind: two_moons \(seed 0\): 1 training row"):
        zoo.data.load(TwoMoonsData(kind="two_moons", n_train=1, n_test=5), 0)


def test_good_tables_load_as_before(tmp_path) -> None:
    p = _csv(tmp_path, GOOD.replace("\n", "\r\n") + "\n\n")  # CRLF and trailing blank lines
    t = read_table(p, "y")
    assert t.inputs == ("a", "b") and t.x.shape == (12, 2) and t.n_classes == 0
    np.testing.assert_array_equal(t.lines, np.arange(2, 14))
    ds = zoo.data.load(_section(p, "classification"), 0)
    assert ds.n_classes == 2 and len(ds.x_train) + len(ds.x_test) == 12


# --- the command line -------------------------------------------------------------------


def test_zoo_run_refuses_bad_data_before_any_cell(tmp_path, capsys) -> None:
    _csv(tmp_path, GOOD.replace("3,1,1\n", "3,nan,1\n"))
    spec = specs.write_spec(tmp_path, data=specs.csv("d.csv", "y"), **REGRESS)
    out = tmp_path / "out"
    err = _bad_input(["run", str(spec), "--out", str(out), "--no-progress"], capsys)
    assert "column 'b': line 5: NaN" in err
    assert not (out / "cells").exists()
    err = _bad_input(["show", str(spec)], capsys)
    assert "column 'b'" in err


# --- IDX files --------------------------------------------------------------------------


def _idx_bytes(arr: np.ndarray, code: int = 0x08) -> bytes:
    dtype = {0x08: ">u1", 0x09: ">i1", 0x0D: ">f4"}[code]
    return (
        struct.pack(">BBBB", 0, 0, code, arr.ndim)
        + struct.pack(f">{arr.ndim}I", *arr.shape)
        + arr.astype(dtype).tobytes()
    )


def _idx_dir(d: Path, **override: bytes) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    files = {
        "train-images-idx3-ubyte": _idx_bytes(rng.integers(0, 256, (20, 3, 3))),
        "train-labels-idx1-ubyte": _idx_bytes(np.arange(20) % 4),
        "t10k-images-idx3-ubyte": _idx_bytes(rng.integers(0, 256, (6, 3, 3))),
        "t10k-labels-idx1-ubyte": _idx_bytes(np.arange(6) % 4),
    }
    for stem, data in {**files, **override}.items():
        (d / stem).write_bytes(data)
    return d


def _idx_section(d: Path, **kw) -> IdxData:
    return IdxData(kind="idx", dir=str(d), validation=kw.pop("validation", 4), **kw)


@pytest.mark.parametrize(
    ("stem", "data", "says"),
    [
        ("train-images-idx3-ubyte", b"PK\x03\x04zipfile", "not an IDX file (bytes 0-3 are not"),
        ("train-images-idx3-ubyte", b"", "not an IDX file"),
        ("train-labels-idx1-ubyte", b"\x00\x00\x08\x03\x00\x00", "header is cut short"),
        ("t10k-images-idx3-ubyte", _idx_bytes(np.zeros((6, 3, 3)))[:-5], "truncated or corrupt"),
        ("t10k-labels-idx1-ubyte", _idx_bytes(np.zeros((6, 3, 3)), 0x0D), "labels of shape"),
        ("train-images-idx3-ubyte", _idx_bytes(np.zeros((20, 3, 3)), 0x0D), "unsigned bytes"),
        ("train-labels-idx1-ubyte", _idx_bytes(np.arange(20) % 4 + 1), "class 0 has no rows"),
        ("train-labels-idx1-ubyte", _idx_bytes(np.zeros(20)), "only class 0"),
        ("train-labels-idx1-ubyte", _idx_bytes(np.arange(19) % 4), "20 images in"),
        (
            "t10k-labels-idx1-ubyte",
            _idx_bytes(np.array([0, 1, 7, 2, 9, 3])),
            "test labels outside the training classes 0..3: item 2: 7; item 4: 9",
        ),
    ],
)
def test_bad_idx_files_fail_at_validate_and_load(tmp_path, capsys, stem, data, says) -> None:
    d = _idx_dir(tmp_path / "idx", **{stem: data})
    with pytest.raises(DataError, match=f"^data.dir: .*{says}".replace("(", r"\(")) as e:
        load_idx(_idx_section(d), 0)
    assert str(d) in str(e.value)
    spec = specs.write_spec(tmp_path, data=specs.idx("idx", validation=4), **CLASSIFY)
    assert says in _bad_input(["validate", str(spec)], capsys)


def test_truncated_gzip_idx_file(tmp_path) -> None:
    d = _idx_dir(tmp_path / "idx")
    raw = (d / "train-images-idx3-ubyte").read_bytes()
    (d / "train-images-idx3-ubyte").unlink()
    (d / "train-images-idx3-ubyte.gz").write_bytes(gzip.compress(raw)[:-20])
    with pytest.raises(DataError, match="train-images-idx3-ubyte.gz: cannot be read .*truncated"):
        read_idx(d / "train-images-idx3-ubyte.gz")
    with pytest.raises(DataError, match="^data.dir: .*truncated"):
        zoo.data.load(_idx_section(d), 0)


def test_idx_validation_must_leave_two_training_examples(tmp_path) -> None:
    d = _idx_dir(tmp_path / "idx")
    with pytest.raises(DataError, match="data.validation: 19 leaves 1 training examples of 20"):
        load_idx(_idx_section(d, validation=19), 0)
    assert len(load_idx(_idx_section(d, validation=18), 0).x_train) == 2


def test_missing_idx_files_are_a_note_at_validate_and_an_error_at_run(tmp_path, capsys) -> None:
    spec = specs.write_spec(tmp_path, data=specs.idx("nowhere"), **CLASSIFY)
    capsys.readouterr()
    assert main(["validate", str(spec)]) == 0  # the files may live on the machine that runs
    err = capsys.readouterr().err
    assert "note: data.dir: directory does not exist" in err
    with pytest.raises(DataFilesMissing) as e:
        zoo.data.check(_idx_section(tmp_path / "nowhere"))
    assert isinstance(e.value, DataError) and isinstance(e.value, FileNotFoundError)


# --- the check of every data set --------------------------------------------------------


def _ds(**kw) -> Dataset:
    rng = np.random.default_rng(0)
    base = dict(
        x_train=rng.normal(size=(6, 2)).astype(np.float32),
        y_train=np.array([0, 1, 0, 1, 2, 2]),
        x_test=np.zeros((2, 2), np.float32),
        y_test=np.array([0, 1]),
        n_classes=3,
    )
    return Dataset(**{**base, **kw})


def test_check_dataset_names_the_split_and_rows() -> None:
    check_dataset(_ds(), "src")
    x = _ds().x_train.copy()
    x[[1, 4]] = np.nan
    with pytest.raises(
        DataError, match=r"^src: the train split has non-finite inputs in rows 1; 4"
    ):
        check_dataset(_ds(x_train=x), "src")
    with pytest.raises(DataError, match=r"test labels outside the classes 0..2: row 1: 3"):
        check_dataset(_ds(y_test=np.array([0, 3])), "src")
    with pytest.raises(DataError, match="labels are float64, not integers"):
        check_dataset(_ds(y_train=np.zeros(6)), "src")
    with pytest.raises(DataError, match="training split has only class 2"):
        check_dataset(_ds(y_train=np.full(6, 2)), "src")
    with pytest.raises(DataError, match="non-finite targets in rows 0"):
        check_dataset(_ds(n_classes=0, y_train=np.array([np.inf, 0, 0, 0, 0, 0])), "src")
    with pytest.raises(DataError, match="no test rows"):
        check_dataset(_ds(x_test=np.zeros((0, 2), np.float32), y_test=np.zeros(0, int)), "src")
    with pytest.raises(DataError, match=r"inputs of shape \(2, 3\)"):
        check_dataset(_ds(x_test=np.zeros((2, 3), np.float32)), "src")


def test_class_count() -> None:
    assert class_count(np.array([0, 1, 2, 1]), "w") == 3
    with pytest.raises(DataError, match="^w: class labels must be the integers 0..K-1; found -1"):
        class_count(np.array([-1, 0, 1]), "w")
    with pytest.raises(DataError, match="classes 1, 3 have no rows: renumber the 3 classes 0..2"):
        class_count(np.array([0, 2, 4]), "w")
    with pytest.raises(DataError, match=r"classes 1, 2, 3, 4, 5, \.\.\. have no rows"):
        class_count(np.array([0, 10**15]), "w")  # lists a few, never builds range(K)
