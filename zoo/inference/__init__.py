"""Fitting: every inference method of the spec language behind one call, :func:`fit`.

:data:`METHODS` maps an inference section class (:mod:`zoo.spec.sections.inference`) to
``fit(method, model, data, ctx, hooks) -> Fit``: the frozen section is the method's
settings, ``ctx`` (:class:`~zoo.inference.base.FitContext`) the seed, runtime and progress,
``hooks`` (:class:`~zoo.inference.base.Hooks`) what watchers of the fit ask for. Add a
method: its section in the spec's inference union, a module here with its fit function,
one entry in :data:`METHODS` (``tests/zoo/inference/test_inference_conformance.py`` fails until it
is there).

Dependency rule: this package imports :mod:`zoo.spec`, :mod:`zoo.models`,
:mod:`zoo.runtime`, :mod:`guides`, Pyro, torch and NumPy; it knows nothing of studies,
cells or run directories.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pyro

from zoo.inference.base import (
    NO_HOOKS,
    Fit,
    FitContext,
    Hooks,
    Posterior,
    TrainingData,
    combine_hooks,
)
from zoo.inference.point import PointPosterior, fit_map, fit_mle
from zoo.inference.sampling import SampledPosterior, fit_sampler
from zoo.inference.svi import VIPosterior, fit_svi_method
from zoo.models.base import BayesianNet
from zoo.runtime import Runtime
from zoo.spec.base import registered
from zoo.spec.sections.inference import (
    ChEESMethod,
    HMCMethod,
    MAMSMethod,
    MAPMethod,
    MCLMCMethod,
    MLEMethod,
    NUTSMethod,
    SVIMethod,
)

__all__ = [
    "METHODS",
    "Fit",
    "FitContext",
    "Hooks",
    "NO_HOOKS",
    "PointPosterior",
    "Posterior",
    "SampledPosterior",
    "TrainingData",
    "VIPosterior",
    "combine_hooks",
    "fit",
]

MethodFit = Callable[[Any, BayesianNet, TrainingData, FitContext, Hooks], Fit]

#: Inference section class -> its fit function.
METHODS: dict[type, MethodFit] = {
    SVIMethod: fit_svi_method,
    MAPMethod: fit_map,
    MLEMethod: fit_mle,
    NUTSMethod: fit_sampler,
    HMCMethod: fit_sampler,
    ChEESMethod: fit_sampler,
    MCLMCMethod: fit_sampler,
    MAMSMethod: fit_sampler,
}


def fit(
    method: Any,
    model: BayesianNet,
    data: TrainingData,
    *,
    seed: int,
    runtime: Runtime,
    hooks: Hooks = NO_HOOKS,
    progress: bool = False,
    desc: str = "",
    others: Mapping[str, Any] | None = None,
) -> Fit:
    """Fit inference section ``method`` to the training data of ``data``.

    Parameters
    ----------
    method
        An inference section (a key of :data:`METHODS`); its fields are the settings.
    model : BayesianNet
    data : TrainingData
        ``x_train``, ``y_train`` (tensors on ``runtime``'s device) and ``true_params``.
    seed : int
        Seeds everything random in the fit.
    runtime : Runtime
        Device and dtype of the tensors the fit makes, and its generators.
    hooks : Hooks
        Callbacks into the fit (see :class:`~zoo.inference.base.Hooks`).
    progress : bool
        Progress bars.
    desc : str
        Label of the progress bar.
    others : mapping of str to section, optional
        The other methods of the spec by name, for methods that start from one
        (``init_from``); they are refitted with no hooks, with the same seed (or, for an
        ensemble of starts, the seeds the method asks for).

    Raises
    ------
    TypeError
        If no fit function is registered for the section's class.
    KeyError
        If ``method`` starts from a method not in ``others``.
    """
    run = registered(METHODS, method, "inference method", "zoo.inference.METHODS")
    named = dict(others or {})

    def refit(name: str, label: str, seed_: int | None = None) -> Fit:
        # from a clean param store: Pyro's guides take parameters they find there by name,
        # so a second fit of a method (an ensemble of starts) would start where the first
        # ended instead of from its own seed
        pyro.clear_param_store()
        return fit(
            named[name],
            model,
            data,
            seed=seed if seed_ is None else seed_,
            runtime=runtime,
            progress=progress,
            desc=label,
            others=named,
        )

    ctx = FitContext(seed, runtime, progress, desc, refit)
    return run(method, model, data, ctx, hooks)
