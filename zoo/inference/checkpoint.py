"""A sampler's state saved inside a running cell, and resumed by the next run.

A ChEES cell of Trippe & Turner's concrete network takes 2.5 hours of one core
(docs/results/overpruning.md); a run stopped in the middle lost all of it. With a
checkpoint channel, :func:`zoo.inference.mcmc.loop.sample` (every batched sampler: ChEES,
NUTS and HMC with ``vectorize_chains``, MCLMC, MAMS) saves its whole state every
``every_s`` seconds (the
program's kernel and adaptation state with its random generators, the thinned draws, the
streamed moments, the counters) and a later run of the same cell resumes from it. The
one-chain Pyro path has no such state and starts over.

The inference layer knows nothing of run directories: whoever runs the cell sets a
:class:`CheckpointChannel` (:func:`set_checkpoint_channel`), as it sets the progress sink
(:mod:`zoo.inference.progress`). The executors of :mod:`zoo.execution.executors` give each cell
one whose ``load`` returns the bytes stored for the cell and whose ``save`` sends new bytes
to the process that owns the run directory (the only writer).

A resumed chain is bitwise the chain that was not stopped when it runs on the same machine
and thread count (``tests/zoo/inference/mcmc/test_checkpoint.py``, for every program of
the loop): the state is the program's attributes, which are all the state it has,
including its ``torch.Generator`` and NumPy generators.

The bytes are :func:`torch.save` of a tree of dicts, lists, Python scalars and tensors, read
back with ``torch.load(weights_only=True)``, so a checkpoint from an untrusted run directory
cannot run code. Nothing is imported by a name read from a file: a named tuple is stored by
its name and rebuilt only from the fixed table :data:`STATE_TYPES` (the sampler states'
classes), NumPy bit generators only from :data:`_BIT_GENERATORS`. :func:`from_bytes` checks
that the whole tree decodes, so a checkpoint that loads but could not be restored is refused
there (the loop then starts the cell over with a line) rather than failing the cell.

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
    "STATE_TYPES",
    "CheckpointChannel",
    "current_checkpoint_channel",
    "decode",
    "encode",
    "from_bytes",
    "layout_problem",
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

#: The named tuples a checkpoint may hold: the stored name (``module:class``) to the module
#: and class rebuilt. A name read from a checkpoint is only looked up here; a named tuple
#: whose class is not listed cannot be saved (a program that keeps a new one in its state
#: adds it here).
STATE_TYPES: dict[str, tuple[str, str]] = {
    f"zoo.inference.mcmc.{module}:{name}": (f"zoo.inference.mcmc.{module}", name)
    for module, name in [
        ("result", "Adapted"),
        ("loop", "Step"),
        ("welford", "Welford"),
        ("dual_averaging", "DualAveragingState"),
        ("window_adaptation", "Window"),
        ("window_adaptation", "AdaptationState"),
        ("chees", "ChEESInfo"),
        ("chees_adaptation", "ChEESState"),
        ("mclmc", "IsokineticState"),
        ("mclmc", "MCLMCInfo"),
        ("mclmc_adaptation", "Predictor"),
        ("mams", "MAMSInfo"),
        ("kernel", "Point"),
        ("batched", "BatchPoint"),
    ]
}


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
        name = f"{cls.__module__}:{cls.__qualname__}"
        if name not in STATE_TYPES:
            raise TypeError(
                f"{where}: named tuple {name} is not a zoo class that a checkpoint may hold "
                "(zoo.inference.checkpoint.STATE_TYPES)"
            )
        return {
            "__namedtuple__": name,
            "items": [encode(v, f"{where}.{f}") for f, v in zip(value._fields, value, strict=True)],
        }
    if isinstance(value, tuple):
        return {"__tuple__": [encode(v, f"{where}[{i}]") for i, v in enumerate(value)]}
    if isinstance(value, list):
        return [encode(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {"__dict__": {k: encode(v, f"{where}.{k}") for k, v in value.items()}}
    raise TypeError(f"{where}: a {type(value).__name__} cannot be saved in a checkpoint")


def decode(tree: Any, *, check: bool = False) -> Any:
    """The value :func:`encode` made ``tree`` from (tensors back on their device).

    With ``check``, tensors stay where they are (only their device is checked to exist):
    :func:`from_bytes` decodes a whole tree so to refuse one that could not be restored.

    Raises
    ------
    ValueError
        A node that :func:`encode` does not make, a class not in :data:`STATE_TYPES`, an
        unknown dtype, bit generator or device, or a state a generator does not take.
    """
    if isinstance(tree, list):
        return [decode(v, check=check) for v in tree]
    if not isinstance(tree, dict):
        return tree
    try:
        return _decode_node(tree, check)
    except (KeyError, TypeError, IndexError, AttributeError, RuntimeError) as e:
        raise ValueError(f"a damaged node in a checkpoint ({type(e).__name__}: {e})") from None


def _decode_node(tree: dict[str, Any], check: bool) -> Any:
    if "__tensor__" in tree:
        device = _device(tree["device"])
        return tree["__tensor__"] if check else tree["__tensor__"].to(device)
    if "__generator__" in tree:
        gen = torch.Generator(device=_device(tree["device"]))
        gen.set_state(tree["__generator__"])
        return gen
    if "__np_generator__" in tree:
        state = decode(tree["__np_generator__"], check=check)
        name = state.get("bit_generator") if isinstance(state, dict) else None
        if name not in _BIT_GENERATORS:
            raise ValueError(f"unknown NumPy bit generator {name!r}")
        bits = getattr(np.random, name)()
        bits.state = state
        return np.random.Generator(bits)
    if "__device__" in tree:
        return _device(tree["__device__"])
    if "__dtype__" in tree:
        dtype = getattr(torch, str(tree["__dtype__"]), None)
        if not isinstance(dtype, torch.dtype):
            raise ValueError(f"unknown dtype {tree['__dtype__']!r}")
        return dtype
    if "__ndarray__" in tree:
        return tree["__ndarray__"].numpy()
    if "__tuple__" in tree:
        return tuple(decode(v, check=check) for v in tree["__tuple__"])
    if "__namedtuple__" in tree:
        where = STATE_TYPES.get(tree["__namedtuple__"])
        if where is None:  # never imported: only the table's classes are rebuilt
            raise ValueError(
                f"named tuple {tree['__namedtuple__']!r} is not a zoo class that a "
                "checkpoint may hold"
            )
        cls = getattr(importlib.import_module(where[0]), where[1])
        return cls(*[decode(v, check=check) for v in tree["items"]])
    if "__dict__" in tree:
        return {k: decode(v, check=check) for k, v in tree["__dict__"].items()}
    raise ValueError(f"unknown node in a checkpoint: {sorted(map(str, tree))}")


def _device(name: Any) -> torch.device:
    """The device named in a checkpoint; a CUDA device this machine does not have is a
    ValueError (the tensors could not be put back there)."""
    device = torch.device(str(name))
    if device.type == "cuda" and (device.index or 0) >= torch.cuda.device_count():
        raise ValueError(f"the device {name!r} is not on this machine")
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"the device {name!r} is not one zoo samples on")
    return device


def state_of(obj: Any, not_state: Iterable[str] = ()) -> dict[str, Any]:
    """The encoded attributes of ``obj`` but those named in ``not_state``."""
    skip = set(not_state)
    name = type(obj).__name__
    return {k: encode(v, f"{name}.{k}") for k, v in vars(obj).items() if k not in skip}


def restore_attributes(obj: Any, state: Mapping[str, Any]) -> None:
    """Set the attributes of ``obj`` from :func:`state_of`'s tree."""
    for k, v in state.items():
        setattr(obj, k, decode(v))


