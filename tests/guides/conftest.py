"""Fixtures of the guide tests (the root conftest clears the Pyro param store)."""

from __future__ import annotations

import pyro
import pytest
import torch


@pytest.fixture(autouse=True)
def _one_thread_and_seed():
    """Seed 0 and one intra-op thread.

    The tensors are tiny: extra threads only add overhead (``torch.tril`` takes
    milliseconds with 2 threads on a busy machine).
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    pyro.set_rng_seed(0)
    yield
    torch.set_num_threads(threads)
