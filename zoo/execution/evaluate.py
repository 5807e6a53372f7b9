"""What a cell records of its fit: test-set metrics, the fit's own numbers, its ArviZ file.

:func:`evaluate_fit` draws the posterior predictive (``fit.predictive_draws`` draws, stream
:attr:`~zoo.seeds.Stream.PREDICTIVE`), computes the test metrics (:func:`evaluate`, through
:mod:`reports.calibration`), adds the fit's ``stats`` and then what the kind of posterior
calls for (:data:`OUTPUTS`, keyed by posterior class):

- a variational posterior records ``psis_khat``, the Pareto k-hat of log p(w, y) - log q(w)
  over :data:`PSIS_DRAWS` draws of its guide on the training set (stream
  :attr:`~zoo.seeds.Stream.PSIS`; :func:`guides.checks.psis_khat`: below 0.7 q is close
  enough to the posterior for importance sampling to correct it), and stores its
  predictive draws as the cell's ArviZ file (``save_draws``);
- a point estimate has nothing more;
- a sampler's draws are the sampler's evaluation: convergence diagnostics of the stored
  posterior (worst r_hat with two or more chains, smallest bulk and tail ESS, which gates
  failed: :func:`reports.diagnostics.diagnostic_gates` with the method's own
  ``max_tree_depth``; for NUTS ``n_max_tree_depth``, the transitions that reached it), mean
  leapfrog steps, adapted step size, the same diagnostics of the predictive class
  probabilities at the test points (:func:`chain_probs`; of a regression network's output,
  the mean of y, :func:`chain_means`;
  :func:`reports.predictive.predictive_convergence`: ``max_r_hat_pred``,
  ``min_ess_bulk_pred``, ...), all draws as the ArviZ file and, when the chains
  started from a variational method, the agreement and total variation distance between
  its predictive distribution and the sampler's. With superchains (ChEES's ``init_fits``
  blocks, :attr:`~zoo.inference.SampledPosterior.superchain_ids`) also the nested R-hat of
  the weights and of the predictions (``rhat_nested``, ``rhat_nested_pred``; None with one
  superchain: it does not apply), the fractions of divergent and of saturated
  transitions (the saturated ones, ``trajectory_cap`` and ``trajectory_at_cap`` as every
  sampler's fit measured them): the gates of the
  cell's ``reference_grade`` (:func:`grade_record`, applied by
  :func:`zoo.execution.cell.run_cell` once the studies have added theirs).

A metric that does not apply to a cell is None (JSON null, blank in results.csv): r_hat
with one chain, tree statistics a sampler does not record. NaN always means a numerical
failure (a sampler that never moved, say), and the run marks the cell for it.

The ArviZ file (:func:`posterior_datatree`, schema in :mod:`zoo.execution.arviz_io`) holds the
posterior and sampler statistics; for the TRAINING points the posterior was fitted to, the
pointwise log-likelihood (``log_likelihood``, what ``arviz_stats.loo`` reads), one
replicated target per draw (``posterior_predictive``), the targets (``observed_data``) and
the inputs (``constant_data``); for the held-out TEST points, one predictive draw per
posterior draw (``predictions``), the inputs and targets (``predictions_constant_data``)
and the pointwise log-likelihood (``log_likelihood_test``). The predictive draws use the stream
:attr:`~zoo.seeds.Stream.POSTERIOR_PREDICTIVE` (test points first, then training points).
Root attributes say which library fitted the posterior (``pyro`` for variational fits, ``bnn-zoo`` for its own samplers) and
what the draws are (``draws_kind``).
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pyro
import torch

from guides.checks import psis_khat
from reports.calibration import classification_metrics, regression_metrics
from reports.diagnostics import diagnostic_gates
from reports.grade import reference_grade
from reports.predictive import predictive_agreement, predictive_convergence, predictive_tv
from reports.superchains import posterior_rhat_nested
from zoo.data import Dataset, TorchData
from zoo.execution.arviz_io import (
    DRAWS_GUIDE,
    DRAWS_MCMC,
    MAX_INPUT_VALUES,
    datatree_to_bytes,
    posterior_to_datatree,
)
from zoo.inference import Fit, PointPosterior, SampledPosterior, VIPosterior
from zoo.models.base import BayesianNet
from zoo.runtime import Runtime
from zoo.seeds import Stream, seed_for
from zoo.studies.base import CellContext

__all__ = [
    "HIDDEN_COLUMNS",
    "OUTPUTS",
    "PSIS_DRAWS",
    "cell_attrs",
    "chain_means",
    "chain_probs",
    "evaluate",
    "evaluate_fit",
    "grade_record",
    "pointwise",
    "posterior_datatree",
    "predictive_probs",
]

Draws = Mapping[str, torch.Tensor]
Outputs = tuple[dict[str, Any], dict[str, bytes]]

#: Draws x inputs per chunk of the pointwise evaluations of :func:`pointwise`: the network's
#: activations are (draws, chunk, width), so a chunk of inputs shrinks as the draws grow.
CHUNK_VALUES = 2**21


def _library_version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


#: ``(inference_library, inference_library_version)`` of a variational fit (Pyro's SVI) and
#: of a sampler (this package's own NUTS and HMC).
LIBRARY_VI = ("pyro", pyro.__version__)
LIBRARY_SAMPLER = ("bnn-zoo", _library_version("bnn-zoo"))


def predictive_probs(model: BayesianNet, x: torch.Tensor, draws: Draws) -> np.ndarray:
    """Posterior predictive class probabilities at ``x``, (len(x), n_classes), float64."""
    with torch.no_grad():
        logp = model.likelihood.class_log_probs(model.apply(x, draws))
        return Runtime.numpy((torch.logsumexp(logp, 0) - np.log(logp.shape[0])).exp().double())


def chain_probs(model: BayesianNet, x: torch.Tensor, post: SampledPosterior) -> np.ndarray:
    """Class probabilities at ``x`` of every kept draw, ``(chain, draw, len(x), classes)``.

    The draws go through the network in chunks of at most :data:`CHUNK_VALUES` draws x
    inputs, so the activations stay small whatever the number of chains.
    """
    return _chain_outputs(model, x, post, probs=True)


def chain_means(model: BayesianNet, x: torch.Tensor, post: SampledPosterior) -> np.ndarray:
    """A regression network's output at ``x`` of every kept draw, ``(chain, draw, len(x), 1)``.

    The output is the mean of y given x and the weights (standardized units): the function
    the posterior is over, the regression counterpart of :func:`chain_probs`, whose
    convergence the prediction gates of the reference grade read.
    """
    return _chain_outputs(model, x, post, probs=False)


def _chain_outputs(
    model: BayesianNet, x: torch.Tensor, post: SampledPosterior, *, probs: bool
) -> np.ndarray:
    sites = post.all()
    total = next(iter(sites.values())).shape[0]
    size = max(1, CHUNK_VALUES // max(1, len(x)))
    out = []
    with torch.no_grad():
        for a in range(0, total, size):
            part = {k: v[a : a + size] for k, v in sites.items()}
            f = model.apply(x, part)
            f = model.likelihood.class_log_probs(f).exp() if probs else f
            out.append(Runtime.numpy(f.double()))
    values = np.concatenate(out, 0)
    return values.reshape(post.chains, total // post.chains, *values.shape[1:])


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
        noise = (
            Runtime.numpy(draws["noise"])[:, None] if "noise" in draws else model.likelihood.noise
        )
        res = regression_metrics(
            Runtime.numpy(out.squeeze(-1)).astype(np.float64),
            noise,
            ds.y_test.astype(np.float64),
            y_scale=ds.y_scale,
            y_shift=ds.y_shift,
        )
    names = metrics.names or list(res)
    return {k: float(res[k]) for k in names if k in res}


def pointwise(
    model: BayesianNet,
    x: torch.Tensor,
    y: torch.Tensor,
    draws: Draws,
    *,
    n_classes: int,
    gen: torch.Generator,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pointwise log-likelihood and one predictive draw of ``y`` per weight draw at ``x``.

    Parameters
    ----------
    model : BayesianNet
        The network and its likelihood.
    x, y : torch.Tensor
        Inputs ``(n, ...)`` and targets ``(n, ...)``.
    draws : mapping of str to torch.Tensor
        Weight draws with leading dim ``S``.
    n_classes : int
        Number of classes (a categorical draw per point), or 0 (a Gaussian draw with the
        draw's noise).
    gen : torch.Generator
        Draws the predictive ``y``: one uniform (classes, by inverse CDF) or standard
        normal (regression) per draw and point, all at once before the chunks, so the
        draws do not depend on the chunk size.

    Returns
    -------
    loglik, y_draws : torch.Tensor
        ``log p(y_i | x_i, draw_s)`` of shape ``(S, n)`` and the predictive draws
        ``(S, n)``, computed in chunks of at most :data:`CHUNK_VALUES` // S inputs.
    """
    n_draws = next(iter(draws.values())).shape[0]
    size = max(1, min(2000, CHUNK_VALUES // n_draws))
    # the randomness of all points at once, so the draws do not depend on the chunk size
    shape, dtype = (n_draws, len(x)), x.dtype if x.is_floating_point() else torch.float64
    if n_classes > 0:
        noise = torch.rand(shape, generator=gen, dtype=dtype, device=x.device)
    else:
        noise = torch.randn(shape, generator=gen, dtype=dtype, device=x.device)
    logliks, reps = [], []
    with torch.no_grad():
        for xc, yc, uc in zip(x.split(size), y.split(size), noise.split(size, -1), strict=True):
            out = model.apply(xc, draws)
            logliks.append(model.likelihood.log_prob(out, yc, draws))
            if n_classes > 0:  # inverse CDF: the first class whose cumulative probability > u
                cdf = model.likelihood.class_log_probs(out).exp().cumsum(-1)
                rep = (cdf < uc.unsqueeze(-1).to(cdf.dtype)).sum(-1).clamp(max=n_classes - 1)
            else:
                sd = draws["noise"][:, None] if "noise" in draws else model.likelihood.noise
                rep = out.squeeze(-1) + sd * uc.to(out.dtype)
            reps.append(rep)
    return torch.cat(logliks, -1), torch.cat(reps, -1)


def _inputs(x: np.ndarray) -> dict[str, np.ndarray]:
    return {"x": x} if x.size <= MAX_INPUT_VALUES else {}


def posterior_datatree(
    model: BayesianNet,
    ds: Dataset,
    data: TorchData,
    draws: Draws,
    *,
    chains: int,
    gen: torch.Generator,
    sample_stats: Mapping[str, np.ndarray] | None = None,
    draws_kind: str | None = None,
    library: tuple[str, str] | None = None,
    attrs: Mapping[str, Any] | None = None,
):
    """The ArviZ DataTree of ``draws`` (leading dim chains x draws, chain-major).

    ``draws[site]`` has shape ``(chains * n, *site_shape)``. The log-likelihood is pointwise
    per draw on the training points (``log_likelihood``) and on the test points
    (``log_likelihood_test``); the predictive draws one ``y`` per weight draw from ``gen``,
    first at the test inputs (``predictions``), then at the training inputs
    (``posterior_predictive``). Inputs of more than
    :data:`~zoo.execution.arviz_io.MAX_INPUT_VALUES` values are left out (root attribute
    ``constant_data_note``). ``draws_kind`` and ``library`` (name, version) become root
    attributes (:func:`~zoo.execution.arviz_io.posterior_to_datatree`).
    """
    k = ds.n_classes
    ll_test, pred = pointwise(model, data.x_test, data.y_test, draws, n_classes=k, gen=gen)
    ll_train, rep = pointwise(model, data.x_train, data.y_train, draws, n_classes=k, gen=gen)

    def shaped(t: torch.Tensor) -> np.ndarray:
        a = Runtime.numpy(t)
        return a.reshape((chains, a.shape[0] // chains) + a.shape[1:])

    attrs = dict(attrs or {})
    left_out = [
        n for n, x in (("x_train", ds.x_train), ("x_test", ds.x_test)) if x.size > MAX_INPUT_VALUES
    ]
    if left_out:
        attrs["constant_data_note"] = (
            f"{' and '.join(left_out)} left out (more than {MAX_INPUT_VALUES} values); "
            "zoo.data.load(spec.data, seed) gives them again"
        )
    name, version = library if library is not None else (None, None)
    return posterior_to_datatree(
        {s: shaped(v) for s, v in draws.items()},
        sample_stats=sample_stats,
        log_likelihood=shaped(ll_train),
        posterior_predictive=shaped(rep),
        observed=np.asarray(ds.y_train),
        constant_data=_inputs(ds.x_train),
        predictions=shaped(pred),
        log_likelihood_test=shaped(ll_test),
        predictions_constant_data={**_inputs(ds.x_test), "y": np.asarray(ds.y_test)},
        n_classes=k,
        draws_kind=draws_kind,
        inference_library=name,
        inference_library_version=version,
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


def _archive(ctx: CellContext, draws: Draws, chains: int, *, sampled: bool, sample_stats=None):
    return posterior_datatree(
        ctx.model,
        ctx.ds,
        ctx.data,
        draws,
        chains=chains,
        gen=ctx.runtime.generator(seed_for(ctx.seed, Stream.POSTERIOR_PREDICTIVE)),
        sample_stats=sample_stats,
        draws_kind=DRAWS_MCMC if sampled else DRAWS_GUIDE,
        library=LIBRARY_SAMPLER if sampled else LIBRARY_VI,
        attrs=cell_attrs(ctx.cell, ctx.ds),
    )


#: Draws from an svi cell's guide behind its ``psis_khat``: the Pareto fit sees the largest
#: 3 sqrt(S) = 48 ratios; each draw runs the model on the training set once. (The report's
#: note, :data:`reports.labels.PSIS_NOTE`, names this number.)
PSIS_DRAWS = 256


def _variational(ctx: CellContext, fit: Fit, draws: Draws) -> Outputs:
    """``psis_khat`` and, if ``save_draws``, the predictive draws as the cell's ArviZ file
    (one chain)."""
    x, y = ctx.data.x_train, ctx.data.y_train
    seed = seed_for(ctx.seed, Stream.PSIS)
    psis = psis_khat(
        ctx.model, fit.posterior.guide, x, y, len(x), num_samples=PSIS_DRAWS, seed=seed
    )
    out = {"psis_khat": psis.khat}
    if not fit.save_draws:
        return out, {}
    return out, {".nc": datatree_to_bytes(_archive(ctx, draws, 1, sampled=False))}


def _point(ctx: CellContext, fit: Fit, draws: Draws) -> Outputs:
    return {}, {}


#: Most pointwise values (draws x training and test points) a sampled cell's ArviZ file holds
#: in each of its pointwise groups (log_likelihood, posterior_predictive, predictions,
#: log_likelihood_test): 20 million float32 values are 80 MB before compression.
ARCHIVE_MAX_VALUES = 20_000_000


def archived_chains(post: SampledPosterior, points: int) -> np.ndarray | None:
    """Evenly spaced chains whose kept draws fit :data:`ARCHIVE_MAX_VALUES` (at least 2), or
    None when every chain fits.

    A many-chain sampler (ChEES: 1024 chains x 100 kept draws on 11,000 points) would
    otherwise write about 10^9 values per group; its KL and ESS come from the streamed moments
    of every draw, and the file's R-hat and ESS are then those of the archived chains.
    """
    draws = int(next(iter(post.draws.values())).shape[1])
    if post.chains * draws * points <= ARCHIVE_MAX_VALUES:
        return None
    k = max(2, ARCHIVE_MAX_VALUES // max(1, draws * points))
    return np.unique(np.linspace(0, post.chains - 1, min(k, post.chains)).round().astype(int))


def _sampled(ctx: CellContext, fit: Fit, draws: Draws) -> Outputs:
    """Agreement with the starting method, diagnostics, and all draws as the ArviZ file."""
    out: dict[str, Any] = {}
    model, x_test, post = ctx.model, ctx.data.x_test, fit.posterior
    if fit.init is not None and ctx.ds.n_classes > 0:
        vi_draws = fit.init.posterior.sample(
            fit.predictive_draws, seed_for(ctx.seed, Stream.PREDICTIVE)
        )
        vi_probs = predictive_probs(model, x_test, vi_draws)
        probs = predictive_probs(model, x_test, draws)
        out["agreement_vi"] = predictive_agreement(vi_probs, probs)
        out["tv_vi"] = predictive_tv(vi_probs, probs)
    stats = fit.sample_stats
    keep = archived_chains(post, ctx.data.x_train.shape[0] + x_test.shape[0])
    transitions = post.chains * int(fit.stats.get("draws_per_chain") or 0)
    if keep is not None:  # thousands of chains: the file holds evenly spaced chains
        post = post.subset(keep)
        stats = {k: np.asarray(v)[keep] for k, v in stats.items()}
        out["archived_chains"] = len(keep)
    dt = _archive(ctx, post.all(), post.chains, sampled=True, sample_stats=stats)
    # the limit from the method itself: the gate must not depend on the file's attributes
    gates = diagnostic_gates(dt, max_tree_depth=getattr(ctx.cell.method, "max_tree_depth", None))
    out.update(
        max_r_hat=gates.max_r_hat,  # None (not applicable) with one chain
        min_ess_bulk=gates.min_ess_bulk,
        min_ess_tail=gates.min_ess_tail,
        ess_bulk_q05=gates.ess_bulk_quantiles[0],
        ess_bulk_q50=gates.ess_bulk_quantiles[1],
        worst_ess_bulk=gates.worst_ess_bulk[0][0] if gates.worst_ess_bulk else "",
        mean_tree_steps=float(np.mean(stats["n_steps"])) if "n_steps" in stats else None,
        step_size=float(np.median(stats["step_size"])) if "step_size" in stats else None,
        gates_failed=",".join(gates.failed),
        # superchains (init_fits blocks); with one, the nested R-hat is None (does not apply)
        superchains=len(set(post.superchain_ids or (0,))),
        rhat_nested=posterior_rhat_nested(dt, post.superchain_ids),
        divergent_frac=_fraction(fit.stats.get("n_divergent"), transitions),
        # the sampler's own count over all drawn transitions (zoo.inference.sampling's
        # trajectory_facts: NUTS at max_tree_depth, ChEES at max_leapfrog, MAMS at
        # max_steps; None without a cap)
        saturated_frac=fit.stats.get("saturated_frac"),
    )
    # do the chains agree on the predictions? (class probabilities; a regression's mean)
    outputs = chain_probs if ctx.ds.n_classes > 0 else chain_means
    out.update(predictive_convergence(outputs(model, x_test, post), post.superchain_ids))
    if gates.n_max_tree_depth is not None:  # NUTS: transitions that reached max_tree_depth
        out["n_max_tree_depth"] = gates.n_max_tree_depth
    return out, {".nc": datatree_to_bytes(dt)}


def _fraction(k: Any, n: int) -> float | None:
    return None if k is None or n <= 0 else float(k) / n


def grade_record(metrics: Mapping[str, Any]) -> dict[str, str]:
    """``reference_grade`` and ``grade_failed`` (comma-separated gates) of a sampled cell's
    metrics (:func:`reports.grade.reference_grade`); :func:`zoo.execution.cell.run_cell` grades
    once, after the studies, so that a study's gate metric (``kl_ess_n``) counts."""
    g = reference_grade(metrics)
    return {"reference_grade": g.grade, "grade_failed": ",".join(g.failed)}


#: Columns a cell records that the report's summary tables leave out: sizes and fit
#: numbers that describe a setting, and the sampler diagnostics its own section shows.
#: (A study hides its own columns beside its probe: ``zoo.studies``.)
HIDDEN_COLUMNS: frozenset[str] = frozenset(
    "n_train n_test final_loss best_step ess_bulk_q05 ess_bulk_q50 min_ess_tail mean_tree_steps "
    "step_size max_r_hat min_ess_bulk n_divergent n_max_tree_depth max_r_hat_pred "
    "median_r_hat_pred min_ess_bulk_pred median_ess_bulk_pred n_pred_constant superchains "
    "rhat_nested rhat_nested_pred divergent_frac saturated_frac trajectory_at_cap "
    "trajectory_cap".split()
)


#: Posterior class -> ``(ctx, fit, predictive draws) -> (metrics, artifacts)``: what a cell
#: records besides the predictive metrics and the fit's stats.
OUTPUTS: dict[type, Callable[[CellContext, Fit, Draws], Outputs]] = {
    VIPosterior: _variational,
    PointPosterior: _point,
    SampledPosterior: _sampled,
}


def evaluate_fit(ctx: CellContext, fit: Fit) -> Outputs:
    """The metrics and artifacts of a cell's fit (see the module docstring)."""
    draws = fit.posterior.sample(fit.predictive_draws, seed_for(ctx.seed, Stream.PREDICTIVE))
    metrics = evaluate(ctx.model, ctx.ds, ctx.data.x_test, draws, ctx.cell.spec.metrics)
    metrics.update(fit.stats)
    metrics["fit_seconds"] = fit.seconds
    more, artifacts = OUTPUTS[type(fit.posterior)](ctx, fit, draws)
    metrics.update(more)
    return metrics, artifacts