def layout_problem(fresh: Any, saved: Any, where: str = "state") -> str | None:
    """Where an encoded ``saved`` tree holds a tensor whose shape or dtype is not ``fresh``'s.

    Both are trees as :func:`encode` makes them, ``fresh`` of a state that was just built for
    this run. None when nothing disagrees. Lenient where a layout may grow between versions
    of the code: keys or named-tuple fields present on one side only, and None on either
    side, pass (the loader of a layout that changed says so itself).
    """
    if isinstance(fresh, dict) and isinstance(saved, dict):
        for key in ("__tensor__", "__ndarray__"):
            if key in fresh or key in saved:
                a, b = fresh.get(key), saved.get(key)
                if not (torch.is_tensor(a) and torch.is_tensor(b)):
                    return f"{where} is not a tensor"
                if a.shape != b.shape or a.dtype != b.dtype:
                    return f"{where} is {tuple(b.shape)} {b.dtype}, not {tuple(a.shape)} {a.dtype}"
                return None
        if "__namedtuple__" in fresh:
            fresh, saved = fresh.get("items", []), saved.get("items", [])
        else:
            pairs = [(fresh[k], saved[k], f"{where}.{k}") for k in sorted(fresh.keys() & saved)]
            return next((p for a, b, w in pairs if (p := layout_problem(a, b, w))), None)
    if isinstance(fresh, list) and isinstance(saved, list):
        pairs = [
            (a, b, f"{where}[{i}]") for i, (a, b) in enumerate(zip(fresh, saved, strict=False))
        ]
        return next((p for a, b, w in pairs if (p := layout_problem(a, b, w))), None)
    return None


def to_bytes(tree: Mapping[str, Any]) -> bytes:
    """The bytes of an encoded tree (:func:`torch.save`)."""
    buf = io.BytesIO()
    torch.save(dict(tree), buf)
    return buf.getvalue()


def from_bytes(data: bytes) -> dict[str, Any]:
    """An encoded tree from :func:`to_bytes`'s bytes; ``weights_only``: no code runs.

    The whole tree is decoded once (:func:`decode` with ``check``), so that a tree that
    loads but holds a node that cannot be restored is refused here, before anything of it
    is set.

    Raises
    ------
    ValueError
        Not a dict, or a node that cannot be decoded (torch's own errors for bytes that are
        not a checkpoint pass through).
    """
    tree = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    if not isinstance(tree, dict) or not all(isinstance(k, str) for k in tree):
        raise ValueError("a checkpoint holds a dict")
    _check_tree(tree)
    return tree


def _check_tree(tree: Any) -> None:
    """Decode every node of a saved tree; raises ValueError for the first that cannot be.

    A node is a dict with a ``__marker__`` key (:func:`encode`'s); any other dict, such as
    a program's attributes by name, is a container of nodes and scalars.
    """
    if isinstance(tree, list):
        for v in tree:
            _check_tree(v)
    elif isinstance(tree, dict):
        if any(str(k).startswith("__") and str(k).endswith("__") for k in tree):
            decode(tree, check=True)  # a node (an unknown marker is refused there)
        else:
            for v in tree.values():
                _check_tree(v)
