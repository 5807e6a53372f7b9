"""``zoo validate``, ``zoo schema`` and ``zoo list``: the spec alone, without torch."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from zoo.cli.checks import check_data, check_widths
from zoo.cli.common import UsageError
from zoo.spec import Spec, SpecError, load_spec

__all__ = ["cmd_list", "cmd_schema", "cmd_validate"]


def _specs_dir() -> Path:
    here = Path.cwd() / "specs"
    if here.is_dir():
        return here
    return Path(__file__).resolve().parents[2] / "specs"


def cmd_validate(a: argparse.Namespace) -> int:
    """``zoo validate SPEC...``: every problem of each spec with its line (2 if any)."""
    bad = 0
    for path in a.specs:
        try:
            spec = load_spec(path, a.overrides)
            check_data(spec, missing_ok=True)
            check_widths(spec)
            what = "a simulation" if spec.simulation is not None else f"{len(spec.cells())} cells"
            print(f"{path}: ok ({what})")
        except SpecError as e:
            bad += 1
            print("\n".join(e.messages), file=sys.stderr)
        except UsageError as e:  # data that cannot be trained on
            bad += 1
            print(f"zoo: {path}: {e}", file=sys.stderr)
    return 2 if bad else 0


def cmd_schema(a: argparse.Namespace) -> int:
    """``zoo schema``: the JSON Schema of a spec, for editor completion."""
    print(json.dumps(Spec.model_json_schema(), indent=2))
    return 0


def cmd_list(a: argparse.Namespace) -> int:
    """``zoo list``: the shipped specs with their cells and descriptions."""
    d = _specs_dir()
    for path in sorted(d.glob("*.yaml")):
        try:
            spec = load_spec(path)
            desc = " ".join(spec.description.split()) or "(no description)"
            print(f"{path.name:<32} {len(spec.cells()):>4} cells  {desc}")
        except SpecError:
            print(f"{path.name:<32}  INVALID (zoo validate {path})")
    return 0
