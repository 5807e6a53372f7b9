"""Observation models: ``sample`` inside the data plate, ``log_prob`` as a pure function.

Observations are the site ``obs`` inside the plate ``data``, which supports minibatches:
pass ``n_total`` (the training-set size) and the likelihood is scaled by
``n_total / len(x)``. A learned Gaussian noise is the site ``noise``.

A classification likelihood also gives :meth:`Likelihood.class_log_probs`, the log class
probabilities ``(..., n_classes)`` of the network outputs, which evaluation and the studies
use instead of assuming a softmax (a Bernoulli network has one output and two classes).

Add a likelihood: its section in the spec's likelihood union, a class here, an entry in
:data:`LIKELIHOODS`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pyro
import pyro.distributions as dist
import torch
import torch.nn.functional as F

from zoo.spec.base import registered
from zoo.spec.sections.likelihoods import BernoulliLikelihood as BernoulliSection
from zoo.spec.sections.likelihoods import CategoricalLikelihood as CategoricalSection
from zoo.spec.sections.likelihoods import GaussianLikelihood as GaussianSection

__all__ = [
    "LIKELIHOODS",
    "BernoulliLikelihood",
    "CategoricalLikelihood",
    "GaussianLikelihood",
    "Likelihood",
    "build_likelihood",
]


class Likelihood:
    """Observation model: ``sample`` inside the data plate, ``log_prob`` as a pure function."""

    out_dim: int

    def sample(self, out: torch.Tensor, y: torch.Tensor | None, n_total: int) -> None:
        raise NotImplementedError

    def log_prob(
        self, out: torch.Tensor, y: torch.Tensor, params: Mapping[str, torch.Tensor]
    ) -> torch.Tensor:
        raise NotImplementedError

    def class_log_probs(self, out: torch.Tensor) -> torch.Tensor:
        """Log class probabilities ``(..., n_classes)`` of outputs ``out`` (classification)."""
        raise TypeError(f"{type(self).__name__} is not a classification likelihood")


def _data_plate(out: torch.Tensor, n_total: int | None) -> pyro.plate:
    # The batch is already the subsample; `subsample` tells the plate which size it stands for
    # so the likelihood is scaled by n_total / n (no random indices are drawn). The indices
    # live on the outputs' device, as everything the model makes does.
    n = out.shape[-2]
    size = n if n_total is None else n_total
    return pyro.plate("data", size=size, subsample=torch.arange(n, device=out.device))


class CategoricalLikelihood(Likelihood):
    """y ~ Categorical(softmax(f(x)))."""

    def __init__(self, n_classes: int) -> None:
        self.out_dim = n_classes

    def sample(self, out, y, n_total):
        with _data_plate(out, n_total):
            pyro.sample("obs", dist.Categorical(logits=out), obs=y)

    def log_prob(self, out, y, params):
        return dist.Categorical(logits=out).log_prob(y)

    def class_log_probs(self, out):
        return torch.log_softmax(out, -1)


class BernoulliLikelihood(Likelihood):
    """y ~ Bernoulli(sigmoid(f(x))) on one output unit (binary classification).

    Labels are the classes 0 and 1 (integers in the data, cast to the logits' dtype here);
    :meth:`class_log_probs` gives ``(log(1 - p), log p)``, so predictive metrics see two
    classes as with a softmax.
    """

    def __init__(self) -> None:
        self.out_dim = 1

    def sample(self, out, y, n_total):
        f = out.squeeze(-1)
        with _data_plate(out, n_total):
            pyro.sample("obs", dist.Bernoulli(logits=f), obs=None if y is None else y.to(f.dtype))

    def log_prob(self, out, y, params):
        f = out.squeeze(-1)
        return -F.binary_cross_entropy_with_logits(
            f, y.to(f.dtype).expand(f.shape), reduction="none"
        )

    def class_log_probs(self, out):
        return torch.cat([F.logsigmoid(-out), F.logsigmoid(out)], -1)


class GaussianLikelihood(Likelihood):
    """y ~ N(f(x), noise^2); noise fixed, or the site ``noise`` ~ HalfNormal(prior_scale)."""

    def __init__(self, noise: float | None, prior_scale: float = 1.0) -> None:
        self.out_dim = 1
        self.noise = noise
        self.prior_scale = prior_scale

    def sample(self, out, y, n_total):
        if self.noise is None:
            scale = torch.tensor(self.prior_scale, device=out.device)
            noise = pyro.sample("noise", dist.HalfNormal(scale))
        else:
            noise = torch.tensor(self.noise, device=out.device)
        with _data_plate(out, n_total):
            pyro.sample("obs", dist.Normal(out.squeeze(-1), noise), obs=y)

    def log_prob(self, out, y, params):
        noise = (
            params["noise"] if self.noise is None else torch.tensor(self.noise, device=out.device)
        )
        if noise.dim() > 0:
            noise = noise.reshape(noise.shape + (1,) * (out.dim() - 1 - noise.dim()))
        return dist.Normal(out.squeeze(-1), noise).log_prob(y)


def _bernoulli(ds: Any) -> BernoulliLikelihood:
    if ds.n_classes != 2:
        raise ValueError(
            f"likelihood.kind: 'bernoulli' needs binary labels; the data has "
            f"{ds.n_classes or 'no'} classes (use kind categorical or gaussian)"
        )
    return BernoulliLikelihood()


def _noise(lik: Any, ds: Any) -> float | None:
    """The fixed noise std on the model's target scale; None: learned. ``data``: the data's
    own noise (teacher data), divided by the targets' scale (1 for teacher data)."""
    if lik.noise == "learned":
        return None
    if lik.noise == "data":
        if ds.noise is None:
            raise ValueError("likelihood.noise 'data' needs data that know their noise (teacher)")
        return float(ds.noise) / float(ds.y_scale)
    return float(lik.noise)


#: Likelihood section class -> ``(section, ds) -> Likelihood`` (``ds`` a :class:`~zoo.data.Dataset`,
#: which gives the number of classes).
LIKELIHOODS: dict[type, Callable[[Any, Any], Likelihood]] = {
    CategoricalSection: lambda lik, ds: CategoricalLikelihood(ds.n_classes),
    BernoulliSection: lambda lik, ds: _bernoulli(ds),
    GaussianSection: lambda lik, ds: GaussianLikelihood(_noise(lik, ds), lik.noise_prior_scale),
}


def build_likelihood(section: Any, ds: Any) -> Likelihood:
    """The :class:`Likelihood` of a spec's ``likelihood`` section for data set ``ds``.

    Raises
    ------
    TypeError
        If no entry of :data:`LIKELIHOODS` is registered for the section's class.
    """
    make = registered(LIKELIHOODS, section, "likelihood", "zoo.models.likelihoods.LIKELIHOODS")
    return make(section, ds)
