"""Ray gives each GPU cell one GPU, checked on a real local Ray cluster without CUDA.

Ray accepts GPU resources that are not there (``ray.init(num_gpus=2)`` on a CPU machine)
and still does for each task what it does on a GPU node: it hands the task GPU ids
(``ray.get_gpu_ids()``) and sets ``CUDA_VISIBLE_DEVICES`` to them before the task runs.
:func:`zoo.execution.executors.run_ray` is called as ``zoo run --executor ray`` calls it with a
CUDA runtime; the cells are probes whose ``config()`` (the first thing
:func:`~zoo.execution.executors.execute_cell` asks of a cell, inside the task) reports what the
task was given. A probe has no spec, so the cell itself then fails, which the executor
records as any failed cell.
"""

from __future__ import annotations

import os

import pytest
import torch

from zoo.execution import executors
from zoo.runtime import Runtime

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.slow  # a real Ray cluster: about a minute on 2 busy cores


@pytest.fixture(scope="module")
def two_fake_gpus():
    if ray.is_initialized():
        pytest.skip("a Ray instance is already running in this process")
    ray.init(num_cpus=2, num_gpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield
    finally:
        ray.shutdown()


class GpuProbe:
    """A stand-in cell: ``config()`` runs inside the Ray task and reports its GPUs."""

    def __init__(self, i: int) -> None:
        self.cell_id, self.axes = f"probe{i}", {"method": "probe"}

    def config(self) -> dict:
        return {
            "gpu_ids": [str(g) for g in ray.get_gpu_ids()],
            "visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
        }


def test_each_cuda_cell_gets_one_gpu_and_sees_only_it(two_fake_gpus) -> None:
    runtime = Runtime(torch.device("cuda"), threads=1)
    out = list(executors.run_ray([GpuProbe(i) for i in range(4)], workers=2, runtime=runtime))
    assert sorted(r.record["cell_id"] for r in out) == [f"probe{i}" for i in range(4)]
    seen = set()
    for r in out:
        given = r.record["config"]
        assert len(given["gpu_ids"]) == 1, given  # num_gpus=1: one GPU per task
        assert given["visible"] == given["gpu_ids"][0], given  # and only it is visible
        assert r.record["device"] == "cuda"  # the task computes on "its" cuda
        assert r.record["status"] == "failed"  # a probe has no spec to run
        seen.add(given["gpu_ids"][0])
    assert seen <= {"0", "1"}


def test_cpu_cells_get_no_gpu(two_fake_gpus) -> None:
    out = list(executors.run_ray([GpuProbe(0)], workers=1, runtime=Runtime.cpu(threads=1)))
    given = out[0].record["config"]
    assert given["gpu_ids"] == [] and out[0].record["device"] == "cpu"
