"""Rewrite a reference database of the zoo's first export format into the current one.

The first ``zoo export`` wrote files posteriordb's readers could not open: the model info
named its code as ``model_code: {"zoo": PATH}`` alone (posteriordb reads
``model_implementations: {"zoo": {"model_code": PATH}}``), parameter names were 0-based
(posteriordb's are 1-based), ``ndraws`` counted the draws before thinning, and
``checks_made`` held none of posteriordb's checks. :func:`migrate` rewrites such a
database in place without the runs it came from: the draws and the grade stay (the draws
file is written again with 1-based names, every value bit for bit), the diagnostics of
every draw move under ``diagnostics.every_draw``, posteriordb's diagnostics and checks
are computed from the stored draws (:mod:`zoo.references.pdb_checks`). The E-FMI needs the
energy of every transition, which the first format did not keep: it is stated as
``None`` (not checked) until the reference is exported again from its run.

``python -m zoo.references.migrate DIR`` runs it on DIR (default: the shipped references).
A database already in the current format is left as it is.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from zoo.execution.store import write_bytes_atomic
from zoo.execution.store_links import inside
from zoo.references.cell_files import COMMENTS, draws_text, json_bytes, model_code_keys
from zoo.references.layout import DRAWS, DRAWS_INFO, MODEL_INFO, POSTERIORS, json_zip
from zoo.references.load import _read, _root, load, names, shipped_dir
from zoo.references.pdb_checks import posteriordb_checks, reference_diagnostics

__all__ = ["NO_ENERGY", "main", "migrate"]

#: Added to a migrated reference's comments.
NO_ENERGY = (
    " Migrated from the first export format: its files kept no energy, so the E-FMI is not "
    "stated (efmi_above_0_2 null) until the reference is exported again from its run."
)


def _files(root: Path, name: str) -> dict[str, bytes] | None:
    """The rewritten files of one posterior; None when it is in the current format."""
    posterior = _read(root, f"{POSTERIORS}/{name}.json")
    model_rel = f"{MODEL_INFO}/{posterior['model_name']}.info.json"
    model = _read(root, model_rel)
    if "model_implementations" in model:
        return None
    ref = posterior["reference_posterior_name"]
    info = _read(root, f"{DRAWS_INFO}/{ref}.info.json")
    kept = load(name, root)["posterior"].to_dataset()
    old = info["diagnostics"]
    diagnostics = reference_diagnostics(
        kept,
        {k: old[k] for k in ("effective_sample_size_bulk", "effective_sample_size_tail", "r_hat")},
        ndraws_sampled=old["ndraws"],
        efmi_per_chain=None,
        divergent=old.get("divergent_transitions"),
        cell=old.get("cell", {}),
    )
    keys = model_code_keys(model["model_code"]["zoo"])
    model = {k: v for k, v in model.items() if k != "model_code"}
    at = list(model).index("references") + 1 if "references" in model else len(model)
    items = list(model.items())
    model = dict(items[:at] + list(keys.items()) + items[at:])
    info = {
        **info,
        "diagnostics": diagnostics,
        "checks_made": {**posteriordb_checks(diagnostics), **info["checks_made"]},
        "comments": COMMENTS + NO_ENERGY,
    }
    return {
        model_rel: json_bytes(model),
        f"{DRAWS_INFO}/{ref}.info.json": json_bytes(info),
        f"{DRAWS}/{ref}.json.zip": json_zip(f"{ref}.json", draws_text(kept)),
    }


def migrate(path: str | os.PathLike[str] | None = None) -> list[str]:
    """Rewrite the posteriors of a first-format database in place (see the module).

    Parameters
    ----------
    path : path, optional
        The database (``zoo export --out``); default the shipped references.

    Returns
    -------
    list of str
        The posteriors rewritten (those already current are left out).

    Raises
    ------
    zoo.references.ReferenceReadError
        A file missing or damaged (nothing of that posterior is written).
    """
    root = _root(path)
    done = []
    for name in names(root if path is not None else None):
        files = _files(root, name)
        if files is None:
            continue
        for rel, data in files.items():
            write_bytes_atomic(inside(root, rel), data)
        done.append(name)
    return done


def main(argv: list[str] | None = None) -> int:
    """``python -m zoo.references.migrate [DIR]``: print the posteriors rewritten."""
    args = sys.argv[1:] if argv is None else argv
    path = Path(args[0]) if args else shipped_dir()
    for name in migrate(path):
        print(f"migrated {name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
