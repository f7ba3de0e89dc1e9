"""Errors of the handoff: one-line messages meant for the user or the log."""

from __future__ import annotations


class HandoffError(RuntimeError):
    """A handoff operation that cannot go on (missing or read-only directory, full disk, ...)."""


class SchemaError(ValueError):
    """A handoff file that is not valid JSON of a known kind and supported version."""
