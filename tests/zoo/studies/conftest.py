"""Helpers of the study tests: a cell's context as run_cell builds it."""

from __future__ import annotations

import pytest

import zoo.data
import zoo.models
from zoo.runtime import Runtime
from zoo.studies import CellContext


@pytest.fixture
def cell_context():
    """``cell_context(cell) -> CellContext`` on the CPU runtime (data, model, tensors)."""

    def make(cell) -> CellContext:
        rt = Runtime.cpu()
        ds = zoo.data.load(cell.spec.data, cell.spec.seed)
        model = zoo.models.build(cell.spec, ds)
        return CellContext(cell, model, ds, ds.to_torch(rt), rt)

    return make
