"""The ``chees`` sampler section: defaults, bounds, its own stopping rule, clear errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests import specs
from tests.zoo.spec._helpers import errors, write
from zoo.spec.sections.bounds import MAX_CHAINS, MAX_CHEES_CHAINS, MAX_DRAWS
from zoo.spec.sections.inference import ChEESMethod, NUTSMethod

#: The chees method's fields in the specs of these tests.
CHEES = {"init_from": "mfvi", "warmup": 5, "draws": 20, "chains": 16, "keep_draws": 10}


def _spec(studies=(), others=(), **chees) -> dict:
    """MF-VI and a small chees sampler (``chees`` adds to or replaces :data:`CHEES`)."""
    return specs.spec(
        data=specs.two_moons(n_train=50),
        model=specs.mlp(depth=1, width=4),
        inference=[specs.svi("mfvi", steps=5), specs.chees(**{**CHEES, **chees}), *others],
        studies=studies,
    )


#: :func:`_spec` as text, for the test whose messages may give the chees line (5 or 6).
BASE = """\
name: t
data: {kind: two_moons, n_train: 50}
model: {kind: mlp, depth: 1, width: 4}
inference:
  - {name: mfvi, kind: svi, guide: {kind: mean_field}, steps: 5}
  - {name: chees, kind: chees, init_from: mfvi, warmup: 5, draws: 20, chains: 16,
     keep_draws: 10CHEES}
