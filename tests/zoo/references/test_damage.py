"""``zoo.references.load`` on damaged databases: every file kind truncated, garbled,
emptied or holding the wrong JSON, a FIFO, a huge declared shape, and symbolic links out
of the database all end in its one documented error, :class:`ReferenceReadError`, naming
the file; nothing is read through a link. A name given without its configuration hash is
matched to the posterior that extends it."""

from __future__ import annotations

import io
import json
import os
import shutil
import zipfile
from pathlib import Path

import pytest

import zoo.references
from zoo.references import ReferenceReadError
from zoo.references.migrate import migrate

FIRST = Path(__file__).resolve().parent / "first_format"


@pytest.fixture(scope="module")
def clean(tmp_path_factory) -> Path:
    db = tmp_path_factory.mktemp("clean") / "db"
    shutil.copytree(FIRST, db)
    migrate(db)
    return db


def _files(db: Path, name: str) -> dict[str, Path]:
    """The six files one posterior reads, by kind."""
    post = json.loads((db / "posteriors" / f"{name}.json").read_text())
    data_info = db / "data/info" / f"{post['data_name']}.info.json"
    return {
        "posterior": db / "posteriors" / f"{name}.json",
        "model": db / "models/info" / f"{post['model_name']}.info.json",
        "data_info": data_info,
        "data": db / f"{json.loads(data_info.read_text())['data_file']}.zip",
        "draws_info": db / "reference_posteriors/draws/info" / f"{name}.info.json",
        "draws": db / "reference_posteriors/draws/draws" / f"{name}.json.zip",
    }


def _zip(text: str, member: str = "x.json") -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(member, text)
    return buf.getvalue()


def _damages(path: Path, original: bytes) -> list[tuple[str, bytes]]:
    """Ways to damage one file: byte-level for every kind, JSON of the wrong shape, and for
    a JSON object each top-level key dropped or given a value of the wrong type."""
    half = original[: len(original) // 2]
    mid = len(original) // 2
    garbled = (
        original[:mid] + bytes(b ^ 0x5A for b in original[mid : mid + 64]) + original[mid + 64 :]
    )
    out = [
        ("empty", b""),
        ("truncated", half),
        ("garbled", garbled),
        ("binary", b"\xff\xfe\x00\x01"),
    ]
    zipped = path.name.endswith(".zip")
    if zipped:
        with zipfile.ZipFile(io.BytesIO(original)) as zf:
            (member,) = zf.namelist()
            doc = json.loads(zf.read(member))
        out += [
            ("two members", _zip("[]", member)[:-22] + _zip("{}", "y.json")),
            ("no json", _zip("not json", member)),
        ]
    else:
        member, doc = "", json.loads(original)
    wrap = (lambda t: _zip(t, member)) if zipped else (lambda t: t.encode())
    for label, text in (("list", "[]"), ("null", "null"), ("number", "3"), ("string", '"x"')):
        out.append((f"json {label}", wrap(text)))
    if isinstance(doc, dict):
        for key in doc:
            out.append((f"no {key}", wrap(json.dumps({k: v for k, v in doc.items() if k != key}))))
            for bad in (None, 7, "zz", [1], {"a": 1}):
                out.append((f"{key}={bad!r}", wrap(json.dumps({**doc, key: bad}))))
    elif isinstance(doc, list) and doc and isinstance(doc[0], dict):
        first = next(iter(doc[0]))
        out.append(
            ("chain short", wrap(json.dumps([{**doc[0], first: doc[0][first][:-1]}, *doc[1:]])))
        )
        out.append(("chain of text", wrap(json.dumps([{k: "x" for k in doc[0]}, *doc[1:]]))))
        out.append(("no chains", wrap("[]")))
    return out


def test_every_damage_of_every_file_is_one_documented_error(clean, tmp_path) -> None:
    name = zoo.references.names(clean)[0]
    raw: list[str] = []
    n = 0
    for kind, path in _files(clean, name).items():
        original = path.read_bytes()
        for how, damaged in _damages(path, original):
            path.write_bytes(damaged)
            try:
                zoo.references.load(name, clean)
            except ReferenceReadError as e:
                n += 1
                assert str(e), (kind, how)
            except Exception as e:  # noqa: BLE001 - what the test counts
                raw.append(f"{kind} {how}: {type(e).__name__}: {e}")
            finally:
                path.write_bytes(original)
    assert raw == [], "\n".join(raw)
    assert n > 100
    zoo.references.load(name, clean)  # undamaged again


def test_huge_declared_shapes_and_draw_counts_are_refused_quickly(clean) -> None:
    name = zoo.references.names(clean)[0]
    path = _files(clean, name)["draws_info"]
    original = path.read_text()
    info = json.loads(original)
    var = next(iter(info["variables"]))
    try:
        for patch in (
            {
                "variables": {
                    **info["variables"],
                    var: {**info["variables"][var], "shape": [10**6, 10**6]},
                }
            },
            {"inference": {**info["inference"], "draws_per_chain_stored": 10**12}},
        ):
            path.write_text(json.dumps({**info, **patch}))
            with pytest.raises(ReferenceReadError, match="damaged"):
                zoo.references.load(name, clean)
    finally:
        path.write_text(original)


def test_no_file_is_read_through_a_link_nor_a_fifo(clean, tmp_path) -> None:
    name = zoo.references.names(clean)[0]
    files = _files(clean, name)
    for kind in ("draws", "data", "model"):
        db = tmp_path / f"link_{kind}"
        shutil.copytree(clean, db)
        target = _files(db, name)[kind]
        outside = tmp_path / f"outside_{kind}"
        outside.write_bytes(target.read_bytes())  # a valid file, but outside the database
        target.unlink()
        target.symlink_to(outside)
        with pytest.raises(ReferenceReadError, match="symbolic link"):
            zoo.references.load(name, db)
    # a folder of the database that is a link to a copy outside it
    db = tmp_path / "link_dir"
    shutil.copytree(clean, db)
    shutil.move(db / "data", tmp_path / "data_outside")
    (db / "data").symlink_to(tmp_path / "data_outside")
    with pytest.raises(ReferenceReadError, match="symbolic link"):
        zoo.references.load(name, db)
    # a FIFO where the draws are: refused at once, never opened for a blocking read
    db = tmp_path / "fifo"
    shutil.copytree(clean, db)
    draws = _files(db, name)["draws"]
    draws.unlink()
    os.mkfifo(draws)
    with pytest.raises(ReferenceReadError, match="not a regular file"):
        zoo.references.load(name, db)
    assert files["draws"].is_file()


def test_a_name_without_its_hash_is_matched_to_the_posterior_that_extends_it() -> None:
    for name in zoo.references.names():
        prefix = name.rsplit("_", 1)[0]
        with pytest.raises(ReferenceReadError, match=f"did you mean '{name}'"):
            zoo.references.load(prefix)
