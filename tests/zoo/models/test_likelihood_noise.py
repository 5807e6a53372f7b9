"""``likelihood: {kind: gaussian, noise: data}``: the teacher's own noise, cell by cell.

Trippe & Turner (2018, Fig. 3) fit the teacher's model, noise included, at several noise
levels: a sweep over ``data.noise`` must move the likelihood's noise with it, and data that
do not know their noise must be refused at validation, naming the field.
"""

from __future__ import annotations

import pytest

from tests.zoo.spec._helpers import errors, write
from zoo.data import load
from zoo.models.build import build
from zoo.spec import load_spec

TEACHER = """\
name: tied_noise
seed: 0
data: {kind: teacher, n_train: 5, n_test: 5, width: 4, noise: 0.3}
model: {kind: mlp, depth: 1, width: 4}
likelihood: {kind: gaussian, noise: data}
inference:
  - {name: map, kind: map, steps: 2}
studies: []
sweep: {data.noise: [0.1, 0.5, 1.0]}
"""


def test_the_likelihood_takes_each_cells_data_noise(tmp_path) -> None:
    cells = load_spec(write(tmp_path, TEACHER)).cells()
    noises = []
    for cell in cells:
        ds = load(cell.spec.data, cell.spec.seed)
        noises.append(build(cell.spec, ds).likelihood.noise)
    assert noises == pytest.approx([0.1, 0.5, 1.0])
    assert len({c.cell_id for c in cells}) == 3


def test_data_that_do_not_know_their_noise_are_refused(tmp_path) -> None:
    text = TEACHER.replace(
        "{kind: teacher, n_train: 5, n_test: 5, width: 4, noise: 0.3}",
        "{kind: uci, name: boston}",
    ).replace("sweep: {data.noise: [0.1, 0.5, 1.0]}\n", "")
    (msg,) = errors(write(tmp_path, text), [])
    assert "likelihood.noise" in msg and "teacher" in msg and "give a number" in msg
