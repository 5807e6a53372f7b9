"""A sampler's state saved inside a running cell, and resumed by the next run.

A ChEES cell of Trippe & Turner's concrete network takes 2.5 hours of one core
(docs/results.md); a run stopped in the middle lost all of it. With a checkpoint channel,
:func:`zoo.inference.mcmc.loop.sample` (every batched sampler: ChEES, NUTS and HMC with
``vectorize_chains``, MCLMC, MAMS) saves its whole state every ``every_s`` seconds (the
program's kernel and adaptation state with its random generators, the thinned draws, the
streamed moments, the counters) and a later run of the same cell resumes from it. The
one-chain Pyro path has no such state and starts over.

The inference layer knows nothing of run directories: whoever runs the cell sets a
:class:`CheckpointChannel` (:func:`set_checkpoint_channel`), as it sets the progress sink
(:mod:`zoo.inference.progress`). The executors of :mod:`zoo.run.executors` give each cell
one whose ``load`` returns the bytes stored for the cell and whose ``save`` sends new bytes
to the process that owns the run directory (the only writer).

A resumed chain is bitwise the chain that was not stopped when it runs on the same machine
and thread count (``tests/zoo/inference/mcmc/test_checkpoint.py``, for every program of
the loop): the state is the program's attributes, which are all the state it has,
including its ``torch.Generator`` and NumPy generators.

The bytes are :func:`torch.save` of a tree of dicts, lists, Python scalars and tensors, read
back with ``torch.load(weights_only=True)``, so a checkpoint from an untrusted run directory
cannot run code; named tuples are rebuilt only from classes of the ``zoo`` package.

Dependency rule: this module imports torch, NumPy and the standard library only.
"""

from __future__ import annotations

import importlib
import io
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple

import numpy as np
import torch

__all__ = [
    "CHECKPOINT_VERSION",
    "CheckpointChannel",
    "current_checkpoint_channel",
    "decode",
    "encode",
    "from_bytes",
    "restore_attributes",
    "set_checkpoint_channel",
    "state_of",
    "to_bytes",
]

#: The layout of a checkpoint; another version is not resumed (the cell starts over).
CHECKPOINT_VERSION = 1


class CheckpointChannel(NamedTuple):
    """Where one running cell's sampler saves its state and finds a saved one."""

    load: Callable[[], bytes | None]
    """The bytes saved for this cell by an earlier run (None: none)."""
    save: Callable[[bytes], None]
    """Keep these bytes for the cell (replacing the earlier ones)."""
    every_s: float
    """Seconds between two saves (0: after every iteration, for tests)."""
    say: Callable[[str], None] = lambda msg: None
    """Where a line about a resume or a checkpoint that cannot be used goes."""


_channel: CheckpointChannel | None = None

#: The NumPy bit generators a checkpoint may rebuild (by name, never by import).
_BIT_GENERATORS = ("PCG64", "PCG64DXSM", "Philox", "SFC64", "MT19937")


def set_checkpoint_channel(channel: CheckpointChannel | None) -> CheckpointChannel | None:
    """Give the samplers of this process ``channel`` (None: no checkpoints); returns the one
    set before, so a caller can restore it."""
    global _channel
    previous, _channel = _channel, channel
    return previous


def current_checkpoint_channel() -> CheckpointChannel | None:
    """The channel of the cell running in this process, if its runner set one."""
    return _channel


# --------------------------------------------------------------------------- state trees


