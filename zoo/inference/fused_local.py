r"""Local reparameterization and a learned Gaussian noise in the fused SVI step.

Two pieces of :class:`~zoo.inference.fused_svi.FusedMeanFieldStep`, each computing what
Pyro's ``SVI.step`` computes for it with the same tensor operations in the same order, so
that draws, loss and gradients stay equal to the bit.

**Local reparameterization** (Kingma, Salimans & Welling 2015;
:class:`guides.local_reparam.LocalReparameterization`). A layer whose weight entries are
independent Gaussians :math:`W_{ji} \sim \mathcal{N}(M_{ji}, S_{ji}^2)` samples its
pre-activations instead of its weights,

.. math::

    b = x M^\top + \beta + \sqrt{\max(x^{\circ 2} (S^{\circ 2})^\top, \text{tiny})} \circ
    \varepsilon, \qquad \varepsilon_{nj} \sim \mathcal{N}(0, 1),

with :math:`\beta` the sampled bias: :func:`guides.local_reparam.sample_linear`, the
function the Pyro path's ``F.linear`` calls. Pyro's path still draws every weight in the
guide (the draws are not used, but they advance torch's generator), then draws
:math:`\varepsilon` layer by layer in the model; the fused step draws the same numbers
in the same order.

**A learned noise** (:class:`~zoo.models.likelihoods.GaussianLikelihood` with ``noise=None``):
the model's site ``noise`` has the prior :math:`\mathrm{HalfNormal}(s_0)`; the guide samples
it as :math:`\sigma = e^{z}`, :math:`z \sim \mathcal{N}(\mu, \tau^2)` (its support is
positive, so the guide pushes its Normal through ``exp``). No KL between the two is
registered, so ``TraceMeanField_ELBO`` adds the one-sample estimate
:math:`\beta\,[\log p(\sigma) - \log q(\sigma)]` with
:math:`\log q(\sigma) = \log \mathcal{N}(z \mid \mu, \tau^2) - z` (the Jacobian of ``exp``)
and :math:`\beta` the KL weight: :class:`NoiseSite`.
"""

from __future__ import annotations

from typing import NamedTuple

import pyro.distributions as dist
import torch

__all__ = ["NoiseDraw", "NoiseSite"]


class NoiseDraw(NamedTuple):
    """One draw of the noise site: the unconstrained ``z``, ``sigma = exp(z)``, q's params."""

    z: torch.Tensor
    sigma: torch.Tensor
    loc: torch.Tensor
    scale: torch.Tensor


class NoiseSite:
    """The learned-noise site ``noise`` of a Gaussian likelihood, as Pyro's step treats it.

    Parameters
    ----------
    prior_scale : torch.Tensor
        :math:`s_0`, the scale of the model's ``HalfNormal`` prior (a 0-dim tensor on the
        model's device, as the model makes it).
    """

    def __init__(self, prior_scale: torch.Tensor) -> None:
        self.prior = dist.HalfNormal(prior_scale)

    @staticmethod
    def draw(loc: torch.Tensor, scale: torch.Tensor) -> NoiseDraw:
        """The guide's draw: ``Normal(loc, scale).rsample()`` pushed through ``exp``."""
        z = dist.Normal(loc, scale).rsample()
        return NoiseDraw(z, z.exp(), loc, scale)

    def log_prior(self, d: NoiseDraw, weight: float) -> torch.Tensor:
        """The model's ``log_prob_sum`` of the site: the prior's log-density, times ``weight``."""
        lp = self.prior.log_prob(d.sigma)
        return (lp * weight if weight != 1.0 else lp).sum()

    @staticmethod
    def log_q(d: NoiseDraw, weight: float) -> torch.Tensor:
        """The guide's entropy term: ``log q(sigma)`` (Jacobian of ``exp`` first, as
        ``TransformedDistribution.log_prob`` adds it; then the Normal's log-density of the
        cached ``z``), times ``weight``, summed."""
        lq = (0.0 - d.z) + dist.Normal(d.loc, d.scale).log_prob(d.z)
        return (lq * weight if weight != 1.0 else lq).sum()
