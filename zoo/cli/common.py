"""What every ``zoo`` command shares: bad input (:class:`UsageError`) and loading a spec."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

from zoo.spec import SpecDeprecationWarning, load_spec

__all__ = ["UsageError", "load_spec_quietly"]


class UsageError(Exception):
    """Bad input that is not a spec validation error."""


def load_spec_quietly(path: str | Path, overrides: list[str] = (), *, warn: bool = True):
    """Load a spec; its deprecation messages go to stderr as plain FILE:LINE:COL lines."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", SpecDeprecationWarning)
        spec = load_spec(path, overrides)
    for w in caught:
        if issubclass(w.category, SpecDeprecationWarning):
            if warn:
                print(f"zoo: deprecated: {w.message}", file=sys.stderr)
        else:  # not ours to silence
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return spec
