"""Bayesian MLPs as Pyro models: priors, likelihoods and the network.

The network is a :class:`pyro.nn.PyroModule` whose weights and biases are
:class:`pyro.nn.PyroSample` sites named by layer: ``layer0.weight``, ``layer0.bias``, ...,
``layer{depth}.weight`` (the output layer). A learned Gaussian noise is the site ``noise``;
observations are the site ``obs`` inside the plate ``data``, which supports minibatches:
pass ``n_total`` (the training-set size) and the likelihood is scaled by
``n_total / len(x)``.

:meth:`BayesianMLP.apply` is the same network as a pure function of a dict of weights with
any leading batch shape (e.g. S posterior draws), used for vectorized prediction,
maximum-likelihood pretraining and, later, flat-vector potentials for HMC.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import pyro
import pyro.distributions as dist
import torch
from pyro.nn import PyroModule, PyroSample
from torch import nn

__all__ = [
    "BayesianMLP",
    "CategoricalLikelihood",
    "GaussianLikelihood",
    "Likelihood",
    "PriorFn",
    "activation",
    "he_prior",
    "normal_prior",
]

#: A prior factory: fan_in -> (loc, scale) of an independent Normal.
PriorFn = Callable[[int], tuple[float, float]]


def normal_prior(scale: float) -> PriorFn:
    """N(0, scale^2) whatever the fan-in."""
    return lambda fan_in: (0.0, float(scale))


def he_prior() -> PriorFn:
    """He-scaled N(0, 2 / fan_in) (He et al. 2015)."""
    return lambda fan_in: (0.0, math.sqrt(2.0 / fan_in))


def activation(name: str, negative_slope: float = 0.01) -> Callable[[torch.Tensor], torch.Tensor]:
    """The hidden-layer nonlinearity ``name`` (relu, leaky_relu, tanh, linear)."""
    if name == "relu":
        return torch.relu
    if name == "leaky_relu":
        return lambda h: nn.functional.leaky_relu(h, negative_slope)
    if name == "tanh":
        return torch.tanh
    if name == "linear":
        return lambda h: h
    raise ValueError(f"unknown activation {name!r}; use relu, leaky_relu, tanh or linear")


class Likelihood:
    """Observation model: ``sample`` inside the data plate, ``log_prob`` as a pure function."""

    out_dim: int

    def sample(self, out: torch.Tensor, y: torch.Tensor | None, n_total: int) -> None:
        raise NotImplementedError

    def log_prob(
        self, out: torch.Tensor, y: torch.Tensor, params: Mapping[str, torch.Tensor]
    ) -> torch.Tensor:
        raise NotImplementedError


def _data_plate(n: int, n_total: int | None) -> pyro.plate:
    # The batch is already the subsample; `subsample` tells the plate which size it stands for
    # so the likelihood is scaled by n_total / n (no random indices are drawn).
    size = n if n_total is None else n_total
    return pyro.plate("data", size=size, subsample=torch.arange(n))


class CategoricalLikelihood(Likelihood):
    """y ~ Categorical(softmax(f(x)))."""

    def __init__(self, n_classes: int) -> None:
        self.out_dim = n_classes

    def sample(self, out, y, n_total):
        with _data_plate(out.shape[-2], n_total):
            pyro.sample("obs", dist.Categorical(logits=out), obs=y)

    def log_prob(self, out, y, params):
        return dist.Categorical(logits=out).log_prob(y)


class GaussianLikelihood(Likelihood):
    """y ~ N(f(x), noise^2); noise fixed, or the site ``noise`` ~ HalfNormal(prior_scale)."""

    def __init__(self, noise: float | None, prior_scale: float = 1.0) -> None:
        self.out_dim = 1
        self.noise = noise
        self.prior_scale = prior_scale

    def sample(self, out, y, n_total):
        if self.noise is None:
            noise = pyro.sample("noise", dist.HalfNormal(torch.tensor(self.prior_scale)))
        else:
            noise = torch.tensor(self.noise)
        with _data_plate(out.shape[-2], n_total):
            pyro.sample("obs", dist.Normal(out.squeeze(-1), noise), obs=y)

    def log_prob(self, out, y, params):
        noise = params["noise"] if self.noise is None else torch.tensor(self.noise)
        if noise.dim() > 0:
            noise = noise.reshape(noise.shape + (1,) * (out.dim() - 1 - noise.dim()))
        return dist.Normal(out.squeeze(-1), noise).log_prob(y)


class BayesianMLP(PyroModule):
    """An MLP with independent Normal priors on its weights and biases.

    Parameters
    ----------
    in_dim, out_dim : int
        Input and output sizes.
    widths : list of int
        Hidden-layer widths (empty for a linear model).
    act : str
        Activation name; ``negative_slope`` for leaky_relu.
    weight_prior, bias_prior : PriorFn
        fan_in -> (loc, scale).
    likelihood : Likelihood
    """

    def __init__(
        self,
        in_dim: int,
        widths: list[int],
        likelihood: Likelihood,
        *,
        act: str = "relu",
        negative_slope: float = 0.01,
        weight_prior: PriorFn | None = None,
        bias_prior: PriorFn | None = None,
    ) -> None:
        super().__init__()
        weight_prior = weight_prior or normal_prior(1.0)
        bias_prior = bias_prior or weight_prior
        self.dims = [in_dim, *widths, likelihood.out_dim]
        self.depth = len(widths)
        self.likelihood = likelihood
        self.act_name = act
        self._act = activation(act, negative_slope)
        self.prior_params: dict[str, tuple[float, float]] = {}
        for i, (fi, fo) in enumerate(zip(self.dims[:-1], self.dims[1:], strict=True)):
            layer = PyroModule[nn.Linear](fi, fo)
            wl, ws = weight_prior(fi)
            bl, bs = bias_prior(fi)
            layer.weight = PyroSample(dist.Normal(wl, ws).expand([fo, fi]).to_event(2))
            layer.bias = PyroSample(dist.Normal(bl, bs).expand([fo]).to_event(1))
            self.prior_params[f"layer{i}.weight"] = (wl, ws)
            self.prior_params[f"layer{i}.bias"] = (bl, bs)
            setattr(self, f"layer{i}", layer)

    @property
    def act(self) -> Callable[[torch.Tensor], torch.Tensor]:
        """The hidden-layer nonlinearity (a function of a tensor)."""
        return self._act

    @property
    def num_params(self) -> int:
        """Number of weights and biases."""
        return sum((fi + 1) * fo for fi, fo in zip(self.dims[:-1], self.dims[1:], strict=True))

    def layer_sites(self) -> list[tuple[str, str]]:
        """(weight site, bias site) per layer, input to output."""
        return [(f"layer{i}.weight", f"layer{i}.bias") for i in range(self.depth + 1)]

    def forward(
        self, x: torch.Tensor, y: torch.Tensor | None = None, n_total: int | None = None
    ) -> torch.Tensor:
        h = x
        for i in range(self.depth + 1):
            h = getattr(self, f"layer{i}")(h)
            if i < self.depth:
                h = self._act(h)
        self.likelihood.sample(h, y, n_total)
        return h

    def apply(self, x: torch.Tensor, params: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Network outputs for weights ``params`` with any leading batch shape.

        ``params["layer{i}.weight"]`` has shape ``batch + (out, in)``; the result has shape
        ``batch + (len(x), out_dim)``.
        """
        h = x
        for i, (w_site, b_site) in enumerate(self.layer_sites()):
            w, b = params[w_site], params[b_site]
            h = torch.matmul(h, w.transpose(-1, -2)) + b.unsqueeze(-2)
            if i < self.depth:
                h = self._act(h)
        return h

    def log_likelihood(
        self, x: torch.Tensor, y: torch.Tensor, params: Mapping[str, torch.Tensor]
    ) -> torch.Tensor:
        """Pointwise log p(y_n | x_n, params), shape ``batch + (len(x),)``."""
        return self.likelihood.log_prob(self.apply(x, params), y, params)
