"""Pyro models of the known-answer targets, for the zoo's samplers to be tested on.

:func:`ridge_model` is the target of :class:`reports.ridge_target.RidgeTarget` (bilinear
pairs on a hyperbola ridge and an independent correlated Gaussian block), whose exact
moments that class computes by quadrature; sampled by
:func:`zoo.inference.mcmc.user.sample_nuts` it is the control that the sampler recovers them
(``docs/notes/known_answers.md``).
"""

from __future__ import annotations

from collections.abc import Sequence

import pyro
import pyro.distributions as dist
import torch

__all__ = ["ridge_model"]


def ridge_model(
    y: torch.Tensor,
    noise_sd: float,
    prior_mean: Sequence[float],
    prior_sd: Sequence[float],
    block_mean: torch.Tensor,
    block_cov: torch.Tensor,
) -> None:
    r"""``K`` pairs :math:`a_k \sim \mathcal N(\mu_a, \sigma_a^2)`,
    :math:`b_k \sim \mathcal N(\mu_b, \sigma_b^2)`, :math:`y_k \sim \mathcal N(a_k b_k, s^2)`
    observed, and :math:`z \sim \mathcal N(m, S)` with no data.

    Sites ``a`` ``(K,)``, ``b`` ``(K,)``, ``z`` ``(G,)`` (float64 when the tensors are).
    """
    k = y.shape[-1]
    a = pyro.sample(
        "a", dist.Normal(y.new_tensor(prior_mean[0]), prior_sd[0]).expand([k]).to_event(1)
    )
    b = pyro.sample(
        "b", dist.Normal(y.new_tensor(prior_mean[1]), prior_sd[1]).expand([k]).to_event(1)
    )
    pyro.sample("z", dist.MultivariateNormal(block_mean, covariance_matrix=block_cov))
    pyro.sample("y", dist.Normal(a * b, noise_sd).to_event(1), obs=y)
