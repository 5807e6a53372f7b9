"""Pyro guides for Bayesian neural networks, usable in any Pyro model.

Every guide is a Pyro AutoGuide: ``guide = AutoKTiedNormal(model, rank=2)`` then
``SVI(model, guide, optim, TraceMeanField_ELBO())``. Weight sites are sampled from real
distribution objects (:class:`KTiedNormal`, :class:`MatrixNormal`, Normal, ...), so
closed-form KL divergences and local reparameterization apply. This package never
imports ``zoo``.

Every guide declares the containers of its standard-deviation parameters
(``AutoMeanField.std_params == {"scales"}``); :func:`is_std_param` and
:func:`std_param_names` answer for any guide, and ``guide.loc_scale(site)`` gives the
marginal location and standard deviation of q at a site (unconstrained space).

The guides follow Pyro's conventions (``median(*args)``, ``quantiles(qs, *args)``,
``get_posterior()`` for the joint of the flat unconstrained latent, ``create_plates``),
and differ from Pyro's autoguides on purpose in two places: the default ``init_loc_fn``
is ``init_to_median`` (the default of Pyro's ``AutoContinuous`` guides; Pyro's
``AutoNormal`` uses ``init_to_feasible``, which starts every weight of a layer at zero),
and the second positional argument, where there is one, is structural (``rank``,
``row_cov``, ``blocks``, ``scale``), not ``init_loc_fn``: pass that by keyword.

Two checks of a fitted guide, for any Pyro model and guide (:mod:`guides.checks`, Yao et al.
2018): :func:`psis_khat`, the Pareto k-hat of log p(theta, y) - log q(theta) (below 0.7, q
is close enough to the posterior for importance sampling to correct it), and :func:`vsbc`,
variational simulation-based calibration (refits on data simulated from the prior).
"""

from guides.checks import PSISResult, VSBCResult, psis_khat, vsbc
from guides.distributions import KTiedNormal, MatrixNormal
from guides.fixed_variance import AutoFixedVarianceNormal
from guides.full_rank import AutoFullRankNormal
from guides.jit import JitTraceMeanField_ELBO
from guides.k_tied import AutoKTiedNormal
from guides.local_reparam import LocalReparameterization
from guides.matrix_normal import AutoMatrixNormal
from guides.mean_field import AutoMeanField
from guides.params import is_std_param, std_param_containers, std_param_names

__all__ = [
    "AutoFixedVarianceNormal",
    "AutoFullRankNormal",
    "AutoKTiedNormal",
    "AutoMatrixNormal",
    "AutoMeanField",
    "JitTraceMeanField_ELBO",
    "KTiedNormal",
    "LocalReparameterization",
    "MatrixNormal",
    "PSISResult",
    "VSBCResult",
    "is_std_param",
    "psis_khat",
    "std_param_containers",
    "std_param_names",
    "vsbc",
]
