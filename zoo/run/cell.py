"""The one place that maps spec kinds to code.

Each registry maps the ``kind`` of a spec section to a builder. A later data set, model,
prior, likelihood, guide or inference method is one class in :mod:`zoo.spec.schema` plus one
entry here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import pyro
import torch
from pyro.infer.autoguide import AutoGuide, init_to_value

import guides
from zoo.data import base as zdata
from zoo.data import idx as data_idx
from zoo.data import uci as data_uci
from zoo.inference.point import fit_point
from zoo.inference.svi import fit_svi, pretrain_mle
from zoo.models import mlp as zm
from zoo.run.evaluate import datatree_bytes, evaluate, posterior_datatree
from zoo.spec.schema import Cell, Spec, width_from_budget

__all__ = [
    "DATA_LOADERS",
    "GUIDES",
    "LIKELIHOODS",
    "METHODS",
    "MODELS",
    "PRIORS",
    "CellOutput",
    "build_data",
    "check_data",
    "build_model",
    "run_cell",
]

DATA_LOADERS: dict[str, Callable[[Any, int], zdata.Dataset]] = {
    "two_moons": zdata.load_two_moons,
    "digits": zdata.load_digits,
    "csv": zdata.load_csv,
    "uci": data_uci.load_uci,
    "teacher": data_uci.load_teacher,
    "idx": data_idx.load_idx,
}

#: Checks that a data set's files are there, run by ``zoo run`` before any cell starts.
DATA_CHECKS: dict[str, Callable[[Any], None]] = {"idx": lambda d: data_idx.check_idx_dir(d.dir)}

PRIORS: dict[str, Callable[[Any], zm.PriorFn]] = {
    "normal": lambda p: zm.normal_prior(p.scale),
    "he": lambda p: zm.he_prior(),
}

LIKELIHOODS: dict[str, Callable[[Any, zdata.Dataset], zm.Likelihood]] = {
    "categorical": lambda lik, ds: zm.CategoricalLikelihood(ds.n_classes),
    "gaussian": lambda lik, ds: zm.GaussianLikelihood(
        None if lik.noise == "learned" else float(lik.noise), lik.noise_prior_scale
    ),
}


def _build_mlp(spec: Spec, ds: zdata.Dataset) -> zm.BayesianMLP:
    m = spec.model
    lik = LIKELIHOODS[spec.likelihood.kind](spec.likelihood, ds)
    if m.depth == 0:
        widths: list[int] = []
    elif m.width is not None:
        widths = [m.width] * m.depth
    else:
        try:
            w = width_from_budget(ds.in_dim, lik.out_dim, m.depth, m.param_budget)
        except ValueError as e:
            raise ValueError(f"model.param_budget: {e}") from None
        widths = [w] * m.depth
    bias = spec.prior.bias
    return zm.BayesianMLP(
        ds.in_dim,
        widths,
        lik,
        act=m.activation,
        negative_slope=m.negative_slope,
        weight_prior=PRIORS[spec.prior.kind](spec.prior),
        bias_prior=PRIORS[bias.kind](bias) if bias is not None else None,
    )


def _build_lenet(spec: Spec, ds: zdata.Dataset):
    from zoo.models.lenet import BayesianLeNet

    m = spec.model
    bias = spec.prior.bias
    return BayesianLeNet(
        ds.in_dim, LIKELIHOODS[spec.likelihood.kind](spec.likelihood, ds), channels=m.channels,
        conv=tuple(m.conv), dense=m.dense, kernel_size=m.kernel_size, padding=m.padding,
        pool=m.pool, weight_prior=PRIORS[spec.prior.kind](spec.prior),
        bias_prior=PRIORS[bias.kind](bias) if bias is not None else None,
    )  # fmt: skip


MODELS: dict[str, Callable[[Spec, zdata.Dataset], zm.BayesianMLP]] = {
    "mlp": _build_mlp,
    "lenet": _build_lenet,
}


def _site_info(model: zm.BayesianMLP) -> dict[str, tuple[tuple[int, ...], int]]:
    """``{site: (shape, fan_in)}`` of the weights and biases (models may define site_info)."""
    if hasattr(model, "site_info"):
        return model.site_info()
    out = {}
    for i, (fi, fo) in enumerate(zip(model.dims[:-1], model.dims[1:], strict=True)):
        out[f"layer{i}.weight"], out[f"layer{i}.bias"] = ((fo, fi), fi), ((fo,), fi)
    return out


def _init_locs(model: zm.BayesianMLP, how: str, seed: int) -> dict[str, torch.Tensor]:
    """Initial weight means: He-normal (biases 0), draws from the prior, or zeros."""
    gen = torch.Generator().manual_seed(seed)
    out = {}
    for site, (shape, fi) in _site_info(model).items():
        loc, scale = model.prior_params[site]
        if how == "zero" or (how == "he" and site.endswith("bias")):
            out[site] = torch.zeros(shape)
        elif how == "he":
            out[site] = torch.randn(shape, generator=gen) * (2.0 / fi) ** 0.5
        else:
            out[site] = loc + scale * torch.randn(shape, generator=gen)
    return out


def _guide_kwargs(gspec, init_values) -> dict[str, Any]:
    kw: dict[str, Any] = {"init_loc_fn": init_to_value(values=init_values)}
    if hasattr(gspec, "init_scale"):
        kw["init_scale"] = gspec.init_scale
    return kw


GUIDES: dict[str, Callable[[Any, Any, dict[str, torch.Tensor]], AutoGuide]] = {
    "mean_field": lambda model, g, init: guides.AutoMeanField(
        model, scale_transform=g.scale_transform, **_guide_kwargs(g, init)
    ),
    "k_tied": lambda model, g, init: guides.AutoKTiedNormal(
        model, rank=g.rank, **_guide_kwargs(g, init)
    ),
    "matrix_normal": lambda model, g, init: guides.AutoMatrixNormal(
        model, row_cov=g.row_cov, col_cov=g.col_cov, **_guide_kwargs(g, init)
    ),
    "full_rank": lambda model, g, init: guides.AutoFullRankNormal(
        model, blocks=g.blocks, **_guide_kwargs(g, init)
    ),
    "fixed_variance": lambda model, g, init: guides.AutoFixedVarianceNormal(
        model, scale=g.scale, **_guide_kwargs(g, init)
    ),
}


def _true_locs(model: zm.BayesianMLP, ds: zdata.Dataset) -> dict[str, torch.Tensor]:
    """The weights that generated the data (``init_loc: teacher``), checked against the model."""
    if ds.true_params is None:
        raise ValueError("guide.init_loc: 'teacher' needs data that come with their generating "
                         "weights (data.kind teacher); use he, prior or zero")  # fmt: skip
    out = {}
    for i, (w, b) in enumerate(model.layer_sites()):
        for site, shape in ((w, (model.dims[i + 1], model.dims[i])), (b, (model.dims[i + 1],))):
            t = torch.as_tensor(ds.true_params.get(site, np.zeros(0)))
            if tuple(t.shape) != tuple(shape):
                raise ValueError(
                    f"guide.init_loc: 'teacher': the data's {site} has shape {tuple(t.shape)}, "
                    f"the model's {tuple(shape)}; make model.width and depth match the "
                    "teacher (data.width, depth 1)"
                )
            out[site] = t.clone()
    return out


def fit_vi(spec: Spec, m: Any, model: zm.BayesianMLP, ds: zdata.Dataset, progress: bool,
           desc: str = "svi", make_callback: Callable | None = None,
           recorder: Any = None):  # fmt: skip
    """Fit the variational method ``m`` of ``spec`` (seeded by ``spec.seed``): SVIResult.

    ``make_callback(guide)``, if given, returns a step callback of :func:`fit_svi`.
    ``recorder`` (e.g. :class:`zoo.studies.ktied.probe.StudyRecorder`) gets ``attach(guide)`` before
    training and its ``on_step`` / ``on_grads`` as fit_svi's callbacks.
    """
    seed = spec.seed
    x, y = torch.as_tensor(ds.x_train), torch.as_tensor(ds.y_train)
    if m.guide.init_loc == "teacher":
        init = _true_locs(model, ds)
    else:
        init = _init_locs(model, m.guide.init_loc, seed)
    if m.pretrain_epochs:
        init = pretrain_mle(
            model.log_likelihood, init, x, y, seed=seed, epochs=m.pretrain_epochs,
            batch_size=m.batch_size, lr=m.lr,
        )  # fmt: skip
    guide = GUIDES[m.guide.kind](model, m.guide, init)
    steps = [make_callback(guide)] if make_callback is not None else []
    hooks: dict[str, Any] = {}
    if recorder is not None:
        recorder.attach(guide)
        steps.append(recorder.on_step)
        hooks["grad_callback"] = recorder.on_grads
    if steps:
        hooks["callback"] = steps[0] if len(steps) == 1 else _chain(steps)
    return fit_svi(
        model, guide, x, y, seed=seed, steps=m.steps, epochs=m.epochs,
        batch_size=m.batch_size, lr=m.lr, lr_decay=m.lr_decay, kl_weight=m.kl_weight,
        kl_warmup_steps=m.kl_warmup_steps, closed_form_kl=m.closed_form_kl,
        num_particles=m.num_particles, progress=progress, desc=desc,
        local_reparam=getattr(m.guide, "local_reparam", False), betas=m.betas,
        kl_warmup_every=getattr(m, "kl_warmup_every", 1),
        scale_lr=getattr(m, "scale_lr", None), **hooks,
    )  # fmt: skip


def _chain(fns: list[Callable]) -> Callable:
    def call(*args: Any) -> None:
        for fn in fns:
            fn(*args)

    return call


def _run_svi(cell: Cell, model: zm.BayesianMLP, ds: zdata.Dataset, progress: bool) -> dict:
    m = cell.method
    seed = cell.spec.seed
    pspec = cell.spec.metrics.pruning
    hook = _pruning_hook(pspec, model, ds, seed)
    recorder = None
    if getattr(m, "ktied", None) is not None:
        from zoo.studies.ktied.probe import StudyRecorder

        rank = m.guide.rank if m.guide.kind == "k_tied" else None
        optim = {"lr": m.lr, "scale_lr": m.scale_lr, "batch_size": m.batch_size,
                 "betas": list(m.betas)}  # fmt: skip
        recorder = StudyRecorder(model, ds, m.ktied, seed, rank=rank, optim=optim)
    res = fit_vi(cell.spec, m, model, ds, progress, desc=cell.cell_id[:40],
                 make_callback=hook.recorder if hook else None, recorder=recorder)  # fmt: skip
    guide = res.posterior.guide
    draws = res.posterior.sample(m.predictive_samples, seed=seed + 1)
    out = evaluate(model, ds, draws, cell.spec.metrics)
    out.update(
        neg_elbo=res.neg_elbo,
        final_loss=float(np.mean(res.losses[-10:])),
        fit_seconds=res.seconds,
        n_var_params=int(getattr(guide, "num_variational_params", 0)),
    )
    out["_artifacts"] = {}
    if m.save_draws:
        dt = posterior_datatree(model, ds, draws, chains=1, seed=seed + 2, attrs=_attrs(cell, ds))
        out["_artifacts"][".nc"] = datatree_bytes(dt)
    if hook is not None:
        out.update(hook.finish(guide, res.posterior.sample(pspec.draws, seed=seed + 4),
                               out["_artifacts"]))  # fmt: skip
    if recorder is not None:
        metrics, artifacts = recorder.finish(guide, n_bins=cell.spec.metrics.ece_bins)
        out.update(metrics)
        out["_artifacts"].update(artifacts)
    n_prod = cell.spec.metrics.product_matrix_draws
    if n_prod and model.act_name == "linear":
        out.update(_product_matrix(model, res.posterior, n_prod, seed + 3, out["_artifacts"]))
    return out


def _pruning_hook(pspec, model: zm.BayesianMLP, ds: zdata.Dataset, seed: int):
    """The over-pruning study of an svi cell (``metrics.pruning``), or None."""
    if pspec is None or model.depth == 0:
        return None
    from zoo.studies.pruning.probe import PruningHook

    return PruningHook(pspec, model, ds, seed)


def _product_matrix(model, posterior, n: int, seed: int, artifacts: dict) -> dict[str, float]:
    """Covariance of the product of the weight matrices over ``n`` posterior draws."""
    import io

    from reports.product_matrix import off_diagonal_mass, product_covariance_from_draws

    draws = posterior.sample(n, seed=seed)
    weights = [draws[w].numpy().astype(np.float64) for w, _ in model.layer_sites()]
    cov = product_covariance_from_draws(weights)
    buf = io.BytesIO()
    np.savez_compressed(buf, cov=cov.astype(np.float32), shape=np.array(weights[-1].shape[1:2]
                        + weights[0].shape[2:3]))  # fmt: skip
    artifacts[".product_cov.npz"] = buf.getvalue()
    return {"product_offdiag_mass": off_diagonal_mass(cov)}


def _attrs(cell: Cell, ds: zdata.Dataset) -> dict[str, Any]:
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


def _run_point(cell: Cell, model: zm.BayesianMLP, ds: zdata.Dataset, progress: bool) -> dict:
    """MAP, or maximum likelihood stopped early on a seeded validation split."""
    m = cell.method
    seed = cell.spec.seed
    x, y = torch.as_tensor(ds.x_train), torch.as_tensor(ds.y_train)
    validation = None
    if m.kind == "mle":
        perm = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed + 7))
        n_val = max(1, round(m.validation_fraction * len(x)))
        validation = (x[perm[:n_val]], y[perm[:n_val]])
        x, y = x[perm[n_val:]], y[perm[n_val:]]
    res = fit_point(
        model, x, y, _init_locs(model, m.init_loc, seed), seed=seed, prior=m.kind == "map",
        steps=m.steps, epochs=m.epochs, batch_size=m.batch_size, lr=m.lr, lr_decay=m.lr_decay,
        betas=m.betas, validation=validation, patience=getattr(m, "patience", 20),
        eval_every=getattr(m, "eval_every", 10), progress=progress, desc=cell.cell_id[:40],
    )  # fmt: skip
    out = evaluate(model, ds, {k: v[None] for k, v in res.params.items()}, cell.spec.metrics)
    out.update(
        final_loss=float(np.mean(res.losses[-10:])),
        best_step=res.best_step,
        fit_seconds=res.seconds,
        n_var_params=sum(v.numel() for v in res.params.values()),
    )
    return out


def _run_sampler(cell: Cell, model: zm.BayesianMLP, ds: zdata.Dataset, progress: bool) -> dict:
    from zoo.studies.price_of_mf.sampler_cell import run_sampler_cell

    return run_sampler_cell(cell, model, ds, progress, fit_vi, _attrs(cell, ds))


METHODS: dict[str, Callable[[Cell, zm.BayesianMLP, zdata.Dataset, bool], dict]] = {
    "svi": _run_svi,
    "map": _run_point,
    "mle": _run_point,
    "nuts": _run_sampler,
    "hmc": _run_sampler,
}


def build_data(spec: Spec) -> zdata.Dataset:
    """The data set of a resolved spec, seeded by ``spec.seed`` unless it has its own seed."""
    return DATA_LOADERS[spec.data.kind](spec.data, spec.seed)


def check_data(spec: Spec) -> None:
    """Raise FileNotFoundError (saying where the files go) if a cell's data files are missing."""
    seen = set()
    for cell in spec.cells() if spec.simulation is None else []:
        d = cell.spec.data
        if d.kind in DATA_CHECKS and repr(d) not in seen:
            seen.add(repr(d))
            DATA_CHECKS[d.kind](d)


def build_model(spec: Spec, ds: zdata.Dataset) -> zm.BayesianMLP:
    """The Pyro model of a resolved spec for data set ``ds``."""
    return MODELS[spec.model.kind](spec, ds)


class CellOutput(NamedTuple):
    """What a cell produced: its metrics (one row of results.csv) and files to store.

    ``artifacts`` maps a file suffix (``".nc"``) to its bytes, stored as
    ``cells/<cell id><suffix>`` by the runner.
    """

    metrics: dict[str, Any]
    artifacts: dict[str, bytes]


def run_cell(cell: Cell, progress: bool = False) -> CellOutput:
    """Build data and model, run the cell's method, return metrics, sizes and files."""
    pyro.clear_param_store()  # guides of earlier cells must not leak their parameters
    torch.manual_seed(cell.spec.seed)
    ds = build_data(cell.spec)
    model = build_model(cell.spec, ds)
    out = {
        "width": model.dims[1] if model.depth else 0,
        "n_params": model.num_params,
        "n_train": len(ds.x_train),
    }
    out.update(METHODS[cell.method.kind](cell, model, ds, progress))
    artifacts = out.pop("_artifacts", {})
    return CellOutput(out, artifacts)
