"""What every inference method returns and accepts: :class:`Fit`, :class:`Posterior`, :class:`Hooks`.

An inference method (:data:`zoo.inference.METHODS`) takes its spec section as its settings
(the frozen section is the settings object: its defaults live in the schema and nowhere
else), a network, the training tensors, a seed and :class:`Hooks`, and returns a frozen
:class:`Fit`. Hooks are how code that watches a fit (the studies of :mod:`zoo.studies`)
sees it without the fit knowing who watches: SVI calls ``on_start``, ``on_step`` and
``on_grads``; samplers ask ``stop_when``. A hook must not draw from torch's global
generator, so that a fit gives the same numbers with and without it.

Dependency rule: this module imports torch, NumPy and the standard library only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol, runtime_checkable

import numpy as np
import torch

from zoo.inference.progress import progress_bar as _progress_bar
from zoo.runtime import Runtime

__all__ = [
    "Fit",
    "FitContext",
    "Hooks",
    "NO_HOOKS",
    "Posterior",
    "TrainingData",
    "combine_hooks",
    "progress_bar",
]


@runtime_checkable
class Posterior(Protocol):
    """A fitted posterior over the network's sites.

    ``sample(n, seed)`` returns ``{site: tensor of shape (n, *site_shape)}`` and leaves
    torch's global generator as it found it; ``median()`` returns ``{site: tensor}``.
    """

    def sample(self, n: int, seed: int) -> dict[str, torch.Tensor]: ...

    def median(self) -> dict[str, torch.Tensor]: ...


class TrainingData(Protocol):
    """What a fit reads of a cell's data (:class:`zoo.data.TorchData` has it).

    ``x_train``, ``y_train`` are tensors on the cell's device; ``true_params`` are the
    generating weights by site (teacher data) or None.
    """

    x_train: torch.Tensor
    y_train: torch.Tensor
    true_params: Mapping[str, torch.Tensor] | None


class Hooks(NamedTuple):
    """Callbacks into a running fit; every field is optional.

    Attributes
    ----------
    on_start : callable, optional
        ``on_start(guide)`` once the guide is built, before the first step (SVI).
    on_step : callable, optional
        ``on_step(step, guide, loss)`` after every optimizer step (0-based ``step``; ``loss``
        the step's KL-weighted loss per training point) (SVI).
    on_grads : callable, optional
        ``on_grads(step, {param name: gradient})`` with the step's gradients before the
        optimizer applies them (SVI).
    stop_when : callable, optional
        ``stop_when({site: draws of shape (chains, k, *site_shape)}) -> bool``: a stopping
        rule of a sampler, asked after the sampler's ``draws`` and then every few draws
        until it is true or ``max_draws`` is reached.
    max_draws : int, optional
        The cap on draws per chain under ``stop_when``.
    """

    on_start: Callable[[Any], None] | None = None
    on_step: Callable[[int, Any, float], None] | None = None
    on_grads: Callable[[int, Mapping[str, torch.Tensor]], None] | None = None
    stop_when: Callable[[Mapping[str, np.ndarray]], bool] | None = None
    max_draws: int | None = None


#: Hooks that watch nothing: the default of every fit.
NO_HOOKS = Hooks()


def _chain(fns: list[Callable[..., None]]) -> Callable[..., None] | None:
    if not fns:
        return None
    if len(fns) == 1:
        return fns[0]

    def call(*args: Any) -> None:
        for fn in fns:
            fn(*args)

    return call


def combine_hooks(hooks: Iterable[Hooks]) -> Hooks:
    """One :class:`Hooks` that calls each of ``hooks`` in turn.

    Callbacks run in the given order. At most one of them may set a stopping rule.

    Raises
    ------
    ValueError
        If two of them set ``stop_when``.
    """
    hooks = list(hooks)
    stops = [h for h in hooks if h.stop_when is not None]
    if len(stops) > 1:
        raise ValueError("two studies set a sampler's stopping rule; keep one")
    stop = stops[0] if stops else Hooks()
    return Hooks(
        on_start=_chain([h.on_start for h in hooks if h.on_start is not None]),
        on_step=_chain([h.on_step for h in hooks if h.on_step is not None]),
        on_grads=_chain([h.on_grads for h in hooks if h.on_grads is not None]),
        stop_when=stop.stop_when,
        max_draws=stop.max_draws,
    )


@dataclass(frozen=True)
class Fit:
    """What an inference method returns.

    Attributes
    ----------
    posterior : Posterior
        The fitted posterior (:class:`~zoo.inference.svi.VIPosterior`,
        :class:`~zoo.inference.point.PointPosterior` or
        :class:`~zoo.inference.sampling.SampledPosterior`).
    seconds : float
        Wall time of the fit itself.
    losses : ndarray
        The training loss per step (empty for samplers).
    stats : dict
        Numbers of the fit that a cell records as they are (``neg_elbo``, ``final_loss``,
        ``n_var_params``, ``best_step``, ``n_divergent``, ...).
    predictive_draws : int
        How many posterior draws the predictive metrics use (the method's setting; 1 for a
        point estimate).
    save_draws : bool
        Whether the cell stores its draws in its ArviZ file.
    sample_stats : dict of str to ndarray, optional
        Per-draw sampler statistics, shape ``(chain, draw)`` (samplers only).
    init : Fit, optional
        The variational fit a sampler's chains started from.
    history : dict of str to ndarray
        Other per-step or per-evaluation records of the fit (e.g. ``val_nll``).
    """

    posterior: Posterior
    seconds: float
    losses: np.ndarray = field(default_factory=lambda: np.empty(0), repr=False)
    stats: Mapping[str, Any] = field(default_factory=dict)
    predictive_draws: int = 1
    save_draws: bool = False
    sample_stats: Mapping[str, np.ndarray] | None = field(default=None, repr=False)
    init: Fit | None = None
    history: Mapping[str, np.ndarray] = field(default_factory=dict, repr=False)


class FitContext(NamedTuple):
    """How a method runs, apart from its settings: what every entry of ``METHODS`` gets.

    Attributes
    ----------
    seed : int
        The cell's seed: seeds the initial values, minibatch order and draws.
    runtime : Runtime
        Device and dtype of new tensors; seeded generators.
    progress : bool
        Show progress bars.
    desc : str
        Label of the progress bar.
    refit : callable
        ``refit(name, desc, seed=None) -> Fit``: fit another method of the same spec with no
        hooks, from a clean Pyro param store, with this seed or ``seed`` (a sampler's
        ``init_from``; an ensemble of them).
    """

    seed: int
    runtime: Runtime
    progress: bool = False
    desc: str = ""
    refit: Callable[..., Fit] | None = None


def progress_bar(total: int, desc: str) -> Any:
    """A bar of ``total`` steps (:func:`zoo.inference.progress.progress_bar`)."""
    return _progress_bar(total, desc)
