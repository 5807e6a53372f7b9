"""Bayesian networks as Pyro models: the :class:`BayesianNet` protocol, its families, priors
and likelihoods, and the tables that build them from a spec.

Dependency rule: this package imports :mod:`zoo.spec` (section classes),
:mod:`zoo.data` (the :class:`~zoo.data.Dataset` type), torch and Pyro; nothing above.

Tables keyed by spec section class: :data:`BUILDERS` (model sections),
:data:`~zoo.models.priors.PRIORS` (prior and bias-prior sections) and
:data:`~zoo.models.likelihoods.LIKELIHOODS` (likelihood sections). :func:`build` uses all
three.
"""

from __future__ import annotations

from zoo.models.base import BayesianNet, SiteInfo
from zoo.models.build import BUILDERS, NetParts, build, width_warnings
from zoo.models.lenet import BayesianLeNet
from zoo.models.likelihoods import (
    LIKELIHOODS,
    BernoulliLikelihood,
    CategoricalLikelihood,
    GaussianLikelihood,
    Likelihood,
    build_likelihood,
)
from zoo.models.mlp import BayesianMLP
from zoo.models.priors import PRIORS, PriorFn, he_prior, normal_prior, prior_fns

__all__ = [
    "BUILDERS",
    "LIKELIHOODS",
    "PRIORS",
    "BayesianLeNet",
    "BayesianMLP",
    "BayesianNet",
    "BernoulliLikelihood",
    "CategoricalLikelihood",
    "GaussianLikelihood",
    "Likelihood",
    "NetParts",
    "PriorFn",
    "SiteInfo",
    "build",
    "build_likelihood",
    "he_prior",
    "normal_prior",
    "prior_fns",
    "width_warnings",
]
