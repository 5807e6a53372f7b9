"""What the rest of the zoo asks of a network: the :class:`BayesianNet` protocol.

Inference, studies and evaluation use a network only through these members, so a new
family (a class in its own module plus an entry in :data:`zoo.models.BUILDERS`) works with
every guide, sampler and study that its sites allow.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol, runtime_checkable

import torch

from zoo.models.likelihoods import Likelihood

__all__ = ["BayesianNet", "SiteInfo"]

#: ``{site: (shape, fan_in)}`` of every weight and bias site, input to output.
SiteInfo = dict[str, tuple[tuple[int, ...], int]]


@runtime_checkable
class BayesianNet(Protocol):
    """A Bayesian network as a Pyro model with independent Normal priors per site.

    Calling it, ``net(x, y=None, n_total=None)``, runs the Pyro model: it samples every
    weight and bias site, then the likelihood's sites (``obs`` in the plate ``data``,
    scaled by ``n_total / len(x)``), and returns the network outputs.

    Attributes
    ----------
    dims : list of int
        ``[in_dim, hidden sizes..., out_dim]``; ``dims[1]`` is the reported width.
    depth : int
        Number of hidden layers (the output layer is ``layer{depth}``).
    likelihood : Likelihood
        The observation model.
    act_name : str
        Name of the hidden nonlinearity (``"linear"`` makes the product-matrix study apply).
    prior_params : dict of str to (float, float)
        ``(loc, scale)`` of the Normal prior of each site.
    """

    dims: list[int]
    depth: int
    likelihood: Likelihood
    act_name: str
    prior_params: dict[str, tuple[float, float]]

    def __call__(
        self, x: torch.Tensor, y: torch.Tensor | None = None, n_total: int | None = None
    ) -> torch.Tensor: ...

    @property
    def act(self) -> Callable[[torch.Tensor], torch.Tensor]:
        """The hidden nonlinearity as a function of a tensor."""
        ...

    @property
    def num_params(self) -> int:
        """Number of weights and biases (all sites but the likelihood's)."""
        ...

    def layer_sites(self) -> list[tuple[str, str]]:
        """``(weight site, bias site)`` per layer, input to output."""
        ...

    def site_info(self) -> SiteInfo:
        """``{site: (shape, fan_in)}`` of every weight and bias site, input to output."""
        ...

    def apply(self, x: torch.Tensor, params: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Outputs for weights ``params`` with leading batch shape: ``batch + (len(x), out)``."""
        ...

    def log_likelihood(
        self, x: torch.Tensor, y: torch.Tensor, params: Mapping[str, torch.Tensor]
    ) -> torch.Tensor:
        """Pointwise ``log p(y_n | x_n, params)``, shape ``batch + (len(x),)``."""
        ...
