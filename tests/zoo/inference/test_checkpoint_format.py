"""What a checkpoint may name and hold (zoo.inference.checkpoint): nothing is imported by a
name read from the file, and a tree that loads but could not be restored is refused before
any of it is set, so the sampler starts over with a line instead of failing its cell."""

from __future__ import annotations

import importlib

import numpy as np
import pytest
import torch

from tests.zoo.inference.mcmc.test_chees import _net, run_chees
from zoo.inference import checkpoint
from zoo.inference.checkpoint import CheckpointChannel, decode, from_bytes, to_bytes

KW = dict(seed=2, warmup=12, draws=10, chains=3, max_leapfrog=8)


class _Stop(Exception):
    """The run died right after a save."""


def _saved_after(n: int) -> bytes:
    """The checkpoint a ChEES run saved after its ``n``-th iteration."""
    saved: list[bytes] = []

    def save(data: bytes) -> None:
        saved.append(data)
        if len(saved) == n:
            raise _Stop

    with pytest.raises(_Stop):
        run_chees(_net(torch.float32), checkpoint=CheckpointChannel(lambda: None, save, 0.0), **KW)
    return saved[-1]


def _started_over_from(tree: dict) -> list[str]:
    """Resume a run from ``tree``: its draws must be those of a run with no checkpoint;
    what it said."""
    said: list[str] = []
    again = run_chees(
        _net(torch.float32),
        checkpoint=CheckpointChannel(lambda: to_bytes(tree), lambda d: None, 1e9, said.append),
        **KW,
    )
    np.testing.assert_array_equal(run_chees(_net(torch.float32), **KW).flat, again.flat)
    return said


def test_a_name_in_a_checkpoint_is_never_imported(monkeypatch) -> None:
    imported: list[str] = []
    real = importlib.import_module

    def spy(name: str, *a, **k):
        imported.append(name)
        return real(name, *a, **k)

    monkeypatch.setattr(checkpoint.importlib, "import_module", spy)
    crafted = {"__namedtuple__": "zoo.cli.export:cmd_export", "items": []}
    data = to_bytes({"x": crafted})  # plain dicts and strings: weights_only loads them
    with pytest.raises(ValueError, match="not a zoo class that a checkpoint may hold"):
        from_bytes(data)
    with pytest.raises(ValueError, match="not a zoo class"):
        decode(crafted)
    assert imported == []
    # the sampler states' own classes are rebuilt (from the fixed table)
    tree = from_bytes(_saved_after(3))
    assert any("zoo.inference.mcmc" in name for name in imported)
    assert set(imported) <= {module for module, _ in checkpoint.STATE_TYPES.values()}
    assert tree["loop"]["warmup_next"] == 3


@pytest.mark.parametrize(
    "bad",
    [
        {"__dtype__": "no_such_dtype"},
        {"__namedtuple__": "zoo.cli.__main__:main", "items": []},
        {"__generator__": torch.zeros(3, dtype=torch.uint8), "device": "cpu"},
        {"__tensor__": torch.zeros(2), "device": "cuda:99"},
        {"__what__": 1},
    ],
)
def test_a_checkpoint_that_loads_but_cannot_be_restored_starts_over(bad) -> None:
    tree = from_bytes(_saved_after(15))  # in the draws
    name = sorted(tree["program"])[0]
    tree["program"][name] = bad
    said = _started_over_from(tree)
    assert len(said) == 1 and "cannot be read" in said[0] and "starting over" in said[0]


@pytest.mark.parametrize("where", ["kept", "program", "part-way"])
def test_a_checkpoint_that_decodes_but_does_not_fit_starts_over(where) -> None:
    # a tensor of another shape (a forged file, or code that changed what it saves without
    # a new CHECKPOINT_VERSION), or a part that fails after the program was already set:
    # said, the fresh state kept or put back, and the chains start over, the same as a run
    # with no checkpoint
    tree = from_bytes(_saved_after(15))
    if where == "part-way":
        tree["kept"] = []  # the program is restored first, then this fails
    else:
        name = next(k for k, v in sorted(tree[where].items()) if "__tensor__" in str(v)[:20])
        tree[where][name] = {"__tensor__": torch.zeros(7, 1, 3), "device": "cpu"}
    said = _started_over_from(tree)
    assert len(said) == 1 and "cannot be restored" in said[0] and "starting over" in said[0]