studies: []
"""


def test_defaults_and_facts() -> None:
    m = ChEESMethod(name="c", kind="chees")
    assert (m.chains, m.target_accept, m.keep_draws, m.max_leapfrog) == (64, 0.651, 100, 1024)
    assert (m.init_spread, m.stream_groups, m.target_ess, m.max_draws) == (
        "posterior",
        8,
        None,
        None,
    )
    assert m.family == "sampler" and m.needs_samplable_model and not m.starts_samplers
    assert m.vectorize_chains and "vectorize_chains" not in ChEESMethod.model_fields
    assert m.draws_cap() == m.draws and m.stopping_rule == "target_ess"
    with_target = m.model_copy(update={"target_ess": 1000})
    assert with_target.draws_cap() == 4 * m.draws
    # every field says what it does
    assert all(f.description for f in ChEESMethod.model_fields.values())


def test_chees_spec_loads_with_its_fields(tmp_path: Path) -> None:
    fields = {"max_leapfrog": 64, "init_spread": "mode", "stream_groups": 4}
    spec = specs.load(tmp_path, _spec(target_ess=200, max_draws=60, **fields))
    m = spec.method("chees")
    assert (m.target_ess, m.max_draws, m.max_leapfrog, m.init_spread) == (200, 60, 64, "mode")
    assert m.draws_cap() == 60 and m.stream_groups == 4


def test_chains_bound_is_per_sampler(tmp_path: Path) -> None:
    assert MAX_CHEES_CHAINS == 8192 and MAX_CHAINS == 1024
    ChEESMethod(name="c", kind="chees", chains=8192, keep_draws=100)
    with pytest.raises(ValueError, match="less than or equal to 1024"):
        NUTSMethod(name="n", kind="nuts", chains=2048, draws=10)
    msgs = errors(specs.write_spec(tmp_path, _spec(chains=9000)))
    assert len(msgs) == 1 and "inference[1].chains" in msgs[0] and "8192" in msgs[0]


def test_kept_draws_bound_counts_kept_not_drawn(tmp_path: Path) -> None:
    # 8192 chains x 2000 drawn draws stream through; only keep_draws x chains are held
    ChEESMethod(name="c", kind="chees", chains=8192, draws=2000, keep_draws=100)
    msgs = errors(specs.write_spec(tmp_path, _spec(chains=8192, draws=500, keep_draws=200)))
    assert len(msgs) == 1, msgs
    assert f"keep_draws x chains = 1,638,400 kept draws; at most {MAX_DRAWS:,}" in msgs[0]
    assert "lower keep_draws or chains" in msgs[0]


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        (
            ", vectorize_chains: true",
            ["vectorize_chains", "always runs its chains as one batch", "remove the field"],
        ),
        (", max_draws: 60", ["max_draws applies only with target_ess", "set target_ess"]),
        (", target_ess: 50, max_draws: 15", ["max_draws (15) must be >= draws (20)"]),
        (
            ", init_spread: mode, init_from: prior",
            [
                "init_spread: mode with init_from: prior needs init_fits >= 2",
                "init_spread: posterior",
            ],
        ),
        (
            ", target_ess: 100000",
            ["target_ess (100,000) is more than chains x max_draws = 1,280", "lower target_ess"],
        ),
        (", max_leapfrog: 0", ["max_leapfrog", "greater than or equal to 1"]),
        (", target_accept: 1.5", ["target_accept", "less than 1"]),
        (", init_spread: median", ["init_spread", "'posterior' or 'mode'"]),
        (", stream_groups: 0", ["stream_groups", "greater than or equal to 1"]),
        (
            ", init_fits: 2, init_from: prior",
            ["init_fits: 2 with init_from: prior starts superchains", "init_spread: mode"],
        ),
        (", init_fits: 65", ["init_fits", "less than or equal to 64"]),
        (", init_fits: 20", ["init_fits (20) must be <= chains (16)"]),
        (", keep_draws: 30", ["keep_draws (30) must be <= draws (20)", "lower keep_draws"]),
    ],
)
def test_bad_chees_fields_name_the_field_and_the_fix(tmp_path: Path, extra: str, words) -> None:
    text = BASE.replace("CHEES", extra)
    if "init_from: prior" in extra:
        text = text.replace("init_from: mfvi, ", "")
    if "keep_draws: 30" in extra:
        text = text.replace("keep_draws: 10, ", "")
    msgs = errors(write(tmp_path, text))
    assert len(msgs) == 1, msgs
    assert "inference[1]" in msgs[0] or ":6:" in msgs[0] or ":5:" in msgs[0], msgs
    for w in words:
        assert w in msgs[0], msgs


def test_kl_target_draws_is_refused_for_chees(tmp_path: Path) -> None:
    study = specs.study(
        "price_of_mean_field", gaussian_fit={"cov": "empirical"}, kl_target_draws=500
    )
    msgs = errors(specs.write_spec(tmp_path, _spec(studies=[study])))
    assert len(msgs) == 1, msgs
    msg = msgs[0]
    assert "studies[0].kl_target_draws" in msg and "inference[1].target_ess" in msg, msg
    assert "target_ess: 500" in msg and "streamed moments" in msg
    # the study without the rule, and the method's own rule, are fine
    ok = [specs.study("price_of_mean_field")]
    specs.load(tmp_path, _spec(studies=ok, target_ess=100), file="ok.yaml")


def test_kl_target_draws_still_applies_to_other_samplers(tmp_path: Path) -> None:
    nuts = specs.nuts(warmup=5, draws=10, chains=2, vectorize_chains=True)
    studies = [
        specs.study(
            "price_of_mean_field",
            methods=["nuts"],
            gaussian_fit={"cov": "empirical"},
            kl_target_draws=50,
        ),
        specs.study("price_of_mean_field", methods=["chees"]),
    ]
    spec = specs.load(tmp_path, _spec(studies, [nuts]))
    assert [s.kl_target_draws for s in spec.studies] == [50, None]


def test_validate_exits_2_with_the_message(tmp_path: Path) -> None:
    p = specs.write_spec(tmp_path, _spec(max_draws=60))
    r = subprocess.run(
        [sys.executable, "-m", "zoo.cli", "validate", str(p)], capture_output=True, text=True
    )
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "max_draws applies only with target_ess" in r.stderr and str(p) in r.stderr
