"""Pyro's ``JitTraceMeanField_ELBO`` with its compiled loss kept between steps.

Pyro 1.9's :class:`pyro.infer.JitTraceMeanField_ELBO` builds its compiled loss when
``self._loss_and_surrogate_loss`` is missing but stores it as ``self._differentiable_loss``,
so every call builds a new :func:`pyro.ops.jit.trace` wrapper and traces the model and guide
again: each step pays a full ``torch.jit.trace`` (several times an eager step, for any guide,
Pyro's ``AutoNormal`` included) and re-emits the trace's warnings. :class:`JitTraceMeanField_ELBO`
here is the same estimator with the wrapper kept, so it traces once per distinct keyword
arguments, as :class:`pyro.infer.JitTrace_ELBO` does. Measurements: docs/notes/guides.md.
"""

from __future__ import annotations

from typing import Any

import pyro.infer
import torch

__all__ = ["JitTraceMeanField_ELBO"]


class JitTraceMeanField_ELBO(pyro.infer.JitTraceMeanField_ELBO):  # noqa: N801 (Pyro's name)
    """:class:`pyro.infer.JitTraceMeanField_ELBO` that traces once, not on every step.

    Same estimator, arguments and restrictions as Pyro's (static model structure, tensor
    inputs as positional arguments, other inputs as keyword arguments, one trace per
    distinct keyword arguments); the closed-form KL of :class:`~pyro.infer.TraceMeanField_ELBO`
    wherever one is registered. Like Pyro's :class:`~pyro.infer.JitTrace_ELBO`, the compiled
    loss belongs to the first model and guide it is called with: use one instance per
    (model, guide) pair.

    Examples
    --------
    >>> svi = pyro.infer.SVI(model, AutoMeanField(model), pyro.optim.Adam({"lr": 1e-2}),
    ...                      JitTraceMeanField_ELBO())  # doctest: +SKIP
    """

    def differentiable_loss(
        self, model: Any, guide: Any, *args: Any, **kwargs: Any
    ) -> torch.Tensor:
        loss = super().differentiable_loss(model, guide, *args, **kwargs)
        # Pyro tests this name before building the compiled loss (and never sets it).
        self._loss_and_surrogate_loss = self._differentiable_loss
        return loss
