"""What a cell records of its fit: test-set metrics, the fit's own numbers, its ArviZ file.

:func:`evaluate_fit` draws the posterior predictive (``fit.predictive_draws`` draws, seed
``seed + 1``), computes the test metrics (:func:`evaluate`, through
:mod:`reports.calibration`), adds the fit's ``stats`` and then what the kind of posterior
calls for (:data:`OUTPUTS`, keyed by posterior class):

- a variational posterior stores its predictive draws as the cell's ArviZ file
  (``save_draws``);
- a point estimate has nothing more;
- a sampler's draws are the sampler's evaluation: convergence diagnostics of the stored
  posterior (worst r_hat with two or more chains, smallest bulk and tail ESS, which gates
  failed: :func:`reports.diagnostics.diagnostic_gates`), mean leapfrog steps, adapted step
  size, all draws as the ArviZ file and, when the chains started from a variational method,
  the agreement and total variation distance between its predictive distribution and the
  sampler's.

The ArviZ file (:func:`posterior_datatree`) holds the posterior, the pointwise test
log-likelihood, one posterior-predictive ``y`` per draw (seed ``seed + 2``), the observed
data and sampler statistics.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch

from reports.calibration import classification_metrics, regression_metrics
from reports.diagnostics import diagnostic_gates
from reports.predictive import predictive_agreement, predictive_tv
from zoo.data import Dataset, TorchData
from zoo.inference import Fit, PointPosterior, SampledPosterior, VIPosterior
from zoo.models.base import BayesianNet
from zoo.run.arviz_io import datatree_to_bytes, posterior_to_datatree
from zoo.runtime import Runtime
from zoo.studies.base import CellContext

__all__ = [
    "OUTPUTS",
    "cell_attrs",
    "evaluate",
    "evaluate_fit",
    "posterior_datatree",
    "predictive_probs",
]

Draws = Mapping[str, torch.Tensor]
Outputs = tuple[dict[str, Any], dict[str, bytes]]


def predictive_probs(model: BayesianNet, x: torch.Tensor, draws: Draws) -> np.ndarray:
    """Posterior predictive class probabilities at ``x``, (len(x), n_classes), float64."""
    with torch.no_grad():
        logp = model.likelihood.class_log_probs(model.apply(x, draws))
        return Runtime.numpy((torch.logsumexp(logp, 0) - np.log(logp.shape[0])).exp().double())


def evaluate(
    model: BayesianNet, ds: Dataset, x_test: torch.Tensor, draws: Draws, metrics: Any
) -> dict[str, float]:
    """Test-set metrics of the posterior predictive formed by ``draws`` (leading dim S).

    ``metrics`` is the spec's metrics section (``names``, ``ece_bins``).
    """
    with torch.no_grad():  # in chunks of inputs: (draws, n, width) activations can be large
        out = torch.cat([model.apply(xc, draws) for xc in x_test.split(2000)], -2)
    if ds.n_classes > 0:
        logp = Runtime.numpy(model.likelihood.class_log_probs(out)).astype(np.float64)
        res = classification_metrics(logp, ds.y_test, n_bins=metrics.ece_bins)
    else:
        noise = Runtime.numpy(draws["noise"])[:, None] if "noise" in draws else \
            model.likelihood.noise  # fmt: skip
        res = regression_metrics(
            Runtime.numpy(out.squeeze(-1)).astype(np.float64), noise,
            ds.y_test.astype(np.float64), y_scale=ds.y_scale, y_shift=ds.y_shift,
        )  # fmt: skip
    names = metrics.names or list(res)
    return {k: float(res[k]) for k in names if k in res}


def posterior_datatree(
    model: BayesianNet,
    ds: Dataset,
    data: TorchData,
    draws: Draws,
    *,
    chains: int,
    gen: torch.Generator,
    sample_stats: Mapping[str, np.ndarray] | None = None,
    attrs: Mapping[str, Any] | None = None,
):
    """The ArviZ DataTree of ``draws`` (leading dim chains x draws, chain-major).

    ``draws[site]`` has shape ``(chains * n, *site_shape)``. The test-set log-likelihood is
    pointwise per draw; the posterior predictive draws one ``y`` per weight draw from
    ``gen``.
    """
    x, y = data.x_test, data.y_test
    with torch.no_grad():
        out = model.apply(x, draws)
        loglik = model.likelihood.log_prob(out, y, draws)
        if ds.n_classes > 0:
            probs = model.likelihood.class_log_probs(out).exp()
            pp = torch.multinomial(probs.reshape(-1, probs.shape[-1]), 1, generator=gen)
            pp = pp.reshape(probs.shape[:-1])
        else:
            noise = draws["noise"][:, None] if "noise" in draws else model.likelihood.noise
            pp = out.squeeze(-1) + noise * torch.randn(out.shape[:-1], generator=gen,
                                                       dtype=out.dtype, device=out.device)  # fmt: skip

    def shaped(t: torch.Tensor) -> np.ndarray:
        a = Runtime.numpy(t)
        return a.reshape((chains, a.shape[0] // chains) + a.shape[1:])

    return posterior_to_datatree(
        {k: shaped(v) for k, v in draws.items()},
        sample_stats=sample_stats,
        log_likelihood=shaped(loglik),
        posterior_predictive=shaped(pp),
        observed=np.asarray(ds.y_test),
        attrs=attrs,
    )


def cell_attrs(cell: Any, ds: Dataset) -> dict[str, Any]:
    """Root attributes of a cell's ArviZ file: what produced it and the units of y."""
    return {
        "cell_id": cell.cell_id,
        "method": cell.method.name,
        "inference_kind": cell.method.kind,
        "settings": cell.method.model_dump(mode="json"),
        "axes": cell.axes,
        "y_units": "standardized: original = y * y_scale + y_shift"
        if ds.n_classes == 0
        else "class labels",
        "y_scale": float(ds.y_scale),
        "y_shift": float(ds.y_shift),
    }


