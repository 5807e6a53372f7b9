"""A Bayesian MLP as a Pyro model (a :class:`~zoo.models.base.BayesianNet`).

The network is a :class:`pyro.nn.PyroModule` whose weights and biases are
:class:`pyro.nn.PyroSample` sites named by layer: ``layer0.weight``, ``layer0.bias``, ...,
``layer{depth}.weight`` (the output layer). The likelihood (:mod:`zoo.models.likelihoods`)
adds the observation site ``obs`` (and a learned noise ``noise``); priors are in
:mod:`zoo.models.priors` (both re-exported here under their old names).

:meth:`BayesianMLP.apply` is the same network as a pure function of a dict of weights with
any leading batch shape (e.g. S posterior draws), used for vectorized prediction,
maximum-likelihood pretraining and, later, flat-vector potentials for HMC.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch
from pyro.nn import PyroModule
from torch import nn

from zoo.models.likelihoods import Likelihood
from zoo.models.priors import PriorFn, attach_normal_prior, normal_prior

__all__ = ["BayesianMLP", "activation"]


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
            attach_normal_prior(layer, "weight", wl, ws, (fo, fi))
            attach_normal_prior(layer, "bias", bl, bs, (fo,))
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

    def site_info(self) -> dict[str, tuple[tuple[int, ...], int]]:
        """``{site: (shape, fan_in)}`` of every weight and bias site, input to output."""
        out: dict[str, tuple[tuple[int, ...], int]] = {}
        for i, (fi, fo) in enumerate(zip(self.dims[:-1], self.dims[1:], strict=True)):
            out[f"layer{i}.weight"], out[f"layer{i}.bias"] = ((fo, fi), fi), ((fo,), fi)
        return out

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
