"""docs/guides.md: its BNN example runs verbatim, and the guides refuse what its table says
they do not support, each with a message that names the case."""

from __future__ import annotations

import re
from pathlib import Path

import pyro
import pyro.distributions as dist
import pytest
import torch
import xarray as xr

from guides import AutoFixedVarianceNormal, AutoFullRankNormal

PAGE = Path(__file__).resolve().parents[1] / "docs" / "guides.md"


def test_the_bnn_example_runs_verbatim(tmp_path: Path, monkeypatch, capsys) -> None:
    (code,) = re.findall(r"```python\n(.*?)```", PAGE.read_text(), flags=re.S)
    monkeypatch.chdir(tmp_path)
    ns: dict = {}
    exec(compile(code, str(PAGE), "exec"), ns)
    rmse = float(((ns["mean"] - ns["y"]) ** 2).mean().sqrt())
    assert rmse < 0.3  # the noise sd is 0.1; sin(2x) alone has sd ~0.7
    # the page states what the code prints (within 0.01: another CPU may round otherwise)
    printed = capsys.readouterr().out
    stated = re.search(
        r"What it prints[^`]*`train RMSE ([\d.]+), mean predictive sd ([\d.]+)`", PAGE.read_text()
    )
    got = re.search(r"train RMSE ([\d.]+), mean predictive sd ([\d.]+)", printed)
    assert stated is not None and got is not None, printed
    for said, was in zip(stated.groups(), got.groups(), strict=True):
        assert abs(float(said) - float(was)) <= 0.01, (stated.group(0), printed)
    assert ns["check"].khat > 0.7  # what the page says to expect of mean field here
    tree = xr.open_datatree(tmp_path / "bnn_mean_field.nc")
    assert {"posterior", "posterior_predictive", "observed_data"} <= set(tree.children)
    assert tree["posterior"]["hidden.weight"].shape == (1, 200, 16, 1)


def _empty(x):
    pyro.sample("y", dist.Normal(0.0, 1.0), obs=x)


def _subsampled(x):
    w = pyro.sample("w", dist.Normal(0.0, 1.0))
    with pyro.plate("data", 100, subsample_size=10):
        pyro.sample("z", dist.Normal(w, 1.0))


def _two_sites(x):
    pyro.sample("a", dist.Normal(0.0, 1.0))
    pyro.sample("b", dist.Normal(0.0, 1.0))


@pytest.mark.parametrize(
    ("guide", "model", "says"),
    [
        (lambda m: AutoFullRankNormal(m, blocks="global"), _empty, "found no latent variables"),
        (
            lambda m: AutoFullRankNormal(m, blocks="global"),
            _subsampled,
            "subsampled plate",
        ),
        (lambda m: AutoFixedVarianceNormal(m, scale={"a": 0.1}), _two_sites, "missing ['b']"),
    ],
)
def test_the_unsupported_cases_say_what_they_are(guide, model, says) -> None:
    pyro.clear_param_store()
    with pytest.raises((ValueError, RuntimeError)) as e:
        guide(model)(torch.zeros(3))
    assert says in str(e.value)


def test_the_page_says_rank_plots_raise_on_one_chain_beside_the_r_hat_caveat() -> None:
    text = " ".join(PAGE.read_text().split())
    caveat = text.index("R-hat and ESS of one chain")
    assert "rank plots raise" in text[caveat : caveat + 700]
    assert "VI cell" in text[caveat : caveat + 700]
