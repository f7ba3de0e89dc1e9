"""Errors of the handoff: one-line messages meant for the user or the log."""

from __future__ import annotations

import errno
from pathlib import Path

from hargo_hpc.errors import HargoError


class HandoffError(HargoError, RuntimeError):
    """A handoff operation that cannot go on (missing or read-only directory, full disk, ...)."""


class SchemaError(HargoError, ValueError):
    """A handoff file that is not valid JSON of a known kind and supported version."""


_HINTS = {
    errno.ENOSPC: "no space left on device",
    errno.EDQUOT: "disk quota exceeded",
    errno.EROFS: "read-only filesystem",
    errno.EACCES: "permission denied (read-only directory?)",
    errno.EPERM: "operation not permitted",
    errno.ENOENT: "directory does not exist",
    errno.ENOTDIR: "not a directory",
    errno.ESTALE: "stale file handle (NFS)",
    errno.EIO: "input/output error",
}


def describe(err: OSError, action: str, path: Path | str) -> HandoffError:
    """One line for an OS error: what we tried, where, and the likely cause."""
    hint = _HINTS.get(err.errno or 0, err.strerror or str(err))
    return HandoffError(f"cannot {action} {path}: {hint}")
