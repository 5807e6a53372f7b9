"""``zoo validate``, ``zoo schema`` and ``zoo list``: the spec alone, without torch."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import textwrap

from zoo.execution.preflight import check_data, check_widths
from zoo.execution.usage import UsageError
from zoo.shipped import DEFAULT_SPEC, resolve_spec, shipped_dir, shipped_specs
from zoo.spec import Spec, SpecError, load_spec
from zoo.spec.tuning import cells_text

__all__ = ["cmd_list", "cmd_schema", "cmd_validate"]


def cmd_validate(a: argparse.Namespace) -> int:
    """``zoo validate SPEC...``: every problem of each spec with its line (2 if any)."""
    bad = 0
    for path in a.specs:
        try:
            spec = load_spec(resolve_spec(path), a.overrides)
            check_data(spec, missing_ok=True)
            check_widths(spec)
            what = cells_text(spec)
            print(f"{path}: ok ({'a simulation' if what == 'simulation' else what})")
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
    """``zoo list``: the shipped specs, their cells and descriptions, within the terminal.

    Each name works as ``zoo run NAME`` from any directory (:func:`zoo.shipped.resolve_spec`);
    the README's first spec is marked ``(default)``, a simulation says so instead of a
    cell count, and each description wraps under its own column.
    """
    specs = shipped_specs()
    if not specs:
        raise UsageError(
            f"no shipped specs found (looked in {shipped_dir() or 'zoo/_specs and specs/'}); "
            "reinstall bnn-zoo"
        )
    width = max(shutil.get_terminal_size((100, 24)).columns, 60)
    rows = []
    for path in specs:
        name = path.name + (" (default)" if path.stem == DEFAULT_SPEC else "")
        try:
            spec = load_spec(path)
            what = cells_text(spec, short=True)
            desc = " ".join(spec.description.split()) or "(no description)"
        except SpecError:
            what, desc = "INVALID", f"zoo validate {path}"
        rows.append((name, what, desc))
    left = max(len(n) for n, _, _ in rows) + 2
    mid = max(len(w) for _, w, _ in rows) + 2
    indent = " " * (left + mid)
    for name, what, desc in rows:
        lines = textwrap.wrap(desc, max(width - len(indent), 30), break_on_hyphens=False) or [""]
        print(f"{name:<{left}}{what:<{mid}}{lines[0]}")
        for line in lines[1:]:
            print(indent + line)
    print(f"\nrun one by name from any directory: zoo run {DEFAULT_SPEC}")
    return 0
