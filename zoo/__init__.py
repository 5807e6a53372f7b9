"""bnn-zoo: Bayesian neural networks on Pyro from declarative YAML specs.

``zoo.load_spec(path)`` validates a spec file into a frozen :class:`zoo.spec.Spec`
without importing torch; :func:`zoo.run.runner.run_spec` runs its cells and writes a report.
The ``zoo`` command line wraps both.
"""

from zoo.spec import Cell, Spec, SpecError, load_spec

__all__ = ["Cell", "Spec", "SpecError", "load_spec"]