def _archive(ctx: CellContext, draws: Draws, chains: int, sample_stats=None):
    return posterior_datatree(ctx.model, ctx.ds, ctx.data, draws, chains=chains,
                              gen=ctx.runtime.generator(ctx.seed + 2), sample_stats=sample_stats,
                              attrs=cell_attrs(ctx.cell, ctx.ds))  # fmt: skip


def _variational(ctx: CellContext, fit: Fit, draws: Draws) -> Outputs:
    """The predictive draws as the cell's ArviZ file (one chain), if ``save_draws``."""
    if not fit.save_draws:
        return {}, {}
    return {}, {".nc": datatree_to_bytes(_archive(ctx, draws, 1))}


def _point(ctx: CellContext, fit: Fit, draws: Draws) -> Outputs:
    return {}, {}


def _sampled(ctx: CellContext, fit: Fit, draws: Draws) -> Outputs:
    """Agreement with the starting method, diagnostics, and all draws as the ArviZ file."""
    out: dict[str, Any] = {}
    model, x_test, post = ctx.model, ctx.data.x_test, fit.posterior
    if fit.init is not None and ctx.ds.n_classes > 0:
        vi_draws = fit.init.posterior.sample(fit.predictive_draws, ctx.seed + 1)
        vi_probs = predictive_probs(model, x_test, vi_draws)
        probs = predictive_probs(model, x_test, draws)
        out["agreement_vi"] = predictive_agreement(vi_probs, probs)
        out["tv_vi"] = predictive_tv(vi_probs, probs)
    stats = fit.sample_stats
    dt = _archive(ctx, post.all(), post.chains, stats)
    gates = diagnostic_gates(dt)
    out.update(
        max_r_hat=gates.max_r_hat if gates.max_r_hat is not None else float("nan"),
        min_ess_bulk=gates.min_ess_bulk,
        min_ess_tail=gates.min_ess_tail,
        ess_bulk_q05=gates.ess_bulk_quantiles[0],
        ess_bulk_q50=gates.ess_bulk_quantiles[1],
        worst_ess_bulk=gates.worst_ess_bulk[0][0] if gates.worst_ess_bulk else "",
        mean_tree_steps=float(np.mean(stats["n_steps"])) if "n_steps" in stats else float("nan"),
        step_size=float(np.median(stats["step_size"])) if "step_size" in stats else float("nan"),
        gates_failed=",".join(gates.failed),
    )
    return out, {".nc": datatree_to_bytes(dt)}


#: Posterior class -> ``(ctx, fit, predictive draws) -> (metrics, artifacts)``: what a cell
#: records besides the predictive metrics and the fit's stats.
OUTPUTS: dict[type, Callable[[CellContext, Fit, Draws], Outputs]] = {
    VIPosterior: _variational,
    PointPosterior: _point,
    SampledPosterior: _sampled,
}


def evaluate_fit(ctx: CellContext, fit: Fit) -> Outputs:
    """The metrics and artifacts of a cell's fit (see the module docstring)."""
    draws = fit.posterior.sample(fit.predictive_draws, ctx.seed + 1)
    metrics = evaluate(ctx.model, ctx.ds, ctx.data.x_test, draws, ctx.cell.spec.metrics)
    metrics.update(fit.stats)
    metrics["fit_seconds"] = fit.seconds
    more, artifacts = OUTPUTS[type(fit.posterior)](ctx, fit, draws)
    metrics.update(more)
    return metrics, artifacts
