"""bnn-zoo: Bayesian neural networks on Pyro from declarative YAML specs.

``zoo.load_spec(path)`` validates a spec file into a frozen :class:`zoo.spec.schema.Spec`
without importing torch; :func:`zoo.run.runner.run_spec` runs its cells and writes a report.
The ``zoo`` command line wraps both.
"""

from zoo.spec.load import SpecError, load_spec
from zoo.spec.schema import Cell, Spec

__all__ = ["Cell", "Spec", "SpecError", "load_spec"]