def encode(value: Any, where: str = "state") -> Any:
    """``value`` as a tree that ``torch.load(weights_only=True)`` reads back.

    Tensors go to the CPU with their device noted, generators as their state, NumPy arrays
    as tensors, named tuples with their ``zoo`` class; anything else is a TypeError naming
    ``where`` (a program must list the attributes that are not state in ``not_state``).
    """
    if isinstance(value, np.generic):  # before float: np.float64 is a float
        return value.item()
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, torch.Tensor):
        return {"__tensor__": value.detach().to("cpu").clone(), "device": str(value.device)}
    if isinstance(value, torch.Generator):
        return {"__generator__": value.get_state(), "device": str(value.device)}
    if isinstance(value, np.random.Generator):
        state = value.bit_generator.state
        return {"__np_generator__": encode(state, f"{where}.bit_generator")}
    if isinstance(value, torch.device):
        return {"__device__": str(value)}
    if isinstance(value, torch.dtype):
        return {"__dtype__": str(value).removeprefix("torch.")}
    if isinstance(value, np.ndarray):
        return {"__ndarray__": torch.from_numpy(np.ascontiguousarray(value).copy())}
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        cls = type(value)
        if not cls.__module__.startswith("zoo."):
            raise TypeError(f"{where}: named tuple {cls.__qualname__} is not a zoo class")
        return {
            "__namedtuple__": f"{cls.__module__}:{cls.__qualname__}",
            "items": [encode(v, f"{where}.{f}") for f, v in zip(value._fields, value, strict=True)],
        }
    if isinstance(value, tuple):
        return {"__tuple__": [encode(v, f"{where}[{i}]") for i, v in enumerate(value)]}
    if isinstance(value, list):
        return [encode(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {"__dict__": {k: encode(v, f"{where}.{k}") for k, v in value.items()}}
    raise TypeError(f"{where}: a {type(value).__name__} cannot be saved in a checkpoint")


def decode(tree: Any) -> Any:
    """The value :func:`encode` made ``tree`` from (tensors back on their device)."""
    if isinstance(tree, list):
        return [decode(v) for v in tree]
    if not isinstance(tree, dict):
        return tree
    if "__tensor__" in tree:
        return tree["__tensor__"].to(tree["device"])
    if "__generator__" in tree:
        gen = torch.Generator(device=tree["device"])
        gen.set_state(tree["__generator__"])
        return gen
    if "__np_generator__" in tree:
        state = decode(tree["__np_generator__"])
        name = state.get("bit_generator") if isinstance(state, dict) else None
        if name not in _BIT_GENERATORS:
            raise ValueError(f"unknown NumPy bit generator {name!r}")
        bits = getattr(np.random, name)()
        bits.state = state
        return np.random.Generator(bits)
    if "__device__" in tree:
        return torch.device(tree["__device__"])
    if "__dtype__" in tree:
        dtype = getattr(torch, tree["__dtype__"], None)
        if not isinstance(dtype, torch.dtype):
            raise ValueError(f"unknown dtype {tree['__dtype__']!r}")
        return dtype
    if "__ndarray__" in tree:
        return tree["__ndarray__"].numpy()
    if "__tuple__" in tree:
        return tuple(decode(v) for v in tree["__tuple__"])
    if "__namedtuple__" in tree:
        module, _, name = tree["__namedtuple__"].partition(":")
        if not module.startswith("zoo."):
            raise ValueError(f"named tuple {tree['__namedtuple__']!r} is not a zoo class")
        cls = importlib.import_module(module)
        for part in name.split("."):
            cls = getattr(cls, part)
        if not (isinstance(cls, type) and issubclass(cls, tuple) and hasattr(cls, "_fields")):
            raise ValueError(f"{tree['__namedtuple__']!r} is not a named tuple")
        return cls(*[decode(v) for v in tree["items"]])
    if "__dict__" in tree:
        return {k: decode(v) for k, v in tree["__dict__"].items()}
    raise ValueError(f"unknown node in a checkpoint: {sorted(tree)}")


def state_of(obj: Any, not_state: Iterable[str] = ()) -> dict[str, Any]:
    """The encoded attributes of ``obj`` but those named in ``not_state``."""
    skip = set(not_state)
    name = type(obj).__name__
    return {k: encode(v, f"{name}.{k}") for k, v in vars(obj).items() if k not in skip}


def restore_attributes(obj: Any, state: Mapping[str, Any]) -> None:
    """Set the attributes of ``obj`` from :func:`state_of`'s tree."""
    for k, v in state.items():
        setattr(obj, k, decode(v))


def to_bytes(tree: Mapping[str, Any]) -> bytes:
    """The bytes of an encoded tree (:func:`torch.save`)."""
    buf = io.BytesIO()
    torch.save(dict(tree), buf)
    return buf.getvalue()


def from_bytes(data: bytes) -> dict[str, Any]:
    """An encoded tree from :func:`to_bytes`'s bytes; ``weights_only``: no code runs."""
    tree = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    if not isinstance(tree, dict):
        raise ValueError("a checkpoint holds a dict")
    return tree
