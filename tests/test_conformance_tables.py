"""Every member of a spec union has its entry in the table that runs it.

The spec language (:mod:`zoo.spec.sections`) ends each domain with a discriminated union;
each domain package keeps a table keyed by section class. A new section without its table
entry fails here, by name, before any spec uses it:

==========================  ======================================
union                       table
==========================  ======================================
``DataSpec``                ``zoo.data.LOADERS``
``ModelSpec``               ``zoo.models.BUILDERS``
``PriorSpec``, bias priors  ``zoo.models.PRIORS``
``LikelihoodSpec``          ``zoo.models.LIKELIHOODS``
``InferenceSpec``           ``zoo.inference.METHODS``
``GuideSpec``               ``zoo.inference.guides.GUIDES``
``StudySpec``               ``zoo.studies.STUDIES``
``SimulationSpec``          ``zoo.studies.SIMULATIONS``
==========================  ======================================

Each data loader also loads a tiny data set of its kind here: consistent shapes, dtypes
and the task its section declares; each model builder builds a tiny network that is a
:class:`~zoo.models.base.BayesianNet` with consistent sites; each simulation runs a tiny
example end to end.
"""

from __future__ import annotations

import gzip
import importlib
import math
import pkgutil
import struct
from pathlib import Path
from types import SimpleNamespace
from typing import Any, get_args

import numpy as np
import pytest
import torch
from pydantic import BaseModel

import zoo.data
import zoo.models
import zoo.spec.sections
from tests import specs
from zoo.cli import main
from zoo.data import Dataset
from zoo.models.base import BayesianNet
from zoo.models.priors import prior_fn

#: union name -> (module of the table, table name).
TABLES: dict[str, tuple[str, str]] = {
    "DataSpec": ("zoo.data", "LOADERS"),
    "ModelSpec": ("zoo.models", "BUILDERS"),
    "PriorSpec": ("zoo.models", "PRIORS"),
    "BiasPriorSpec": ("zoo.models", "PRIORS"),
    "LikelihoodSpec": ("zoo.models", "LIKELIHOODS"),
    "InferenceSpec": ("zoo.inference", "METHODS"),
    "GuideSpec": ("zoo.inference.guides", "GUIDES"),
    "StudySpec": ("zoo.studies", "STUDIES"),
    "SimulationSpec": ("zoo.studies", "SIMULATIONS"),
}


def _union(name: str) -> Any:
    """The union ``name`` from the module of :mod:`zoo.spec.sections` that defines it."""
    for info in pkgutil.iter_modules(zoo.spec.sections.__path__):
        mod = importlib.import_module(f"zoo.spec.sections.{info.name}")
        if name in vars(mod):
            return vars(mod)[name]
    raise LookupError(f"no union {name} in zoo.spec.sections.*")


