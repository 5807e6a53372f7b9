"""CPU time per SVI step of AutoMeanField: Pyro's eager and JIT ELBOs, and the fused step.

One run measures every configuration side by side, interleaving the repetitions (each round
times every configuration once, in turn, after its own warm-up and, for the JIT ELBOs, its
compilation) and reports the median round::

    python benchmarks/svi_step.py [--nets default large overpruning] [--rounds 5] [--steps 40]

Networks: ``default``, the depth-2 network of ``specs/two_moons_depth.yaml`` (2-7-7-1, 85
parameters, batch 100 of its 500 training points, Bernoulli likelihood); ``large``, a
784-400-400-10 MLP on random data (batch 256, categorical likelihood, N = 60,000);
``overpruning``, the network of ``specs/overpruning_uci.yaml`` on its split 0 (13-50-1 tanh,
751 parameters, the full batch of 455 Boston points, Gaussian likelihood with a learned
noise std). Rows of ``default`` and ``large``:

- ``AutoNormal + Trace_ELBO``, ``AutoNormal + JitTrace_ELBO``: Pyro's guide, for reference;
- ``AutoMeanField + TraceMeanField_ELBO (zoo before)``: the svi cells' step before the fused
  step (the model and guide inside the zoo's ``KLWeight`` messenger), the baseline of the
  ratios; ``..., no validation``: the same with Pyro's argument validation off;
- ``AutoMeanField + JitTrace_ELBO``, ``+ pyro JitTraceMeanField_ELBO`` (Pyro 1.9's class,
  which traces again on every step), ``+ guides.JitTraceMeanField_ELBO`` (traced once);
- ``AutoMeanField fused step (zoo now)``: :class:`zoo.inference.fused_svi.FusedMeanFieldStep`,
  the same losses and parameters as the baseline to the bit;
- ``AutoKTiedNormal`` (rank 2) before and now, the same two steps for the k-tied guide.

Rows of ``overpruning``, the spec's MF and GD guides (``init_scale`` 1e-4, fixed std 0.05)
with local reparameterization, Adam's betas (0.9, 0.99) and learning rate 0.005:

- ``MF + local reparam, Pyro step (zoo before)``, the baseline of the ratios, and
  ``GD + local reparam, Pyro step (zoo before)``: ``SVI.step`` with ``TraceMeanField_ELBO``
  inside :class:`guides.local_reparam.LocalReparameterization` and the ``KLWeight``
  messenger, as the svi cells ran it before the fused step covered them;
- ``MF + local reparam, fused step (zoo now)``, ``GD + ...``: the fused step, the same
  losses and parameters to the bit.

Every configuration uses ClippedAdam, the svi cells' optimizer, and one torch thread
(``--threads``); the eager rows run with Pyro's argument validation at its default (on, as
the svi cells run) unless labelled, the JIT rows without it. Time is the process's CPU time
per step (a shared machine's load inflates wall time more than CPU time). Not a test:
numbers depend on the machine (it is named in the output); compare the ratios.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
import warnings
from collections.abc import Callable

import pyro
import torch
from pyro.infer import SVI, JitTrace_ELBO, Trace_ELBO, TraceMeanField_ELBO
from pyro.infer import JitTraceMeanField_ELBO as PyroJitTraceMeanField_ELBO
from pyro.infer.autoguide import AutoNormal
from pyro.optim import ClippedAdam

import guides
import zoo.data
import zoo.models
from guides import AutoFixedVarianceNormal, AutoKTiedNormal, AutoMeanField
from guides.local_reparam import LocalReparameterization
from zoo.inference.fused_svi import FusedMeanFieldStep
from zoo.inference.svi import KLWeight
from zoo.models.likelihoods import CategoricalLikelihood
from zoo.models.mlp import BayesianMLP
from zoo.spec import load_spec

BASE = "AutoMeanField + TraceMeanField_ELBO (zoo before)"
BASE_LR = "MF + local reparam, Pyro step (zoo before)"
OVERPRUNING = "specs/overpruning_uci.yaml"


def _net(name: str) -> tuple[BayesianMLP, torch.Tensor, torch.Tensor, int]:
    if name == "default":
        over = ["sweep.model.depth=[2]", "sweep.seed=[0]"]
        spec = load_spec("specs/two_moons_depth.yaml", over).cells()[0].spec
        ds = zoo.data.load(spec.data, spec.seed)
        model = zoo.models.build(spec, ds)
        x, y = torch.as_tensor(ds.x_train[:100]), torch.as_tensor(ds.y_train[:100])
        return model, x, y, len(ds.x_train)
    if name == "overpruning":
        spec = load_spec(OVERPRUNING, ["sweep.split=[0]"]).cells()[0].spec
        ds = zoo.data.load(spec.data, spec.seed)
        model = zoo.models.build(spec, ds)
        x, y = torch.as_tensor(ds.x_train), torch.as_tensor(ds.y_train)
        return model, x, y, len(ds.x_train)
    gen = torch.Generator().manual_seed(0)
    model = BayesianMLP(784, [400, 400], CategoricalLikelihood(10))
    x = torch.randn(256, 784, generator=gen)
    return model, x, torch.randint(0, 10, (256,), generator=gen), 60_000


def _configs(model, x, y, n) -> dict[str, Callable[[], Callable[[], object]]]:
    """Name -> a maker of a zero-argument step (each with its own guide and parameters)."""

    def svi(guide_cls, elbo, jit: bool = False, scaled: bool = False, validate: bool = True):
        def make():
            guide = guide_cls(model)
            guide._pyro_name = f"g{id(guide)}"  # configurations never share parameters
            m, g = (KLWeight(1.0)(model), KLWeight(1.0)(guide)) if scaled else (model, guide)
            s = SVI(m, g, ClippedAdam({"lr": 1e-3}), elbo())

            def step():
                # Pyro validates by default (the svi cells run so); the JIT ELBOs run without
                # it (Pyro's JIT tutorial) and take n_total as a keyword (they trace tensors)
                with pyro.validation_enabled(validate and not jit):
                    return s.step(x, y, n_total=n) if jit else s.step(x, y, n)

            return step

        return make

    def fused(guide_cls=AutoMeanField):
        def make():
            guide = guide_cls(model)
            guide._pyro_name = f"g{id(guide)}"
            step = FusedMeanFieldStep(model, guide, ClippedAdam({"lr": 1e-3}))
            return lambda: step.step(x, y, n)

        return make

    return {
        "AutoNormal + Trace_ELBO": svi(AutoNormal, Trace_ELBO),
        "AutoNormal + JitTrace_ELBO": svi(AutoNormal, JitTrace_ELBO, jit=True),
        BASE: svi(AutoMeanField, TraceMeanField_ELBO, scaled=True),
        "AutoMeanField + TraceMeanField_ELBO, no validation": svi(
            AutoMeanField, TraceMeanField_ELBO, scaled=True, validate=False
        ),
        "AutoMeanField + JitTrace_ELBO": svi(AutoMeanField, JitTrace_ELBO, jit=True),
        "AutoMeanField + pyro JitTraceMeanField_ELBO": svi(
            AutoMeanField, PyroJitTraceMeanField_ELBO, jit=True
        ),
        "AutoMeanField + guides.JitTraceMeanField_ELBO": svi(
            AutoMeanField, guides.JitTraceMeanField_ELBO, jit=True
        ),
        "AutoMeanField fused step (zoo now)": fused(),
        "AutoKTiedNormal + TraceMeanField_ELBO (zoo before)": svi(
            AutoKTiedNormal, TraceMeanField_ELBO, scaled=True
        ),
        "AutoKTiedNormal fused step (zoo now)": fused(AutoKTiedNormal),
    }


def _overpruning_configs(model, x, y, n) -> dict[str, Callable[[], Callable[[], object]]]:
    """The over-pruning spec's MF and GD steps with local reparameterization, both routes."""
    guides_ = {
        "MF": lambda: AutoMeanField(model, init_scale=1e-4),
        "GD": lambda: AutoFixedVarianceNormal(model, 0.05),
    }
    adam = {"lr": 0.005, "betas": (0.9, 0.99)}

    def pyro_step(name):
        def make():
            guide = guides_[name]()
            guide._pyro_name = f"g{id(guide)}"
            s = SVI(
                KLWeight(1.0)(model), KLWeight(1.0)(guide), ClippedAdam(adam), TraceMeanField_ELBO()
            )

            def step():
                with LocalReparameterization(strict=True):
                    return s.step(x, y, n)

            return step

        return make

    def fused(name):
        def make():
            guide = guides_[name]()
            guide._pyro_name = f"g{id(guide)}"
            step = FusedMeanFieldStep(model, guide, ClippedAdam(adam), local_reparam=True)
            return lambda: step.step(x, y, n)

        return make

    return {
        BASE_LR: pyro_step("MF"),
        "MF + local reparam, fused step (zoo now)": fused("MF"),
        "GD + local reparam, Pyro step (zoo before)": pyro_step("GD"),
        "GD + local reparam, fused step (zoo now)": fused("GD"),
    }


