"""The arguments and help of ``zoo export`` (argparse only: ``zoo --help`` stays fast; the
command itself is :mod:`zoo.cli.export`)."""

from __future__ import annotations

import argparse

__all__ = ["DEFAULT_MAX_DRAWS", "DESCRIPTION", "EPILOG", "add_parser"]

#: :data:`zoo.references.DEFAULT_MAX_DRAWS`, repeated so that parsing imports nothing heavy
#: (tests/zoo/references/test_export.py checks that they agree).
DEFAULT_MAX_DRAWS = 400

DESCRIPTION = """\
Write the sampled cells of a finished run (NUTS, HMC, ChEES, ...) that hold a reference
grade (gold, silver, bronze, failed: the gates are in the run's report) as reference
posteriors in posteriordb's layout, the model given as the cell's spec YAML and network
instead of Stan code. NAME is SPEC-CELL_ID, DATA is SPEC_data_HASH (cells fitted to the
same points share it):

  posteriors/NAME.json                            model_name, data_name, dimensions
  models/info/CELL.info.json                      the network: sites, shapes, prior
  models/zoo/CELL.yaml                            the cell's spec (zoo run on it reruns it)
  data/info/DATA.info.json                        the arrays, dtypes, data section, seed
  data/data/DATA.json.zip                         x, y (training), x_test, y_test
  reference_posteriors/draws/info/NAME.info.json  posteriordb's diagnostics (per parameter
      R-hat, bulk and tail ESS of the stored draws, E-FMI) and checks, the same of every
      draw, per cell split and nested R-hat, ESS, divergences, the grade and the gates that
      kept it from the next one, the run's spec.yaml SHA-256, the cell's config hash, the
      git commit of the exporting code
  reference_posteriors/draws/draws/NAME.json.zip  the thinned draws: one JSON object per
      chain, keyed by parameter (layer0.weight[i,j], 1-based as in posteriordb), values
      bit for bit
"""
EPILOG = f"""\
Read them back in Python, draws bit for bit, as ArviZ DataTrees:
  import zoo.references
  zoo.references.names("DIR")                  the posteriors of DIR
  dt = zoo.references.load(NAME, "DIR")        posterior, observed_data, constant_data, ...
  zoo.references.reference_info(dt)["reference_grade"]
Without "DIR" they read the references shipped with bnn-zoo (docs/references.md).

examples:
  zoo export runs/mine --out refs                       every graded cell, {DEFAULT_MAX_DRAWS} draws each
  zoo export runs/mine --out refs --min-grade silver    only silver and gold
  zoo export runs/mine --out refs --max-draws 2000      more draws (bigger files)

exit status: 0 written; 2 bad input (not a run directory, no graded sampled cell, a record
whose grade is not one, --out a link, a file or a non-empty directory) or a failed write (a
full disk): --out is left as it was then (the files are written beside it and renamed into
place once whole). Cells still running or failed are left out and listed; nothing is ever
written outside --out or through a link.
"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``zoo export`` on the ``zoo`` subcommand parser."""
    e = sub.add_parser(
        "export",
        help="write a run's graded reference posteriors in posteriordb's layout",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    e.add_argument("run_dir", metavar="RUN_DIR", help="a run directory (zoo run --out)")
    e.add_argument(
        "--out",
        required=True,
        metavar="DIR",
        help="the database directory to write: new, or empty (not a link)",
    )
    e.add_argument(
        "--max-draws",
        type=int,
        default=DEFAULT_MAX_DRAWS,
        metavar="N",
        help=f"draws kept per posterior, chains together (default {DEFAULT_MAX_DRAWS}); "
        "each chain is thinned alike; posteriordb's diagnostics are of the kept draws, those "
        "of every draw are kept beside them",
    )
    e.add_argument(
        "--min-grade",
        choices=["gold", "silver", "bronze", "failed"],
        default="bronze",
        help="leave out cells below this reference grade (default bronze: predictions "
        "usable; silver and gold: weights too; failed: every graded cell)",
    )
