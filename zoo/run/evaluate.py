"""Test-set evaluation of posterior draws, and the ArviZ file of a cell.

:func:`evaluate` turns draws of the weights into predictive metrics (through
:mod:`reports.calibration`); :func:`posterior_datatree` stores the same draws as an ArviZ
DataTree (posterior, pointwise test log-likelihood, posterior predictive, observed data,
sampler statistics); :func:`datatree_bytes` gives its netCDF bytes, which the runner writes next to the
cell's record as ``cells/<cell id>.nc``.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from reports.calibration import classification_metrics, regression_metrics
from zoo.data import base as zdata
from zoo.models import mlp as zm
from zoo.spec.schema import MetricsSpec

__all__ = ["datatree_bytes", "evaluate", "posterior_datatree", "predictive_probs"]


def predictive_probs(
    model: zm.BayesianMLP, ds: zdata.Dataset, draws: Mapping[str, torch.Tensor]
) -> np.ndarray:
    """Posterior predictive class probabilities on the test set, (n_test, n_classes)."""
    x = torch.as_tensor(ds.x_test)
    with torch.no_grad():
        logp = torch.log_softmax(model.apply(x, draws), -1)
        return (torch.logsumexp(logp, 0) - np.log(logp.shape[0])).exp().double().numpy()


def evaluate(
    model: zm.BayesianMLP,
    ds: zdata.Dataset,
    draws: Mapping[str, torch.Tensor],
    metrics: MetricsSpec,
) -> dict[str, float]:
    """Test-set metrics of the posterior predictive formed by ``draws`` (leading dim S)."""
    x = torch.as_tensor(ds.x_test)
    with torch.no_grad():  # in chunks of inputs: (draws, n, width) activations can be large
        out = torch.cat([model.apply(xc, draws) for xc in x.split(2000)], -2)
    if ds.n_classes > 0:
        logp = torch.log_softmax(out, -1).numpy().astype(np.float64)
        res = classification_metrics(logp, ds.y_test, n_bins=metrics.ece_bins)
    else:
        noise = draws["noise"].numpy()[:, None] if "noise" in draws else model.likelihood.noise
        res = regression_metrics(
            out.squeeze(-1).numpy().astype(np.float64), noise, ds.y_test.astype(np.float64),
            y_scale=ds.y_scale, y_shift=ds.y_shift,
        )  # fmt: skip
    names = metrics.names or list(res)
    return {k: float(res[k]) for k in names if k in res}


def posterior_datatree(
    model: zm.BayesianMLP,
    ds: zdata.Dataset,
    draws: Mapping[str, torch.Tensor],
    *,
    chains: int,
    seed: int,
    sample_stats: Mapping[str, np.ndarray] | None = None,
    attrs: Mapping[str, Any] | None = None,
):
    """The ArviZ DataTree of ``draws`` (leading dim chains x draws, chain-major).

    ``draws[site]`` has shape ``(chains * n, *site_shape)``. The test-set log-likelihood is
    pointwise per draw; the posterior predictive draws one ``y`` per weight draw with a
    generator seeded by ``seed``.
    """
    from zoo.run.arviz_io import posterior_to_datatree

    x, y = torch.as_tensor(ds.x_test), torch.as_tensor(ds.y_test)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        out = model.apply(x, draws)
        loglik = model.likelihood.log_prob(out, y, draws)
        if ds.n_classes > 0:
            probs = torch.softmax(out, -1)
            pp = torch.multinomial(probs.reshape(-1, probs.shape[-1]), 1, generator=gen)
            pp = pp.reshape(probs.shape[:-1])
        else:
            noise = draws["noise"][:, None] if "noise" in draws else model.likelihood.noise
            pp = out.squeeze(-1) + noise * torch.randn(out.shape[:-1], generator=gen)

    def shaped(t: torch.Tensor) -> np.ndarray:
        a = t.detach().numpy()
        return a.reshape((chains, a.shape[0] // chains) + a.shape[1:])

    return posterior_to_datatree(
        {k: shaped(v) for k, v in draws.items()},
        sample_stats=sample_stats,
        log_likelihood=shaped(loglik),
        posterior_predictive=shaped(pp),
        observed=np.asarray(ds.y_test),
        attrs=attrs,
    )


def datatree_bytes(dt) -> bytes:
    """The netCDF bytes of ``dt`` (what :func:`zoo.run.arviz_io.save_datatree` writes)."""
    from zoo.run.arviz_io import save_datatree

    fd, tmp = tempfile.mkstemp(suffix=".nc")
    os.close(fd)
    try:
        save_datatree(dt, tmp)
        with open(tmp, "rb") as fh:
            return fh.read()
    finally:
        os.unlink(tmp)
