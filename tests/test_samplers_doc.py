"""docs/samplers.md's example runs as written: the zoo's NUTS and ChEES on a user's own Pyro
model and PyroModule network, an ArviZ DataTree out, the conjugate posterior recovered."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "samplers.md"


def test_the_documented_example_runs_verbatim_and_recovers_the_posterior(capsys) -> None:
    (code,) = re.findall(r"```python\n(.*?)```", PAGE.read_text(), flags=re.S)
    ns: dict = {}
    exec(compile(code, str(PAGE), "exec"), ns)
    # the regression's exact posterior: (w, b) ~ N(m, S), S = (I + X'X / s^2)^-1, known s
    x, y = ns["x"].double(), ns["y"].double()
    design = torch.cat([x, torch.ones(len(x), 1, dtype=x.dtype)], 1)
    cov = torch.linalg.inv(torch.eye(4, dtype=x.dtype) + design.T @ design / 0.25)
    mean = (cov @ design.T @ y / 0.25).numpy()
    sd = cov.diagonal().sqrt().numpy()
    for name in ("tree", "chees_tree"):
        tree = ns[name]
        assert {"posterior", "sample_stats"} <= set(tree.children)
        post = tree["posterior"]
        draws = np.concatenate(
            [post["w"].values.reshape(-1, 3), post["b"].values.reshape(-1, 1)], 1
        )
        # within 0.25 posterior sd of the exact mean (MC error at these ESS: ~0.05 sd), and
        # the right spread
        np.testing.assert_array_less(np.abs(draws.mean(0) - mean), 0.25 * sd)
        np.testing.assert_allclose(draws.std(0), sd, rtol=0.25)
        assert not tree["sample_stats"]["diverging"].values.any()
    assert tree.attrs["sampler"] == "chees" and ns["tree"].attrs["sampler"] == "nuts"
    assert float(ns["rhat"](ns["tree"], var_names=["w", "b"])["w"].max()) < 1.05
    bnn = ns["bnn_tree"]["posterior"]
    assert set(bnn.data_vars) == {"hidden.weight", "hidden.bias", "out.weight", "out.bias", "sigma"}
    assert bnn["hidden.weight"].shape == (4, 30, 5, 1)
    # a layer's unit axes named as the zoo's cells name them, shared by weight and bias
    assert bnn["hidden.weight"].dims == ("chain", "draw", "hidden_out", "hidden_in")
    assert bnn["hidden.bias"].dims == ("chain", "draw", "hidden_out")
    assert bnn["out.weight"].dims[-1] == "out_in" and bnn.sizes["out_in"] == 5
    assert (bnn["sigma"].values > 0).all()  # constrained back from its log
    assert "divergences" in capsys.readouterr().out