def _members(annotation: Any) -> list[type[BaseModel]]:
    """The section classes of a union (through Annotated and ``|``), in order."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    out: list[type[BaseModel]] = []
    for arg in get_args(annotation):
        out += [m for m in _members(arg) if m not in out]
    return out


def _cases() -> list[Any]:
    cases = []
    for union in TABLES:
        try:
            members = _members(_union(union))
        except LookupError:
            members = [None]  # the test says the union is missing
        for cls in members:
            label = f"{union}-{cls.__name__ if cls else 'missing'}"
            cases.append(pytest.param(union, cls, id=label))
    return cases


def _table(union: str) -> dict:
    module, name = TABLES[union]
    try:
        table = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as e:
        pytest.fail(f"{module}.{name}, the table of {union}, does not exist yet ({e})")
    assert isinstance(table, dict), f"{module}.{name} is not a dict keyed by section class"
    return table


@pytest.mark.parametrize(("union", "cls"), _cases())
def test_every_union_member_has_a_table_entry(union: str, cls: type | None) -> None:
    assert cls is not None, f"the union {union} is not in zoo.spec.sections.*"
    module, name = TABLES[union]
    assert cls in _table(union), (
        f"{cls.__module__}.{cls.__name__} is in {union} but has no entry in {module}.{name}"
    )


@pytest.mark.parametrize("union", sorted(TABLES))
def test_tables_are_keyed_by_union_members(union: str) -> None:
    """No stale entries: every key is a section class of the union(s) the table serves."""
    table = _table(union)
    module, name = TABLES[union]
    allowed = []
    for u, (m, n) in TABLES.items():
        if (m, n) == (module, name):
            allowed += _members(_union(u))
    stale = [k for k in table if k not in allowed]
    assert not stale, f"{module}.{name} has keys outside its union(s): {stale}"


# --------------------------------------------------------------------------- data loaders


def _write_idx(path: Path, arr: np.ndarray) -> None:
    header = struct.pack(">BBBB", 0, 0, 0x08, arr.ndim) + struct.pack(f">{arr.ndim}I", *arr.shape)
    with gzip.open(path.with_name(path.name + ".gz"), "wb") as fh:
        fh.write(header + arr.astype(np.uint8).tobytes())


def _idx_dir(tmp: Path) -> str:
    rng = np.random.default_rng(0)
    _write_idx(tmp / "train-images-idx3-ubyte", rng.integers(0, 256, (30, 4, 4)))
    _write_idx(tmp / "train-labels-idx1-ubyte", np.arange(30) % 10)
    _write_idx(tmp / "t10k-images-idx3-ubyte", rng.integers(0, 256, (12, 4, 4)))
    _write_idx(tmp / "t10k-labels-idx1-ubyte", np.arange(12) % 10)
    return str(tmp)


def _csv(tmp: Path) -> str:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, 3))
    lines = [f"{a},{b},{c},{int(a > 0)}" for a, b, c in x]
    (tmp / "d.csv").write_text("a,b,c,y\n" + "\n".join(lines) + "\n")
    return "d.csv"


#: A tiny section of each data kind, by its kind tag (a file-backed kind gets its files in
#: the test's tmp directory). A new data kind needs an entry here too.
TINY_DATA: dict[str, Any] = {
    "two_moons": lambda tmp: [{"n_train": 20, "n_test": 10}],
    "digits": lambda tmp: [{"test_fraction": 0.2}],
    "csv": lambda tmp: [
        {"path": _csv(tmp), "target": "y", "task": "classification"},
        {"path": _csv(tmp), "target": "c", "task": "regression"},
        {"path": _csv(tmp), "target": "c", "task": "regression", "split": 1},
    ],
    "uci": lambda tmp: [{"name": "concrete", "split": 2}],
    "teacher": lambda tmp: [{"n_train": 6, "n_test": 4, "width": 3}],
    "idx": lambda tmp: [{"dir": _idx_dir(tmp), "validation": 5, "n_train": 10}],
}


def _kind(cls: type[BaseModel]) -> Any:
    return get_args(cls.model_fields["kind"].annotation)[0]


def _check_dataset(ds: Any, section: Any) -> None:
    assert isinstance(ds, Dataset)
    n_tr, d = ds.x_train.shape
    assert n_tr > 0 and d > 0 and ds.x_test.shape[1] == d and len(ds.x_test) > 0
    assert ds.x_train.dtype == np.float32 and ds.x_test.dtype == np.float32
    assert ds.y_train.shape == (n_tr,) and ds.y_test.shape == (len(ds.x_test),)
    assert np.isfinite(ds.x_train).all() and np.isfinite(ds.x_test).all()
    assert ds.task == section.task, f"{type(section).__name__} declares {section.task}"
    if section.task == "classification":
        assert ds.n_classes >= 2 and ds.y_train.dtype == np.int64
        for y in (ds.y_train, ds.y_test):
            assert y.min() >= 0 and y.max() < ds.n_classes
    else:
        assert ds.n_classes == 0 and ds.y_train.dtype == np.float32 and ds.y_scale > 0
    assert (ds.x_val is None) == (ds.y_val is None)
    if ds.x_val is not None:
        assert ds.x_val.shape[1] == d and ds.y_val.shape == (len(ds.x_val),)
    if ds.true_params is not None:
        assert all(isinstance(v, np.ndarray) for v in ds.true_params.values())


@pytest.mark.parametrize("cls", _members(_union("DataSpec")), ids=lambda c: c.__name__)
def test_each_data_loader_loads_a_tiny_data_set(cls: type[BaseModel], tmp_path: Path) -> None:
    kind = _kind(cls)
    assert kind in TINY_DATA, f"add a tiny {kind!r} section to TINY_DATA in this file"
    for fields in TINY_DATA[kind](tmp_path):
        section = cls.model_validate({"kind": kind, **fields}, context={"base_dir": tmp_path})
        zoo.data.check(section)
        ds = zoo.data.load(section, 0)
        _check_dataset(ds, section)
        again = zoo.data.load(section, 0)  # seeded: the same arrays
        np.testing.assert_array_equal(ds.x_train, again.x_train)
        np.testing.assert_array_equal(ds.y_test, again.y_test)


# --------------------------------------------------------------------------- model builders

#: A tiny section of each model kind, with inputs it fits (4x4 images for lenet).
TINY_MODELS: dict[str, dict[str, Any]] = {
    "mlp": {"depth": 2, "width": 3},
    "lenet": {"conv": [2], "dense": 4, "pool": False},
}


@pytest.mark.parametrize("cls", _members(_union("ModelSpec")), ids=lambda c: c.__name__)
@pytest.mark.parametrize("task", ["classification", "regression"])
def test_each_model_builder_builds_a_bayesian_net(cls: type[BaseModel], task: str) -> None:
    kind = _kind(cls)
    assert kind in TINY_MODELS, f"add a tiny {kind!r} section to TINY_MODELS in this file"
    rng = np.random.default_rng(0)
    x = rng.normal(size=(8, 16)).astype(np.float32)
    y = np.arange(8) % 3 if task == "classification" else rng.normal(size=8)
    y = y.astype(np.int64 if task == "classification" else np.float32)
    ds = Dataset(x, y, x, y, 3 if task == "classification" else 0)
    lik_cls = next(c for c in _members(_union("LikelihoodSpec")) if c.task == task)
    spec = SimpleNamespace(
        model=cls.model_validate({"kind": kind, **TINY_MODELS[kind]}),
        prior=_members(_union("PriorSpec"))[0].model_validate({"kind": "normal"}),
        likelihood=lik_cls.model_validate({"kind": _kind(lik_cls)}),
    )
    net = zoo.models.build(spec, ds)
    assert isinstance(net, BayesianNet)
    assert net.dims[0] == 16 and net.likelihood.out_dim == ds.out_dim
    info = net.site_info()
    assert list(info) == [s for pair in net.layer_sites() for s in pair]
    assert set(info) == set(net.prior_params)
    assert net.num_params == sum(math.prod(shape) for shape, _ in info.values())
    params = {s: torch.zeros((2, *shape)) for s, (shape, _) in info.items()}
    if getattr(net.likelihood, "noise", 1.0) is None:  # a learned noise is a site too
        params["noise"] = torch.ones(2)
    ll = net.log_likelihood(torch.as_tensor(x), torch.as_tensor(y), params)
    assert ll.shape == (2, 8) and torch.isfinite(ll).all()


@pytest.mark.parametrize(
    "cls",
    _members(_union("PriorSpec")) + _members(_union("BiasPriorSpec")),
    ids=lambda c: c.__name__,
)
def test_each_prior_gives_a_normal_per_fan_in(cls: type[BaseModel]) -> None:
    fn = prior_fn(cls.model_validate({"kind": _kind(cls)}))
    for fan_in in (1, 7, 100):
        loc, scale = fn(fan_in)
        assert math.isfinite(loc) and scale > 0


# --------------------------------------------------------------------------- simulations

#: A tiny section of each simulation kind (seconds). A new simulation kind needs one here.
TINY_SIMULATIONS: dict[str, dict[str, Any]] = {
    "product_matrix": {"width": 2, "depths": [1, 2], "n_draws": 200},
    "gaussian": {
        "dims": [6],
        "condition": 10,
        "chains": 4,
        "groups": 2,
        "warmup": 50,
        "draws": 60,
        "null_reps": 2,
    },
    "ridge_target": {
        "chains": 4,
        "superchains": 2,
        "kl_groups": 2,
        "warmup": 20,
        "draws": 30,
        "short_draws": 10,
        "max_tree_depth": 4,
    },
    "permutation_target": {"seeds": 1, "chains": 4, "draws": 100, "groups": 2},
}


@pytest.mark.parametrize("cls", _members(_union("SimulationSpec")), ids=lambda c: c.__name__)
def test_each_simulation_runs_a_tiny_example(cls: type[BaseModel], tmp_path: Path) -> None:
    kind = _kind(cls)
    assert kind in TINY_SIMULATIONS, f"add a tiny {kind!r} section to TINY_SIMULATIONS"
    sim = specs.simulation(kind, "tiny", seed=0, **TINY_SIMULATIONS[kind])
    spec = specs.write_spec(tmp_path, sim, file="sim.yaml")
    assert main(["run", str(spec), "--out", str(tmp_path / "run"), "--no-progress"]) == 0
    assert (tmp_path / "run" / "results.csv").is_file()
    assert (tmp_path / "run" / "report.md").is_file()
