"""A sampler stopped inside its cell and resumed from its checkpoint is the sampler that was
never stopped, bitwise (zoo.inference.checkpoint; the loop of zoo.inference.mcmc.loop)."""

from __future__ import annotations

import io
import pickle
from collections import namedtuple

import numpy as np
import pytest
import torch

from tests.zoo.inference.mcmc.test_chees import STATS, _net, run_chees
from tests.zoo.inference.mcmc.test_sequential import _small, run_hmc, run_nuts
from zoo.inference.checkpoint import (
    CheckpointChannel,
    decode,
    encode,
    from_bytes,
    to_bytes,
)
from zoo.inference.mcmc.chees_adaptation import ChEESState
from zoo.inference.mcmc.dual_averaging import DualAveragingState
from zoo.inference.mcmc.loop import LoopState
from zoo.inference.mcmc.potential import FlatPotential
from zoo.inference.mcmc.result import Adapted
from zoo.inference.mcmc.samplers import run_mams, run_mclmc
from zoo.inference.mcmc.streaming import StreamingMoments
from zoo.models.likelihoods import CategoricalLikelihood
from zoo.models.mlp import BayesianMLP

KW = dict(seed=3, warmup=40, draws=30, chains=4, max_leapfrog=16, keep=8, max_draws=80)


class Stop(Exception):
    """The process was killed right after a checkpoint was saved."""


def _run(channel: CheckpointChannel | None, device: str = "cpu"):
    """ChEES with streamed moments and their own stopping rule, as the chees method runs."""
    if device == "cpu":
        pot = _net(torch.float32)
    else:  # a classifier with N(0, 1) priors, as test_chees runs on CUDA
        _, x, y = _small("classification")
        model = BayesianMLP(3, [4, 5], CategoricalLikelihood(3), act="tanh")
        pot = FlatPotential(model, x.to(device, torch.float32), y.to(device))
    moments = StreamingMoments(pot.dim, KW["chains"], groups=2, device=device)
    res = run_chees(
        pot,
        on_draw=moments.update,
        until=lambda drawn, kept: drawn >= 55,
        checkpoint=channel,
        carry={"moments": moments},
        **KW,
    )
    return res, moments.summary()


def _same(a, b) -> None:
    (ra, ma), (rb, mb) = a, b
    np.testing.assert_array_equal(ra.flat, rb.flat)
    for k in STATS:
        np.testing.assert_array_equal(ra.sample_stats[k], rb.sample_stats[k])
    assert (ra.drawn, ra.kept_index, ra.thin) == (rb.drawn, rb.kept_index, rb.thin)
    assert (ra.n_divergent, ra.n_steps_mean) == (rb.n_divergent, rb.n_steps_mean)
    np.testing.assert_array_equal(ra.adapted.step_size, rb.adapted.step_size)
    np.testing.assert_array_equal(ra.adapted.inverse_mass_matrix, rb.adapted.inverse_mass_matrix)
    assert ra.adapted.trajectory_length == rb.adapted.trajectory_length
    np.testing.assert_array_equal(ma.cov, mb.cov)
    np.testing.assert_array_equal(ma.rhat(), mb.rhat())


def _stopped_then_resumed(run, stop_after: int):
    """``run(channel)`` killed right after its ``stop_after``-th save (a save after every
    iteration), then run again from that save: its result and the lines it said."""
    saved: list[bytes] = []

    def save(data: bytes) -> None:
        saved.append(data)
        if len(saved) == stop_after:
            raise Stop

    with pytest.raises(Stop):
        run(CheckpointChannel(lambda: None, save, 0.0))
    said: list[str] = []
    return run(CheckpointChannel(lambda: saved[-1], lambda d: None, 0.0, said.append)), said


@pytest.mark.parametrize("stop_after", [1, 25, 41, 70])  # saves: warm-up 1..40, draws 1..
def test_a_resumed_chain_is_the_chain_never_stopped(stop_after: int) -> None:
    plain = _run(None)
    resumed, said = _stopped_then_resumed(_run, stop_after)
    _same(plain, resumed)
    assert len(said) == 1 and "resumed from the checkpoint at warm-up" in said[0]
    warmup_next = min(stop_after, KW["warmup"])
    assert f"warm-up {warmup_next} of 40, draw {stop_after - warmup_next}" in said[0]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("stop_after", [25, 55])
def test_a_cuda_chain_resumes_bitwise_on_its_device(stop_after: int) -> None:
    """On a GPU the saved state holds CUDA tensors and the CUDA generator's state; the
    resumed run continues on the device, bitwise the run never stopped."""

    def run(channel):
        return _run(channel, "cuda")

    plain = run(None)
    resumed, said = _stopped_then_resumed(run, stop_after)
    _same(plain, resumed)
    assert len(said) == 1 and "resumed from the checkpoint" in said[0]


def test_a_checkpoint_of_another_setting_or_damaged_starts_over() -> None:
    plain = _run(None)
    saved: list[bytes] = []

    def save(data: bytes) -> None:
        saved.append(data)
        raise Stop

    with pytest.raises(Stop):
        _run(CheckpointChannel(lambda: None, save, 0.0))
    tree = from_bytes(saved[0])
    tree["fingerprint"]["chains"] = 5
    for data, why in [(to_bytes(tree), "another sampler setting"), (b"junk", "cannot be read")]:
        said: list[str] = []
        again = _run(CheckpointChannel(lambda d=data: d, lambda d: None, 1e9, said.append))
        _same(plain, again)
        assert len(said) == 1 and why in said[0] and "starting over" in said[0]


