"""The repository speaks to its users: no words of the process that made it.

A reader of a tracked file has neither the development log nor the issue tracker nor the
developer's machine, so a dated fact names the commit, the date and the machine (e.g.
"commit 3319f79, 2026-11-26, one NVIDIA H100") instead of a numbered period of work, a
tracker number or a path that exists on one machine. This test greps every tracked text file
(``git ls-files``; binaries and the shipped reference data are skipped) and names each
file:line that breaks the rule.

What is not flagged: "helper" (a helper function is ordinary code English), "issue" as an
English word, a bare ``#N`` (another project's issue, ``stan-dev/posteriordb#12``; a colour,
``#222``; an HTML entity, ``&#60;``), identifiers (``start_new_session``, ``requests.Session(...)``) and a terminal
session.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: tracked files this test does not read: the shipped reference data (posteriordb's own
#: layout and numbers) and this file, whose patterns would find themselves
SKIPPED = ("zoo/references/shipped/", "tests/test_repo_words.py")

#: pattern -> what it catches
PATTERNS = {
    # a period of development, numbered or not ("in that session", "sessions 18-19")
    r"(?<![\w.])(?<!terminal )[Ss]essions?\b(?!\s*\()": "a development session",
    r"\b[Ss]tops? \d+\b": "a numbered stop of the tracker",
    r"\b[Ss]prints?\b": "a sprint",
    r"\b[Ii]ssues? #?\d+": "a tracker issue number",
    r"(?<![\w.~-])/(?:work|root)/": "a path of one machine",
    r"(?<![\w.~-])/home/[a-z_][\w-]*/": "a path of one machine",
    r"(?<![\w.~-])/tmp/\w": "a path of one machine (a run directory)",
}
WORDS = re.compile("|".join(f"(?:{p})" for p in PATTERNS))


def _tracked_text_files() -> list[Path]:
    out = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.decode()
    files = []
    for name in filter(None, out.split("\0")):
        path = ROOT / name
        if name.startswith(SKIPPED) or not path.is_file():
            continue
        head = path.read_bytes()[:8192]
        if b"\0" not in head:
            files.append(path)
    return files


def find_words(text: str) -> list[tuple[int, str, str]]:
    """``(line number, what, line)`` for every line of ``text`` that uses a development
    word, a tracker number or a path of one machine."""
    hits = []
    for n, line in enumerate(text.splitlines(), start=1):
        for m in WORDS.finditer(line):
            what = next(w for p, w in PATTERNS.items() if re.fullmatch(p, m.group()))
            hits.append((n, what, line.strip()))
    return hits


@pytest.mark.parametrize(
    "text",
    [
        # (the examples are split so that they do not themselves stand in the tracked text)
        "Measured in sess" + "ion 16 at commit 3319f79.",
        "the same session's eager benchmark",
        "sessions 18-19 ran it",
        "the code that passed CI at stop 39",
        "as iss" + "ue 27 asked",
        "(Issue #28)",
        "--blackjax /wo" + "rk/peers/bin/python",
        "zoo run spec.yaml --out /tmp/defrun14",
        "installed under /home/alice/venv",
        "a later sprint",
    ],
)
def test_each_kind_of_word_is_found(text: str) -> None:
    assert find_words(text), text


@pytest.mark.parametrize(
    "text",
    [
        "subprocess.Popen(cmd, start_new_session=True)",
        "In a terminal session that is a tqdm bar.",
        "s = requests.Session()",
        "Section and union helpers; the report's helper casts the draws",
        "a known issue with the trajectory cap; the issues it raises",
        "as its design asked, stan-dev/posteriordb#12",
        "not &amp; nor &#60;; color: #222; as BlackJAX since #1020",
        "IDX files under /usr/share/datasets/fashion-mnist",
        "stop the chains after 3 rounds",
    ],
)
def test_ordinary_english_and_code_pass(text: str) -> None:
    assert not find_words(text), find_words(text)


@pytest.mark.skipif(
    shutil.which("git") is None or not (ROOT / ".git").exists(), reason="not a git checkout"
)
def test_tracked_files_use_no_development_words() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{n}: {what}: {line[:120]}"
        for path in _tracked_text_files()
        for n, what, line in find_words(path.read_text(encoding="utf-8", errors="replace"))
    ]
    assert not found, (
        "name the commit, the date and the machine instead (e.g. 'commit 3319f79, "
        "2026-11-26, one NVIDIA H100'):\n" + "\n".join(found)
    )
