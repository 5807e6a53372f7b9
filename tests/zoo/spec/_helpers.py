"""Shared pieces of the spec tests: a valid spec and how to write and load one."""

from __future__ import annotations

from pathlib import Path

import pytest

from zoo.spec import SpecError, load_spec

GOOD = """\
name: t
data:
  kind: two_moons
  n_train: 100
model:
  kind: mlp
  depth: 2
  width: 8
inference:
  - name: mfvi
    kind: svi
    guide: {kind: mean_field}
    steps: 10
sweep:
  model.depth: [1, 2]
  seed: [0, 1, 2]
"""


def write(tmp_path: Path, text: str, name: str = "s.yaml") -> Path:
    """``text`` written to ``tmp_path / name``."""
    p = tmp_path / name
    p.write_text(text)
    return p


def errors(path: Path, overrides=()) -> list[str]:
    """The messages of the SpecError that loading ``path`` must raise."""
    with pytest.raises(SpecError) as e:
        load_spec(path, overrides)
    return e.value.messages
