"""What every ``zoo`` command shares: bad input (:class:`UsageError`)."""

from __future__ import annotations

__all__ = ["UsageError"]


class UsageError(Exception):
    """Bad input that is not a spec validation error."""
