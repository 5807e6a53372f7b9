"""Fully factorised (mean-field) Gaussian guide sampling from real Normal distributions."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import pyro
import pyro.distributions as dist
import torch
from pyro.distributions import constraints
from pyro.infer.autoguide.initialization import init_to_median
from torch.distributions.constraints import Constraint

from guides._loc_scale import LocScaleGuide
from guides._sites import LatentSite, check_init_scale

__all__ = ["AutoMeanField"]

_SCALE_CONSTRAINTS = {
    "softplus": constraints.softplus_positive,
    "exp": constraints.positive,
}


class AutoMeanField(LocScaleGuide):
    r"""Mean-field Gaussian guide over every latent site of any Pyro model.

    With :math:`w` the vector of all latent variables mapped to unconstrained space,

    .. math::

        q(w) = \prod_i \mathcal{N}(w_i \mid \mu_i, \sigma_i^2),
        \qquad \sigma_i = \operatorname{softplus}(\rho_i) = \log(1 + e^{\rho_i})

    (or :math:`\sigma_i = e^{\rho_i}` with ``scale_transform="exp"``), the
    "Bayes by Backprop" posterior of Blundell et al. (2015) and the diagonal
    Gaussian of Graves (2011). A site with a constrained support (e.g. a positive noise
    scale) is sampled from :math:`\mathcal{N}(\mu, \sigma^2)` in unconstrained space and
    pushed through ``biject_to(support)``; its density includes the Jacobian.

    Unlike :class:`~pyro.infer.autoguide.AutoNormal`, which samples a ``Delta`` and adds the
    density by hand, every site is sampled from a real distribution object:
    ``Normal(loc, scale).to_event(event_dim)`` for real-supported sites, and a
    ``TransformedDistribution`` of it otherwise. :class:`~pyro.infer.TraceMeanField_ELBO`
    therefore uses the closed-form :math:`\mathrm{KL}(q \,\|\, p)` whenever one is registered
    for the (guide, prior) pair, e.g. Normal/Normal (also wrapped in ``Independent``),
    Independent Normal/MultivariateNormal, and LogNormal-style priors (same bijection,
    KL of the base Normals). Other pairs (e.g. a HalfNormal prior) silently fall back to
    the single-sample Monte Carlo estimate :math:`\log q(w) - \log p(w)`.

    Parameters
    ----------
    model : callable
        A Pyro model. Sequential (non-vectorized) plates are not supported.
    init_loc_fn : callable, default ``init_to_median``
        Per-site initialisation of :math:`\mu` (in constrained space, then mapped to
        unconstrained space). The default, the median of 15 prior draws, gives weights
        small random means (about 0.3 prior standard deviations) that break the symmetry
        between hidden units, and stays finite for heavy-tailed priors. It differs on
        purpose from Pyro's ``AutoNormal``, whose default ``init_to_feasible`` puts every
        unconstrained mean at zero: all hidden units of a layer would then start equal
        (pass ``init_loc_fn=init_to_feasible`` for Pyro's behaviour). It is the default of
        Pyro's ``AutoContinuous`` guides (``AutoDiagonalNormal``,
        ``AutoMultivariateNormal``).
    init_scale : float, default 0.1
        Initial standard deviation :math:`\sigma` of every unconstrained coordinate.
    scale_transform : {"softplus", "exp"}, default "softplus"
        Map from the stored raw parameter :math:`\rho` to :math:`\sigma`.
    create_plates : callable, optional
        Takes the model's ``*args, **kwargs`` and returns the plate(s) to use instead of
        automatically created ones. Pass it to share minibatch indices with the model,
        which :class:`~pyro.infer.Predictive` needs for local latents of subsampled plates.

    Notes
    -----
    Every setting but ``model`` is keyword-only: Pyro's ``AutoNormal(model, init_loc_fn)``
    takes ``init_loc_fn`` second, while the guides of this package that have a second
    positional argument use it for their structure (``AutoKTiedNormal(model, rank)``,
    ``AutoMatrixNormal(model, row_cov, col_cov)``, ``AutoFullRankNormal(model, blocks)``,
    ``AutoFixedVarianceNormal(model, scale)``), so a function passed there is refused with
    a message. ``get_posterior()`` (Pyro's call, no argument or the model's arguments) is
    ``Normal(loc, scale).to_event(1)`` over the flat unconstrained latent, as for Pyro's
    ``AutoDiagonalNormal``; ``get_posterior(name)`` is one site's distribution.

    Parameters are created on the first call, which traces the model. They are
    registered as ``AutoMeanField.locs.<site>`` (:math:`\mu`) and
    ``AutoMeanField.scales.<site>`` (:math:`\sigma`; the param store and ``state_dict``
    hold the raw :math:`\rho`, as ``scales.<site>_unconstrained``). Local sites of a
    subsampled plate get parameters at full plate size, indexed by the minibatch in
    each call, as in ``AutoNormal``.

    To restore a saved ``state_dict`` into a new instance, first call the new guide once
    with the model's arguments (so the parameters exist), then ``load_state_dict``. All
    instances share the Pyro name ``AutoMeanField``: clear the param store
    (``pyro.clear_param_store()``) before setting up a second instance, or its first
    call picks up the first instance's parameters from the store.

    References
    ----------
    .. [1] C. Blundell, J. Cornebise, K. Kavukcuoglu and D. Wierstra, "Weight Uncertainty
       in Neural Networks", ICML 2015.
    .. [2] A. Graves, "Practical Variational Inference for Neural Networks", NeurIPS 2011.

    Examples
    --------
    >>> guide = AutoMeanField(model)  # doctest: +SKIP
    >>> svi = pyro.infer.SVI(model, guide, pyro.optim.Adam({"lr": 1e-2}),
    ...                      pyro.infer.TraceMeanField_ELBO())  # doctest: +SKIP
    """

    #: ``scales.<site>``: the standard deviations :math:`\sigma` (stored as :math:`\rho`).
    std_params: ClassVar[frozenset[str]] = frozenset({"scales"})

    def __init__(
        self,
        model: Callable[..., Any],
        *,
        init_loc_fn: Callable[[dict], torch.Tensor] = init_to_median,
        init_scale: float = 0.1,
        scale_transform: str = "softplus",
        create_plates: Callable[..., pyro.plate | Sequence[pyro.plate]] | None = None,
    ) -> None:
        self.init_scale = check_init_scale(init_scale)
        if scale_transform not in _SCALE_CONSTRAINTS:
            raise ValueError(
                f"scale_transform must be one of {sorted(_SCALE_CONSTRAINTS)}, "
                f"got {scale_transform!r}"
            )
        self.scale_transform = scale_transform
        super().__init__(model, init_loc_fn=init_loc_fn, create_plates=create_plates)

    @property
    def scale_constraint(self) -> Constraint:
        """Constraint of ``scales.<site>``: softplus or exp of the stored raw parameter."""
        return _SCALE_CONSTRAINTS[self.scale_transform]

    def _init_site_params(self, info: LatentSite, init_loc: torch.Tensor) -> None:
        self._init_loc(info, init_loc)
        self._init_scale(info, init_loc, self.scale_constraint)

    def _unconstrained_dist(self, info: LatentSite) -> dist.TorchDistribution:
        return self._mean_field_dist(info)

    def _unconstrained_loc_scale(self, info: LatentSite) -> tuple[torch.Tensor, torch.Tensor]:
        return self._get_loc_and_scale(info.name)
