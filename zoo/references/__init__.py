"""Graded reference posteriors of BNNs, published in posteriordb's layout, and read back.

posteriordb (https://github.com/stan-dev/posteriordb) is where Bayesian workflow tools find
gold-standard posteriors; it has none for neural networks. ``zoo export RUN_DIR --out DIR``
(:func:`export_run`) writes the sampled cells of a finished run in its layout
(:mod:`zoo.references.layout`): per cell the posterior, the model (the cell's spec YAML and
its network instead of Stan code), the data, and reference draws with their diagnostics
and their grade (:mod:`reports.grade`). :func:`load` reads one back as an ArviZ DataTree
with the same draws, bit for bit, and the same metadata; :func:`names` lists a database.
Without a path both read the references shipped with bnn-zoo: the default spec's NUTS
cells (docs/references.md says how they were made and what grade each reached).

Why a package of its own, at the run layer: exporting reads run directories and writes
files through the run store's link guards (:mod:`zoo.execution.store_links`), so it sits beside
:mod:`zoo.execution` (the CLI only parses arguments); reading needs neither torch nor a run, so
``zoo.references.load`` serves a user who never runs the zoo, the way ``guides`` serves a
Pyro user who never writes a spec. Exporting needs no torch either.
"""

from zoo.references.export import (
    DEFAULT_MAX_DRAWS,
    Exported,
    ExportError,
    ExportResult,
    export_run,
)
from zoo.references.load import (
    ReferenceReadError,
    load,
    names,
    reference_info,
    shipped_dir,
)

__all__ = [
    "DEFAULT_MAX_DRAWS",
    "ExportError",
    "ExportResult",
    "Exported",
    "ReferenceReadError",
    "export_run",
    "load",
    "names",
    "reference_info",
    "shipped_dir",
]
