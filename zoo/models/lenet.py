"""A Bayesian LeNet-style CNN as a Pyro model (a :class:`~zoo.models.base.BayesianNet`).

Two 3x3 convolutions (32 and 64 filters by default), each followed by ReLU and an
optional 2x2 max-pool, a dense hidden layer (512 units) and the output layer: the LeNet of
Swiatkowski et al. (2020, D.1). Sites are ``layer0.weight`` (conv kernel ``(out, in, kh,
kw)``), ``layer0.bias``, ``layer1.*`` (second conv), ``layer2.*`` (dense), ``layer3.*``
(output). The flat input ``(n, channels * side * side)`` is viewed as square images.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch
from pyro.nn import PyroModule
from torch import nn
from torch.nn import functional as F

from zoo.models.likelihoods import Likelihood
from zoo.models.priors import PriorFn, attach_normal_prior, normal_prior

__all__ = ["BayesianLeNet", "image_side"]


def image_side(in_dim: int, channels: int) -> int:
    """Side of the square images of ``in_dim = channels * side**2`` inputs.

    Raises
    ------
    ValueError
        If the inputs are not square images with ``channels`` channels.
    """
    side = math.isqrt(in_dim // channels) if in_dim % channels == 0 else 0
    if side * side * channels != in_dim:
        raise ValueError(
            f"model.channels: {in_dim} inputs are not square images with {channels} "
            "channel(s); lenet needs image data (e.g. data.kind idx or digits)"
        )
    return side


class BayesianLeNet(PyroModule):
    """LeNet with independent Normal priors on every kernel, weight and bias.

    Parameters
    ----------
    in_dim : int
        Number of inputs, ``channels * side**2``.
    likelihood : Likelihood
    channels : int
        Input channels.
    conv : list of int
        Filters of the convolutions (3x3 kernels by default).
    dense : int
        Units of the dense hidden layer.
    kernel_size, padding : int
        Convolution geometry.
    pool : bool
        2x2 max-pool after each convolution.
    weight_prior, bias_prior : PriorFn
        fan_in -> (loc, scale); a kernel's fan-in is ``in_channels * kh * kw``
        (He et al. 2015, as in Swiatkowski et al. 2020, Appendix B).
    """

    def __init__(
        self,
        in_dim: int,
        likelihood: Likelihood,
        *,
        channels: int = 1,
        conv: tuple[int, ...] = (32, 64),
        dense: int = 512,
        kernel_size: int = 3,
        padding: int = 0,
        pool: bool = True,
        weight_prior: PriorFn | None = None,
        bias_prior: PriorFn | None = None,
    ) -> None:
        super().__init__()
        weight_prior = weight_prior or normal_prior(1.0)
        bias_prior = bias_prior or weight_prior
        self.channels, self.side = channels, image_side(in_dim, channels)
        self.kernel_size, self.padding, self.pool = kernel_size, padding, pool
        self.likelihood = likelihood
        self.act_name = "relu"
        self.n_conv = len(conv)
        side, c_in = self.side, channels
        self.shapes: dict[str, tuple[tuple[int, ...], int]] = {}
        for c_out in conv:
            self.shapes[f"layer{len(self.shapes)}"] = (
                (c_out, c_in, kernel_size, kernel_size),
                c_in * kernel_size**2,
            )
            side = side + 2 * padding - kernel_size + 1
            side = side // 2 if pool else side
            if side < 1:
                raise ValueError(
                    f"model: {self.side}x{self.side} images shrink to nothing after "
                    f"{len(self.shapes)} convolution(s); use padding 1 or pool: false"
                )
            c_in = c_out
        flat = c_in * side * side
        for fi, fo in ((flat, dense), (dense, likelihood.out_dim)):
            self.shapes[f"layer{len(self.shapes)}"] = ((fo, fi), fi)
        self.dims = [in_dim, dense, likelihood.out_dim]  # run_cell reports dims[1] as width
        self.depth = len(self.shapes) - 1
        self.prior_params: dict[str, tuple[float, float]] = {}
        for name, (shape, fan_in) in self.shapes.items():
            layer = PyroModule[nn.Module]()
            wl, ws = weight_prior(fan_in)
            bl, bs = bias_prior(fan_in)
            attach_normal_prior(layer, "weight", wl, ws, shape)
            attach_normal_prior(layer, "bias", bl, bs, (shape[0],))
            self.prior_params[f"{name}.weight"] = (wl, ws)
            self.prior_params[f"{name}.bias"] = (bl, bs)
            setattr(self, name, layer)

    @property
    def act(self):
        """The hidden-layer nonlinearity."""
        return torch.relu

    @property
    def num_params(self) -> int:
        """Number of kernel entries, weights and biases."""
        return sum(math.prod(s) + s[0] for s, _ in self.shapes.values())

    def layer_sites(self) -> list[tuple[str, str]]:
        """(weight site, bias site) per layer, input to output."""
        return [(f"{n}.weight", f"{n}.bias") for n in self.shapes]

    def site_info(self) -> dict[str, tuple[tuple[int, ...], int]]:
        """``{site: (shape, fan_in)}`` of every weight and bias site."""
        out = {}
        for name, (shape, fan_in) in self.shapes.items():
            out[f"{name}.weight"] = (shape, fan_in)
            out[f"{name}.bias"] = ((shape[0],), fan_in)
        return out

    def _net(self, x: torch.Tensor, params: Mapping[str, torch.Tensor]) -> torch.Tensor:
        h = x.reshape(len(x), self.channels, self.side, self.side)
        for i, (w_site, b_site) in enumerate(self.layer_sites()):
            w, b = params[w_site], params[b_site]
            if i < self.n_conv:
                h = F.conv2d(h, w, b, padding=self.padding)
                h = torch.relu(h)
                h = F.max_pool2d(h, 2) if self.pool else h
                if i == self.n_conv - 1:
                    h = h.flatten(1)
            else:
                h = h @ w.T + b
                if i < self.depth:
                    h = torch.relu(h)
        return h

    def forward(
        self, x: torch.Tensor, y: torch.Tensor | None = None, n_total: int | None = None
    ) -> torch.Tensor:
        params = {}
        for w_site, b_site in self.layer_sites():
            layer = getattr(self, w_site.split(".")[0])
            params[w_site], params[b_site] = layer.weight, layer.bias
        h = self._net(x, params)
        self.likelihood.sample(h, y, n_total)
        return h

    def apply(
        self, x: torch.Tensor, params: Mapping[str, torch.Tensor], chunk: int = 2048
    ) -> torch.Tensor:
        """Network outputs for weights ``params`` with any leading batch shape.

        ``params["layer0.weight"]`` has shape ``batch + (out, in, kh, kw)``; the result has
        shape ``batch + (len(x), out_dim)``. Draws are run one after the other, inputs in
        chunks of ``chunk`` (convolutions of many draws at once do not fit in memory).
        """
        first = params[self.layer_sites()[0][0]]
        batch = first.shape[: first.dim() - 4]
        flat = {k: v.reshape((-1,) + v.shape[len(batch) :]) for k, v in params.items()}
        outs = []
        for s in range(math.prod(batch)):
            p = {k: v[s] for k, v in flat.items()}
            outs.append(torch.cat([self._net(xc, p) for xc in x.split(chunk)]))
        return torch.stack(outs).reshape(batch + (len(x), -1))

    def log_likelihood(
        self, x: torch.Tensor, y: torch.Tensor, params: Mapping[str, torch.Tensor]
    ) -> torch.Tensor:
        """Pointwise log p(y_n | x_n, params), shape ``batch + (len(x),)``."""
        return self.likelihood.log_prob(self.apply(x, params), y, params)
