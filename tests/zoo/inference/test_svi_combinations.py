"""Every documented svi option with every likelihood: a combination that validates also runs.

The options come from the spec's schema itself: every field of the ``svi`` section and of
each guide section, at every value of a ``Literal`` or ``bool`` field and at the example
value of :data:`EXAMPLES` for a numeric one (a new field without an example fails
:func:`test_every_option_has_an_example` by name). Each option is set alone on top of a
minimal svi method, with each guide kind, against each likelihood (categorical, Bernoulli,
Gaussian with fixed, learned and the data's noise). A combination the spec loader accepts
must fit for one step and give finite test log-likelihoods; one it refuses is skipped (its
message is the loader's business).
"""

from __future__ import annotations

import math
import typing
from typing import Any

import pytest
import torch
import yaml

import zoo.data
import zoo.models
from zoo.inference import fit
from zoo.runtime import Runtime
from zoo.spec import SpecError, load_spec
from zoo.spec.base import kind_of, union_members
from zoo.spec.sections.inference import GuideSpec, SVIMethod

#: Data, model and likelihood of each likelihood kind (tiny data, a depth-1 width-3 MLP).
LIKELIHOODS = {
    "categorical": {
        "data": {"kind": "two_moons", "n_train": 12, "n_test": 6},
        "likelihood": {"kind": "categorical"},
    },
    "bernoulli": {
        "data": {"kind": "two_moons", "n_train": 12, "n_test": 6},
        "likelihood": {"kind": "bernoulli"},
    },
    "gaussian_fixed": {
        "data": {"kind": "teacher", "n_train": 12, "n_test": 6, "width": 3},
        "likelihood": {"kind": "gaussian", "noise": 0.2},
    },
    "gaussian_learned": {
        "data": {"kind": "teacher", "n_train": 12, "n_test": 6, "width": 3},
        "likelihood": {"kind": "gaussian", "noise": "learned"},
    },
    "gaussian_data": {
        "data": {"kind": "teacher", "n_train": 12, "n_test": 6, "width": 3},
        "likelihood": {"kind": "gaussian", "noise": "data"},
    },
}

#: A non-default value of every numeric option (Literal and bool options take every value).
EXAMPLES: dict[str, Any] = {
    "epochs": 1,
    "steps": 1,
    "batch_size": 5,
    "lr": 0.02,
    "lr_decay": 0.5,
    "betas": [0.9, 0.99],
    "kl_weight": 0.5,
    "scale_lr": 0.05,
    "kl_warmup_steps": 2,
    "kl_warmup_every": 2,
    "num_particles": 2,
    "pretrain_epochs": 1,
    "predictive_samples": 2,
    "init_scale": 0.1,
    "rank": 1,
    "scale": 0.1,
}

#: Fields that name a method rather than set it.
NOT_OPTIONS = {"name", "kind", "guide"}


def _values(name: str, field: Any) -> list[Any]:
    """The values of option ``name`` to try: all of a Literal or bool, else its example."""
    ann = field.annotation
    if ann is bool:
        return [not field.default]
    if typing.get_origin(ann) is typing.Literal:
        return [v for v in typing.get_args(ann) if v != field.default]
    return [EXAMPLES[name]] if name in EXAMPLES else []


def _options(method_guides: slice) -> list[tuple[str, dict, dict]]:
    """``(id, guide section, method fields)``: each guide kind bare and with each of its
    options set alone, and each method option set alone on the guide kinds ``method_guides``
    selects (in the spec's order)."""
    out = []
    guides = union_members(GuideSpec)
    for i, g in enumerate(guides):
        kind = kind_of(g)
        base = {"kind": kind, **({"scale": 0.1} if "scale" in g.model_fields else {})}
        out.append((f"{kind}", base, {}))
        for name, field in g.model_fields.items():
            if name != "kind":
                for v in _values(name, field):
                    out.append((f"{kind}-{name}={v}", {**base, name: v}, {}))
        if i not in range(len(guides))[method_guides]:
            continue
        for name, field in SVIMethod.model_fields.items():
            if name not in NOT_OPTIONS:
                for v in _values(name, field):
                    out.append((f"{kind}+{name}={v}", base, {name: v}))
    return out


#: Every guide kind and option; every method option on the first guide kind (mean_field).
OPTIONS = _options(slice(0, 1))
#: Every method option on each other guide kind (slow: the full cross).
MORE_OPTIONS = [o for o in _options(slice(1, None)) if o not in OPTIONS]


def test_every_option_has_an_example() -> None:
    sections = [SVIMethod, *union_members(GuideSpec)]
    missing = [
        f"{s.__name__}.{name}"
        for s in sections
        for name, field in s.model_fields.items()
        if name not in NOT_OPTIONS | {"kind"} and not _values(name, field)
    ]
    assert not missing, f"add an example value of {missing} to EXAMPLES"


@pytest.fixture(scope="module")
def spec_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("combinations")


def _params(options: list[tuple[str, dict, dict]], *marks) -> list:
    return [
        pytest.param(lik, guide, fields, id=f"{oid}-{lik}", marks=marks)
        for oid, guide, fields in options
        for lik in LIKELIHOODS
    ]


@pytest.mark.parametrize(
    ("lik", "guide", "fields"), _params(OPTIONS) + _params(MORE_OPTIONS, pytest.mark.slow)
)
def test_a_combination_that_validates_runs(spec_dir, lik, guide, fields) -> None:
    method = {"name": "m", "kind": "svi", "guide": guide, "steps": 1, "predictive_samples": 2}
    if "epochs" in fields:
        del method["steps"]
    method.update(fields)
    text = {
        "name": "combination",
        "seed": 1,
        **LIKELIHOODS[lik],
        "model": {"kind": "mlp", "depth": 1, "width": 3},
        "inference": [method],
        "studies": [],
    }
    path = spec_dir / f"{abs(hash((lik, repr(guide), repr(fields))))}.yaml"
    path.write_text(yaml.safe_dump(text))
    try:
        spec = load_spec(path)
    except SpecError:
        pytest.skip("the spec loader refuses this combination")
    rt = Runtime.cpu()
    ds = zoo.data.load(spec.data, spec.seed)
    model = zoo.models.build(spec, ds)
    data = ds.to_torch(rt)
    res = fit(spec.inference[0], model, data, seed=spec.seed, runtime=rt)
    draws = res.posterior.sample(2, seed=0)
    ll = model.log_likelihood(data.x_test, data.y_test, draws)
    assert ll.shape == (2, data.x_test.shape[0])
    assert torch.isfinite(ll).all() and math.isfinite(res.stats["neg_elbo"])
