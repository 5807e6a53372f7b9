"""The sampler loop's state and its checkpoints: what is saved, and how a saved state resumes.

:class:`LoopState` is the loop's own state between two iterations; :func:`saved_tree` is
the whole tree a checkpoint holds (the loop's, the program's but its ``not_state``, the
``carry`` objects', the kept draws, what the warm-up adapted); :func:`read_saved` reads a
checkpoint back for one call of :func:`zoo.inference.mcmc.loop.sample` (None where there is
none, it is another call's or it cannot be read); :func:`restore` sets a fresh run from it,
or says why it cannot and leaves the fresh state (the sampler then starts over, as a cell
with no checkpoint does).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, NamedTuple

from zoo.inference.checkpoint import (
    CHECKPOINT_VERSION,
    CheckpointChannel,
    encode,
    from_bytes,
    layout_problem,
    restore_attributes,
    state_of,
)
from zoo.inference.mcmc.potential import FlatPotential
from zoo.inference.mcmc.result import Adapted
from zoo.inference.mcmc.thinning import Thinned

__all__ = ["LoopState", "Saved", "fingerprint", "read_saved", "restore", "saved_tree"]


def fingerprint(
    program: Any, pot: FlatPotential, chains: int, warmup: int, cap: int, keep: int
) -> dict[str, Any]:
    """What a saved state must match to be resumed: the sampler, the sizes, the device and
    dtype of the potential (the cell id, which the run directory keys it by, pins the rest)."""
    return {
        "version": CHECKPOINT_VERSION,
        "label": program.label,
        "chains": chains,
        "dim": int(pot.dim),
        "warmup": warmup,
        "cap": cap,
        "keep": keep,
        "device": str(pot.x.device),
        "dtype": str(pot.x.dtype),
    }


@dataclass
class LoopState:
    """The loop's own state between two iterations: what a checkpoint saves of it, whole.

    The program's state, the ``carry`` objects' and the kept draws (:class:`Thinned`) are
    saved beside it; this is the rest, so that a resumed run goes on from
    ``(warmup_next, draw_next)`` with the same counts and clocks.
    """

    warmup_next: int = 0
    """The next warm-up iteration (``warmup`` once the warm-up is over)."""
    draw_next: int = 0
    """The next post-warm-up draw (0 in the warm-up)."""
    warm_div: int = 0
    """Divergent transitions in the warm-up, all chains."""
    div_total: Any = 0
    """Divergent transitions after the warm-up (an int, or a 0-d tensor summed on the device)."""
    steps_total: float = 0.0
    """Leapfrog steps per transition (mean over chains), summed over the draws."""
    saturated: Any = 0
    """Post-warm-up transitions whose trajectory was cut at the program's
    ``trajectory_cap``, all chains (an int or a 0-d tensor)."""
    drawn: int = 0
    """Draws per chain so far."""
    seconds: float = 0.0
    """Seconds of sampling of the runs this one resumes."""
    t_warm: float = 0.0
    """Seconds of the warm-up (set when it ends)."""

    def tree(self) -> dict[str, Any]:
        """Plain numbers for a checkpoint (device counts read once)."""
        out = asdict(self)
        out["div_total"], out["saturated"] = int(self.div_total), int(self.saturated)
        return out

    @classmethod
    def of_tree(cls, tree: Mapping[str, Any]) -> LoopState:
        """The state of a checkpoint's tree (one saved before the loop's state was one object
        holds the counters under ``loop`` and the position beside them)."""
        loop = dict(tree["loop"])
        loop.setdefault("warmup_next", tree.get("warmup_next", 0))
        loop.setdefault("draw_next", tree.get("draw_next", 0))
        fields = cls.__dataclass_fields__
        return cls(**{k: v for k, v in loop.items() if k in fields})


class Saved(NamedTuple):
    """A state read back from a checkpoint."""

    loop: LoopState
    tree: dict[str, Any]


def read_saved(ch: CheckpointChannel, fp: dict[str, Any], label: str) -> Saved | None:
    """The saved state of this call, or None (none, another call's, or unreadable)."""
    data = ch.load()
    if data is None:
        return None
    try:
        tree = from_bytes(data)
    except Exception as e:  # damaged or not ours: start over, say why
        ch.say(f"{label}: the checkpoint cannot be read ({type(e).__name__}); starting over")
        return None
    if tree.get("fingerprint") != fp:
        ch.say(f"{label}: the checkpoint is of another sampler setting; starting over")
        return None
    try:
        loop = LoopState.of_tree(tree)
    except (KeyError, TypeError, ValueError) as e:
        ch.say(f"{label}: the checkpoint cannot be read ({type(e).__name__}); starting over")
        return None
    return Saved(loop, tree)


def saved_tree(
    program: Any,
    fp: dict[str, Any],
    ls: LoopState,
    carry: Mapping[str, Any],
    buf: Thinned,
    adapted: Adapted | None,
) -> dict[str, Any]:
    """The whole state a checkpoint saves: the loop's, the program's but its ``not_state``,
    the ``carry`` objects', the kept draws and (after the warm-up) what was adapted."""
    not_state = getattr(program, "not_state", None)
    if not_state is None:
        raise TypeError(f"{program.label}: the program has no not_state; it cannot be saved")
    return {
        "fingerprint": fp,
        "loop": ls.tree(),
        "program": state_of(program, not_state),
        "carry": {k: state_of(v) for k, v in carry.items()},
        "kept": state_of(buf),
        "adapted": encode(adapted),  # None in the warm-up
    }


def restore(
    program: Any,
    carry: Mapping[str, Any],
    buf: Thinned,
    saved: Saved,
    checkpoint: CheckpointChannel,
    label: str,
    warmup: int,
) -> LoopState | None:
    """Set the program, the ``carry`` objects and the kept draws from a saved state; its
    :class:`LoopState`, or None (said; the fresh state kept) where the saved state does not
    fit this run: a tensor of another shape than the fresh state's
    (:func:`~zoo.inference.checkpoint.layout_problem`), or a restore that fails part-way
    (the fresh state is put back), so the sampler starts over."""
    tree = saved.tree
    fresh = {
        "program": state_of(program, getattr(program, "not_state", ())),
        "carry": {k: state_of(v) for k, v in carry.items()},
        "kept": state_of(buf),
    }
    problem = layout_problem(fresh, {k: tree.get(k) for k in fresh}, "checkpoint")
    if problem is None:
        try:
            _set_state(program, carry, buf, tree)
        except (KeyError, TypeError, ValueError, AttributeError, RuntimeError) as e:
            _set_state(program, carry, buf, fresh)
            problem = f"{type(e).__name__} while restoring"
    if problem is not None:
        checkpoint.say(f"{label}: the checkpoint cannot be restored ({problem}); starting over")
        return None
    ls = saved.loop
    checkpoint.say(
        f"{label}: resumed from the checkpoint at warm-up {ls.warmup_next} of {warmup}, "
        f"draw {ls.draw_next} ({ls.seconds:.0f} s of sampling kept)"
    )
    return ls


def _set_state(program: Any, carry: Mapping[str, Any], buf: Thinned, tree: Any) -> None:
    restore_attributes(program, tree["program"])
    if hasattr(program, "restored"):
        program.restored()
    for k, obj in carry.items():
        restore_attributes(obj, tree["carry"][k])
    restore_attributes(buf, tree["kept"])
