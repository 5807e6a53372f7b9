"""Posterior draws -> ArviZ :class:`xarray.DataTree`, and compact netCDF bytes to and from it.

A cell's posterior is stored as one DataTree that follows ArviZ's schema, so that
arviz-stats works on it directly: ``ess``, ``rhat`` and ``summary`` on the posterior, and
``loo``, ``waic``, ``compare`` and ``loo_pit`` on the data the posterior was fitted to.

Groups
------
``posterior``
    One variable per site, ``(chain, draw, ...)``, Pyro site names (dots kept).
``sample_stats``
    Sampler statistics, ``(chain, draw)`` (samplers only). NUTS: ``lp``, ``step_size``,
    ``energy``, ``n_steps``, ``tree_depth``, ``reached_max_treedepth`` (the cap cut the
    trajectory; ArviZ 1.x's ``diagnose`` counts it), ``diverging``, ``acceptance_rate``; HMC:
    the same without the tree's two.
``log_likelihood``
    ``y``: ``(chain, draw, obs_id)``, the pointwise log p(y_i | x_i, draw) of the TRAINING
    points the posterior was fitted to: what PSIS-LOO needs.
``posterior_predictive``
    ``y``: ``(chain, draw, obs_id, ...)``, one replicated training target per draw.
``observed_data``
    ``y``: ``(obs_id, ...)``, the training targets.
``constant_data``
    ``x``: ``(obs_id, x_dim_1, ...)``, the training inputs (left out above
    :data:`MAX_INPUT_VALUES` values).
``predictions``
    ``y``: ``(chain, draw, test_id, ...)``, one predictive draw per posterior draw at the
    held-out TEST inputs.
``predictions_constant_data``
    ``x``: ``(test_id, x_dim_1, ...)`` and ``y``: ``(test_id, ...)``, the test inputs and
    the test targets the predictions are scored against.
``log_likelihood_test``
    ``y``: ``(chain, draw, test_id)``, the pointwise log p(y*_j | x*_j, draw) of the TEST
    points. Not an ArviZ group (ArviZ's schema has none for held-out log-likelihoods);
    nothing in arviz-stats reads it, so ``loo``, ``waic`` and ``compare`` never see
    held-out data.

The training and test observation dimensions have different names (``obs_id``,
``test_id``), so xarray never matches point ``i`` of one set with point ``i`` of the
other. :func:`~zoo.execution.heldout.heldout_lpd` sums the test-set log predictive density,
``sum_j log mean_s p(y*_j | x*_j, theta_s)``: the held-out counterpart of what
``arviz_stats.loo(dt)`` estimates for the training points by leave-one-out.

Draws
-----
Sampler posteriors have ``(chain, draw)`` sample dimensions. A variational posterior is
``S`` independent draws from the guide, stored as one chain ``(1, S)``: arviz-base's
``from_numpyro_svi`` uses a single ``sample`` dimension instead, but arviz-stats 0.8's
``loo`` requires ``chain`` and ``draw``, so the root attribute ``draws_kind`` says which
kind a file holds: ``"mcmc"`` (autocorrelated, several chains) or
``"independent guide draws"`` (i.i.d. from the variational approximation q; with one chain
``loo`` uses relative efficiency 1, and the LOO estimate is that of q's predictive; a
correction to the exact posterior, ``arviz_stats.loo_approximate_posterior``, would need
log p and log q per draw, which are not stored).

Attributes
----------
The root holds ``inference_library`` and ``inference_library_version`` (as arviz-base's
converters set them: ``"pyro"`` for variational fits, ``"bnn-zoo"`` for this package's own
samplers), ``draws_kind``, and the method name and settings; every group repeats the
inference library attributes, as ``from_numpyro`` does. netCDF attributes must be strings,
numbers or 1-D arrays, so any other value (dicts, lists, booleans, ``None``) is stored as a
JSON string and its key listed in the root attribute ``json_attrs``; :func:`datatree_attrs`
decodes them again.

Naming
------
Variables keep the Pyro site names, dots included (``layer1.weight``): netCDF-4 through
h5netcdf accepts them and they round-trip unchanged (tested). Dimensions are named per
layer so that the unit axes line up across sites:

- ``layer{i}.weight`` of shape ``(out, in)``: ``("layer{i}_out", "layer{i}_in")``;
- ``layer{i}.bias`` of shape ``(out,)``: ``("layer{i}_out",)``;
- any other site: ``("{site}_dim_0", "{site}_dim_1", ...)``;
- data variables: ``("obs_id" or "test_id", "{name}_dim_1", ...)``.

Storage
-------
Posterior draws and sampler statistics keep their dtype (the numbers the cell's metrics
were computed from), except that integer statistics take the smallest signed integer type
that holds them. Log-likelihoods, inputs and real-valued targets and predictive draws are
float32; class labels (observed and predicted) are int8 up to 128 classes, int16 up to
32768. :func:`~zoo.execution.netcdf.datatree_to_bytes` compresses every variable of 16 KiB or
more (zlib level 4 with the shuffle filter, h5netcdf engine). The training log-likelihood is
kept whole (``draws x n_train`` float32 values, 4 bytes each before compression), since
PSIS-LOO needs every draw of every point; the inputs (``constant_data``,
``predictions_constant_data``) are left out above :data:`MAX_INPUT_VALUES` values (root
attribute ``constant_data_note`` says so), because an image data set would repeat tens of MB
of pixels in every cell.

Files: a cell hands its tree over as netCDF bytes
(:func:`~zoo.execution.netcdf.datatree_to_bytes`) and the run store writes them
(``cells/<cell id>.nc``); :func:`~zoo.execution.netcdf.load_datatree` reads one back.

Modules: this one builds the tree (:func:`posterior_to_datatree`) and decodes its
attributes; :mod:`zoo.execution.arviz_groups` checks the shapes and picks the storage dtypes of
the arrays; :mod:`zoo.execution.netcdf` turns a tree into bytes and back;
:mod:`zoo.execution.heldout` scores the test set.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import numpy as np
import xarray as xr
from arviz_base import dict_to_dataset

from zoo.execution.arviz_groups import ObservationSet, check_sample_shape, compact, label_dtype
from zoo.execution.heldout import HeldOut, heldout_lpd
from zoo.execution.netcdf import datatree_from_bytes, datatree_to_bytes, load_datatree
from zoo.models.dims import site_dims

#: The tree's files, held-out score and label dtype are re-exported: this module is the
#: face of a cell's ArviZ file.
__all__ = [
    "DRAWS_GUIDE",
    "DRAWS_KINDS",
    "DRAWS_MCMC",
    "MAX_INPUT_VALUES",
    "SAMPLE_STATS",
    "HeldOut",
    "datatree_attrs",
    "datatree_from_bytes",
    "datatree_to_bytes",
    "heldout_lpd",
    "label_dtype",
    "load_datatree",
    "posterior_to_datatree",
    "site_dims",
]

#: Sample-stat names of arviz-base's NumPyro converter, which the samplers use.
SAMPLE_STATS = (
    "lp",
    "step_size",
    "n_steps",
    "tree_depth",
    "reached_max_treedepth",
    "diverging",
    "energy",
    "acceptance_rate",
)
#: ``draws_kind`` of a sampler's draws.
DRAWS_MCMC = "mcmc"
#: ``draws_kind`` of a variational posterior's draws.
DRAWS_GUIDE = "independent guide draws"
DRAWS_KINDS = (DRAWS_MCMC, DRAWS_GUIDE)
#: Inputs with more values than this are left out of ``constant_data`` (4 MiB of float32).
MAX_INPUT_VALUES = 2**20
JSON_ATTRS_KEY = "json_attrs"
TRAIN_DIM = "obs_id"
TEST_DIM = "test_id"
SAMPLE_DIMS = ["chain", "draw"]
_LIBRARY_KEYS = ("inference_library", "inference_library_version")
_RESERVED_ATTRS = (JSON_ATTRS_KEY, "draws_kind", *_LIBRARY_KEYS)


def _encode_attrs(attrs: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    encoded = []
    for key, value in attrs.items():
        if not isinstance(key, str):
            raise TypeError(f"attribute keys must be strings, got {key!r}")
        if key in _RESERVED_ATTRS:
            raise ValueError(f"attribute name {key!r} is reserved")
        if isinstance(value, np.generic):
            value = value.item()
        if isinstance(value, str | int | float) and not isinstance(value, bool):
            out[key] = value
        else:
            try:
                out[key] = json.dumps(value, sort_keys=True)
            except TypeError as err:
                raise TypeError(f"attribute {key!r} is not JSON-serializable: {err}") from err
            encoded.append(key)
    if encoded:
        out[JSON_ATTRS_KEY] = json.dumps(encoded)
    return out


def datatree_attrs(dt: xr.DataTree) -> dict[str, Any]:
    """Root attributes of a DataTree with JSON-encoded values decoded again.

    Parameters
    ----------
    dt : xarray.DataTree
        A tree from :func:`posterior_to_datatree` or :func:`load_datatree`.

    Returns
    -------
    dict
        The ``attrs`` passed to :func:`posterior_to_datatree`, plus ``draws_kind`` and
        the inference library attributes where they were given.
    """
    attrs = dict(dt.attrs)
    encoded = json.loads(attrs.pop(JSON_ATTRS_KEY, "[]"))
    return {k: json.loads(v) if k in encoded else v for k, v in attrs.items()}


def posterior_to_datatree(
    draws: Mapping[str, np.ndarray],
    *,
    sample_stats: Mapping[str, np.ndarray] | None = None,
    log_likelihood: np.ndarray | None = None,
    posterior_predictive: np.ndarray | None = None,
    observed: np.ndarray | None = None,
    constant_data: Mapping[str, np.ndarray] | None = None,
    predictions: np.ndarray | None = None,
    log_likelihood_test: np.ndarray | None = None,
    predictions_constant_data: Mapping[str, np.ndarray] | None = None,
    n_classes: int = 0,
    draws_kind: str | None = None,
    inference_library: str | None = None,
    inference_library_version: str | None = None,
    attrs: Mapping[str, Any] | None = None,
) -> xr.DataTree:
    """Build the ArviZ DataTree of one posterior (groups as in the module docstring).

    Parameters
    ----------
    draws : mapping of str to np.ndarray
        Site name -> draws of shape ``(chain, draw, *site_shape)``. Variational posteriors
        are ``S`` guide draws with one chain, ``(1, S, ...)``.
    sample_stats : mapping of str to np.ndarray, optional
        Sampler statistics of shape ``(chain, draw)``, named as in :data:`SAMPLE_STATS`
        (``diverging`` boolean). Other names are stored too.
    log_likelihood, posterior_predictive : np.ndarray, optional
        Pointwise log-likelihood of the TRAINING points, ``(chain, draw, n_train)``, and
        replicated training targets, ``(chain, draw, n_train, ...)``.
    observed, constant_data : np.ndarray, mapping of str to np.ndarray, optional
        Training targets, ``(n_train, ...)`` (``observed_data`` variable ``y``), and
        training inputs by name (``{"x": x_train}``), each ``(n_train, ...)``.
    predictions, log_likelihood_test : np.ndarray, optional
        Predictive draws at the TEST inputs, ``(chain, draw, n_test, ...)``, and the
        pointwise log-likelihood of the TEST points, ``(chain, draw, n_test)``.
    predictions_constant_data : mapping of str to np.ndarray, optional
        Test inputs and targets by name (``{"x": x_test, "y": y_test}``), each
        ``(n_test, ...)``; ``y`` is stored as targets (labels when ``n_classes``).
    n_classes : int
        Number of classes; targets and predictive draws are then class labels stored in
        :func:`label_dtype`. 0 (regression): they are real and stored as float32.
    draws_kind : {"mcmc", "independent guide draws"}, optional
        Root attribute ``draws_kind``; guide draws must be one chain.
    inference_library, inference_library_version : str, optional
        Root and group attributes, as arviz-base's converters set them.
    attrs : mapping of str to any, optional
        Method name and settings, stored on the root (see :func:`datatree_attrs`).

    Returns
    -------
    xarray.DataTree
        Groups for every argument given; ``posterior`` always.

    Raises
    ------
    ValueError
        If ``draws`` is empty, any array disagrees with the posterior's ``(chain, draw)``
        shape, the groups of one set disagree on its number of points or events, a target
        is not a class label, or ``draws_kind`` is unknown.
    """
    shape, groups, dims = _posterior_group(draws, draws_kind)
    if sample_stats:
        groups["sample_stats"] = _sample_stats_group(sample_stats, shape)
    train, test = ObservationSet("train", TRAIN_DIM, shape), ObservationSet("test", TEST_DIM, shape)
    groups |= _observation_groups(
        train,
        test,
        n_classes,
        log_likelihood=log_likelihood,
        posterior_predictive=posterior_predictive,
        observed=observed,
        constant_data=constant_data,
        predictions=predictions,
        log_likelihood_test=log_likelihood_test,
        predictions_constant_data=predictions_constant_data,
    )
    versions = (inference_library, inference_library_version)
    return _tree_with_attrs(groups, dims, train, test, versions, draws_kind, attrs)


def _tree_with_attrs(groups, dims, train, test, versions, draws_kind, attrs) -> xr.DataTree:
    """The tree of ``groups`` with its root's attributes: the inference library and its
    version where given, the draws' kind, and the caller's ``attrs`` encoded."""
    library = {k: v for k, v in zip(_LIBRARY_KEYS, versions, strict=True) if v is not None}
    dt = _datatree(groups, dims, train, test, library)
    dt.attrs = {
        **library,
        **({} if draws_kind is None else {"draws_kind": draws_kind}),
        **_encode_attrs(attrs or {}),
    }
    return dt


#: The groups of the training points; the other observation groups are the test points'.
_TRAIN_GROUPS = ("log_likelihood", "posterior_predictive", "observed_data", "constant_data")
#: The groups of the test points.
_TEST_GROUPS = ("predictions", "log_likelihood_test", "predictions_constant_data")
#: The groups that hold no draws (no chain and draw dimensions).
_CONSTANT_GROUPS = ("observed_data", "constant_data", "predictions_constant_data")


def _posterior_group(
    draws: Mapping[str, np.ndarray], draws_kind: str | None
) -> tuple[tuple[int, int], dict[str, dict[str, np.ndarray]], dict[str, dict[str, list[str]]]]:
    """The posterior's ``(chain, draw)`` shape, its group's arrays and their dims.

    Raises
    ------
    ValueError
        ``draws`` is empty, its sites disagree on ``(chain, draw)``, ``draws_kind`` is
        unknown, or guide draws are not one chain.
    """
    if not draws:
        raise ValueError("draws is empty: a posterior needs at least one site")
    shape = None
    groups: dict[str, dict[str, np.ndarray]] = {"posterior": {}}
    dims: dict[str, dict[str, list[str]]] = {"posterior": {}}
    for name, value in draws.items():
        arr, shape = check_sample_shape("posterior", name, value, shape, 2)
        groups["posterior"][name] = arr
        dims["posterior"][name] = site_dims(name, arr.ndim - 2)
    assert shape is not None
    if draws_kind is not None and draws_kind not in DRAWS_KINDS:
        raise ValueError(f"draws_kind {draws_kind!r}: use one of {list(DRAWS_KINDS)}")
    if draws_kind == DRAWS_GUIDE and shape[0] != 1:
        raise ValueError(f"independent guide draws are stored as one chain, got {shape[0]}")
    return shape, groups, dims


def _sample_stats_group(
    sample_stats: Mapping[str, np.ndarray], shape: tuple[int, int]
) -> dict[str, np.ndarray]:
    """The sampler statistics, each ``(chain, draw)`` (integers in their smallest type)."""
    stats = {}
    for name, value in sample_stats.items():
        arr, _ = check_sample_shape("sample_stats", name, value, shape, 2)
        if arr.ndim != 2:
            raise ValueError(f"sample_stats {name!r} must be (chain, draw), got {arr.shape}")
        stats[name] = compact(arr) if arr.dtype.kind in "iu" else arr
    return stats


def _observation_groups(
    train: ObservationSet,
    test: ObservationSet,
    n_classes: int,
    *,
    log_likelihood: np.ndarray | None,
    posterior_predictive: np.ndarray | None,
    observed: np.ndarray | None,
    constant_data: Mapping[str, np.ndarray] | None,
    predictions: np.ndarray | None,
    log_likelihood_test: np.ndarray | None,
    predictions_constant_data: Mapping[str, np.ndarray] | None,
) -> dict[str, dict[str, np.ndarray]]:
    """The groups of the training and test points given (see
    :func:`posterior_to_datatree`), each checked against its set's number of points."""
    groups: dict[str, dict[str, np.ndarray]] = {}
    if log_likelihood is not None:
        groups["log_likelihood"] = {"y": train.loglik("log_likelihood", log_likelihood)}
    if posterior_predictive is not None:
        pp = train.draws("posterior_predictive", posterior_predictive, n_classes)
        groups["posterior_predictive"] = {"y": pp}
    if observed is not None:
        groups["observed_data"] = {"y": train.targets("observed_data", observed, n_classes)}
    if constant_data:
        groups["constant_data"] = train.inputs("constant_data", constant_data)
    if predictions is not None:
        groups["predictions"] = {"y": test.draws("predictions", predictions, n_classes)}
    if log_likelihood_test is not None:
        groups["log_likelihood_test"] = {
            "y": test.loglik("log_likelihood_test", log_likelihood_test)
        }
    if predictions_constant_data:
        pcd = dict(predictions_constant_data)
        y = pcd.pop("y", None)
        group = "predictions_constant_data"
        groups[group] = test.inputs(group, pcd)
        if y is not None:
            groups[group]["y"] = test.targets(group, y, n_classes)
    train.check()
    test.check()
    return groups


def _datatree(
    groups: Mapping[str, dict[str, np.ndarray]],
    dims: dict[str, dict[str, list[str]]],
    train: ObservationSet,
    test: ObservationSet,
    library: dict[str, str],
) -> xr.DataTree:
    """One dataset per group (with the inference library's attributes), the observation
    groups' dims named by their set of points, in one DataTree."""
    if "y" in groups["posterior"]:
        raise ValueError("a posterior site may not be named 'y' (reserved for the targets)")
    nodes = {}
    for group, data in groups.items():
        sampled = group not in _CONSTANT_GROUPS
        if group in _TRAIN_GROUPS + _TEST_GROUPS:
            points = train if group in _TRAIN_GROUPS else test
            dims[group] = {name: points.dims(name, arr, sampled) for name, arr in data.items()}
        nodes[group] = dict_to_dataset(
            data,
            attrs=library or None,
            dims=dims.get(group, {}),
            sample_dims=SAMPLE_DIMS if sampled else [],
            # every dim is named here; its check warns whenever chains > draws, the normal
            # shape of a many-chain sampler's kept draws (ChEES: 1024 chains x 100 draws)
            check_conventions=False,
        )
    return xr.DataTree.from_dict(nodes)
