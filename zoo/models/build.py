"""Spec -> network: :data:`BUILDERS` keyed by model section class, and :func:`build`.

A builder gets the model section, the data set (input size, classes) and the
:class:`NetParts` built from the spec's ``likelihood`` and ``prior`` sections, and returns a
:class:`~zoo.models.base.BayesianNet`.

Add a network family: its section in :mod:`zoo.spec.sections.models` (in the ``ModelSpec``
union), its class in a module of this package, a builder here and an entry in
:data:`BUILDERS`. ``tests/test_conformance_tables.py`` fails until the entry is there.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from zoo.data.dataset import Dataset
from zoo.models.base import BayesianNet
from zoo.models.lenet import BayesianLeNet
from zoo.models.likelihoods import Likelihood, build_likelihood
from zoo.models.mlp import BayesianMLP
from zoo.models.priors import PriorFn, prior_fns
from zoo.spec.base import registered
from zoo.spec.sections.models import LeNetModel, MLPModel

__all__ = [
    "BUILDERS",
    "NetParts",
    "build",
    "build_lenet",
    "build_mlp",
    "mlp_widths",
    "width_warnings",
]


class NetParts(NamedTuple):
    """The parts of a network that come from other spec sections than ``model``.

    Attributes
    ----------
    likelihood : Likelihood
        From the ``likelihood`` section (its ``out_dim`` is the network's output size).
    weight_prior : PriorFn
        From the ``prior`` section.
    bias_prior : PriorFn or None
        From ``prior.bias``; None: the weight prior.
    """

    likelihood: Likelihood
    weight_prior: PriorFn
    bias_prior: PriorFn | None


def mlp_widths(section: MLPModel, in_dim: int, out_dim: int) -> list[int]:
    """Hidden widths of an mlp section: ``width`` repeated, or the largest in the budget.

    The rule is the section's (:meth:`MLPModel.hidden_widths`), so ``zoo validate`` can
    compute the same widths without torch.

    Raises
    ------
    ValueError
        Naming ``model.param_budget`` if even width 1 does not fit (or the network exceeds
        the bounds of :mod:`zoo.spec.sections.bounds`).
    """
    return section.hidden_widths(in_dim, out_dim)


def _out_dim(cell: Any) -> int | None:
    """The likelihood's network outputs where they are not the classes (one logit)."""
    return getattr(cell.spec.likelihood, "out_dim", None)


def width_warnings(cell: Any, data_shape: tuple[int, int]) -> list[str]:
    """Warnings about a degenerate network of ``cell`` on data of ``data_shape``.

    A hidden layer narrower than 3 units or than the classes is a bottleneck no training
    removes (``param_budget: 100`` on digits gives width 1; depth 8 at a 100-parameter
    budget on two moons gives width 2); see :meth:`MLPModel.network_warnings`. Pure
    arithmetic on the spec: nothing is built.

    Parameters
    ----------
    cell : zoo.spec.Cell
        The cell (its ``spec.model`` and ``cell_id`` are used).
    data_shape : (int, int)
        ``(in_dim, n_classes)`` of the data set, ``n_classes`` 0 for regression
        (:attr:`Dataset.in_dim`, :attr:`Dataset.n_classes`).

    Returns
    -------
    list of str
        ``"cell <id>: <what is degenerate>; <what to change>"``, empty when nothing is.

    Raises
    ------
    ValueError
        If the network cannot be built at all (a parameter budget below width 1, images
        that shrink to nothing, more parameters than one machine holds); the message
        names the field.
    """
    in_dim, n_classes = data_shape
    return [
        f"cell {cell.cell_id}: {w}"
        for w in cell.spec.model.network_warnings(in_dim, n_classes, _out_dim(cell))
    ]


def build_mlp(section: MLPModel, ds: Dataset, parts: NetParts) -> BayesianMLP:
    """A :class:`BayesianMLP` of ``section`` for the inputs of ``ds``."""
    return BayesianMLP(
        ds.in_dim,
        mlp_widths(section, ds.in_dim, parts.likelihood.out_dim),
        parts.likelihood,
        act=section.activation,
        negative_slope=section.negative_slope,
        weight_prior=parts.weight_prior,
        bias_prior=parts.bias_prior,
    )


def build_lenet(section: LeNetModel, ds: Dataset, parts: NetParts) -> BayesianLeNet:
    """A :class:`BayesianLeNet` of ``section`` for the (square image) inputs of ``ds``."""
    return BayesianLeNet(
        ds.in_dim,
        parts.likelihood,
        channels=section.channels,
        conv=tuple(section.conv),
        dense=section.dense,
        kernel_size=section.kernel_size,
        padding=section.padding,
        pool=section.pool,
        weight_prior=parts.weight_prior,
        bias_prior=parts.bias_prior,
    )


#: Model section class -> builder ``(section, ds, parts) -> BayesianNet``.
BUILDERS: dict[type, Callable[[Any, Dataset, NetParts], BayesianNet]] = {
    MLPModel: build_mlp,
    LeNetModel: build_lenet,
}


def build(spec: Any, ds: Dataset) -> BayesianNet:
    """The Pyro model of a resolved spec (``spec.model``, ``.prior``, ``.likelihood``) for ``ds``.

    Raises
    ------
    TypeError
        If no builder is registered for the model section's class.
    ValueError
        If the model does not fit the data (e.g. a parameter budget too small, or lenet on
        inputs that are not square images); the message names the field.
    """
    builder = registered(BUILDERS, spec.model, "builder", "zoo.models.BUILDERS")
    likelihood = build_likelihood(spec.likelihood, ds)
    weight_prior, bias_prior = prior_fns(spec.prior)
    return builder(spec.model, ds, NetParts(likelihood, weight_prior, bias_prior))