def test_the_state_tree_round_trips_and_runs_no_code() -> None:
    gen = torch.Generator().manual_seed(5)
    value = {
        "state": ChEESState(DualAveragingState(0.1, 0.2, 0.3, 4, 0.5), 1.0, 2.0, 0.0, 3.0, 7),
        "pair": (torch.arange(3.0), None),
        "array": np.array([True, False]),
        "device": torch.device("cpu"),
        "gen": gen,
        "list": [np.float64(1.5), 2, "x"],
    }
    back = decode(from_bytes(to_bytes({"v": encode(value)}))["v"])
    assert back["state"] == value["state"] and type(back["state"].da) is DualAveragingState
    assert torch.equal(back["pair"][0], value["pair"][0]) and back["pair"][1] is None
    assert back["array"].dtype == bool and back["array"].tolist() == [True, False]
    assert back["device"] == torch.device("cpu") and back["list"] == [1.5, 2, "x"]
    assert torch.equal(
        torch.randn(4, generator=back["gen"]), torch.randn(4, generator=gen)
    )  # the same stream from where it was saved
    with pytest.raises(TypeError, match="state.f: a function cannot be saved"):
        encode({"f": lambda: 0})
    with pytest.raises(TypeError, match="not a zoo class"):
        encode(namedtuple("Foreign", "a")(1))
    # a pickle that would run code on load is refused (torch.load weights_only)
    buf = io.BytesIO()
    pickle.dump({"x": _Evil()}, buf)
    with pytest.raises(Exception, match="(?i)weights.only|unsupported|global"):
        from_bytes(buf.getvalue())


class _Evil:
    def __reduce__(self):
        return (print, ("this must not run",))


#: Every batched program of the loop, as its sampler runs it (3 chains, all kept).
BATCHED = {
    "nuts": lambda pot, **kw: run_nuts(pot, vectorize_chains=True, max_tree_depth=4, **kw),
    "hmc": lambda pot, **kw: run_hmc(pot, vectorize_chains=True, num_steps=4, **kw),
    "mclmc": lambda pot, **kw: run_mclmc(pot, step_size=None, **kw),
    "mams": lambda pot, **kw: run_mams(pot, step_size=None, **kw),
    "chees": lambda pot, **kw: run_chees(pot, max_leapfrog=8, **kw),
}


@pytest.mark.parametrize("stop_after", [7, 28])  # in the warm-up of 20, in the draws
@pytest.mark.parametrize("name", sorted(BATCHED))
def test_every_batched_sampler_resumes_bitwise(name: str, stop_after: int) -> None:
    """The loop's conformance: a program it runs is saved and resumed whole (its
    ``not_state`` names all that is not state, its ``restored`` rebuilds the rest)."""
    kw = dict(seed=4, warmup=20, draws=15, chains=3)

    def run(channel):
        return BATCHED[name](_net(torch.float32), checkpoint=channel, **kw)

    plain = run(None)
    again, said = _stopped_then_resumed(run, stop_after)
    assert len(said) == 1 and "resumed" in said[0], said
    np.testing.assert_array_equal(plain.flat, again.flat)
    for k in plain.sample_stats:
        np.testing.assert_array_equal(plain.sample_stats[k], again.sample_stats[k])
    np.testing.assert_array_equal(plain.adapted.step_size, again.adapted.step_size)
    assert plain.n_divergent == again.n_divergent
    # the trajectory facts: the cap and the transitions cut at it (the loop's state, saved)
    assert (plain.trajectory_cap, plain.saturated) == (again.trajectory_cap, again.saturated)


def test_the_loop_state_is_saved_whole_and_the_earlier_layout_resumes() -> None:
    """The loop's state is one typed object in the tree (``LoopState``); a checkpoint of the
    layout before it (the position beside the counters, no saturation count) resumes
    bitwise too."""
    plain = _run(None)
    saved: list[bytes] = []

    def save(data: bytes) -> None:
        saved.append(data)
        if len(saved) == 50:
            raise Stop

    with pytest.raises(Stop):
        _run(CheckpointChannel(lambda: None, save, 0.0))
    tree = from_bytes(saved[-1])
    state = LoopState.of_tree(tree)
    assert (state.warmup_next, state.draw_next, state.drawn) == (40, 10, 10)
    assert LoopState(**tree["loop"]) == state  # every field saved, nothing else
    old = dict(tree)
    old["loop"] = {k: v for k, v in tree["loop"].items() if k not in LOOP_POSITION}
    old.update({k: tree["loop"][k] for k in ("warmup_next", "draw_next")})
    said: list[str] = []
    data = to_bytes(old)
    again = _run(CheckpointChannel(lambda: data, lambda d: None, 1e9, said.append))
    _same(plain, again)
    assert len(said) == 1 and "warm-up 40 of 40, draw 10" in said[0]


#: What the earlier layout did not hold in its ``loop`` entry.
LOOP_POSITION = ("warmup_next", "draw_next", "saturated")


def test_an_earlier_checkpoints_adapted_length_still_reads_in_steps() -> None:
    """A checkpoint saved after the warm-up before ``Adapted`` held the trajectory in steps
    holds ChEES's T and step size only: T / epsilon is read from them."""
    old = Adapted(np.full(3, 0.25), None, 4.0)  # what decode makes of the three saved items
    np.testing.assert_array_equal(old.steps(), np.full(3, 16.0))
    assert Adapted(np.full(3, 0.25), None).steps() is None  # no adapted length (NUTS)
    new = Adapted(np.full(2, 0.5), None, None, np.array([3.0, 7.0]))  # MAMS: L / eps per chain
    np.testing.assert_array_equal(new.steps(), [3.0, 7.0])
