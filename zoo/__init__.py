"""bnn-zoo: Bayesian neural networks on Pyro from declarative YAML specs.

``zoo.load_spec(path)`` validates a spec file into a frozen :class:`zoo.spec.Spec`;
``zoo.run_spec(spec, out_dir)`` runs its cells and writes a report. The ``zoo`` command
line wraps both.
"""

from zoo.runner import run_spec
from zoo.spec import Cell, Spec
from zoo.specload import SpecError, load_spec

__all__ = ["Cell", "Spec", "SpecError", "load_spec", "run_spec"]