def _machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if "model name" in line)
    except (OSError, StopIteration):
        pass
    return f"{cpu}, {torch.get_num_threads()} torch thread(s), torch {torch.__version__}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nets", nargs="+", default=["default", "large", "overpruning"])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    warnings.filterwarnings("ignore", category=DeprecationWarning)  # torch.jit.trace's
    warnings.filterwarnings("ignore", category=torch.jit.TracerWarning)  # the model's
    pyro.set_rng_seed(0)
    print(f"SVI step, machine: {_machine()}")
    for net in a.nets:
        model, x, y, n = _net(net)
        steps = max(3, a.steps // 8) if net == "large" else a.steps
        configs = _overpruning_configs if net == "overpruning" else _configs
        base = BASE_LR if net == "overpruning" else BASE
        fns = {name: make() for name, make in configs(model, x, y, n).items()}
        for fn in fns.values():  # parameters, warm-up, JIT compilation
            for _ in range(3):
                fn()
        times: dict[str, list[float]] = {name: [] for name in fns}
        for _ in range(a.rounds):
            for name, fn in fns.items():
                t0 = time.process_time()
                for _ in range(steps):
                    fn()
                times[name].append((time.process_time() - t0) / steps * 1e3)
        med = {name: statistics.median(ts) for name, ts in times.items()}
        print(
            f"\nnetwork {net}: dims {model.dims}, batch {len(x)}, {steps} steps x "
            f"{a.rounds} rounds (median round)"
        )
        print(f"{'configuration':<52} {'CPU ms/step':>11} {'speed-up':>9}")
        for name, ms in med.items():
            print(f"{name:<52} {ms:>11.2f} {med[base] / ms:>8.2f}x")


if __name__ == "__main__":
    main()
