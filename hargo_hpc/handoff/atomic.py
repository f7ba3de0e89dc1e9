"""Lock-free file primitives for a shared filesystem (NFS, Lustre, GPFS): no flock anywhere.

- `write_atomic`: `hargo_hpc.files.write_atomic` of the JSON (temp name, fsync, rename).
  A reader sees the old file or the new one, never a part.
- `create_exclusive`: temp name, write, fsync, then `link` it to the final name. `link` fails
  with EEXIST when the name exists, on every POSIX filesystem including NFS, so exactly one
  of many concurrent writers creates the file, and it appears with its full content.
- `open_exclusive`: O_EXCL create at the final name, for claims (name taken atomically,
  content informational).
- `touch`: renew a lease by changing the file's mtime.

OS errors become `HandoffError` with one line that says what happened (full disk, read-only
or missing directory), so neither side crashes with a traceback on an ordinary failure.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any

from hargo_hpc import files
from hargo_hpc.handoff.errors import SchemaError, describe
from hargo_hpc.handoff.layout import TEMP_PREFIX


def encode(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()


def write_temp(directory: Path, obj: Any, *, fsync: bool = True) -> Path:
    """JSON `obj` in a new temp file of `directory` (readers skip it); returns its path."""
    try:
        return files.write_temp(directory, encode(obj), prefix=TEMP_PREFIX, fsync=fsync)
    except OSError as err:
        raise describe(err, "write a file in", directory) from None


def write_atomic(path: Path, obj: Any, *, fsync: bool = True) -> None:
    """Replace `path` with JSON `obj`; readers see the old or the new file, never a part."""
    try:
        files.write_atomic(path, encode(obj), prefix=TEMP_PREFIX, fsync=fsync)
    except OSError as err:
        raise describe(err, "write", path) from None


def create_exclusive(path: Path, obj: Any, *, fsync: bool = True) -> bool:
    """Create `path` holding JSON `obj` unless it exists; True when this call created it."""
    tmp = write_temp(path.parent, obj, fsync=fsync)
    try:
        return link_exclusive(tmp, path)
    finally:
        files.unlink_quietly(tmp)


def open_exclusive(path: Path, obj: Any) -> bool:
    """Create `path` with O_EXCL and write JSON `obj` into it; False when it already exists.

    The name is taken atomically, but the content appears just after it (a reader may see an
    empty or partial file). Only for claims, whose content is informational: the protocol
    reads their names and mtimes, never their content.
    """
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return False
    except OSError as err:
        raise describe(err, "create", path) from None
    # The name is ours now. The content is informational: if writing it fails (ENOSPC,
    # EDQUOT, often reported only at close over NFS), the claim is still held by this caller.
    with contextlib.suppress(OSError):
        try:
            os.write(fd, encode(obj))
        finally:
            os.close(fd)
    return True


def link_exclusive(source: Path, path: Path) -> bool:
    """Hard-link `source` as `path`; False when `path` already exists (another writer won)."""
    try:
        os.link(source, path)
    except FileExistsError:
        # Over NFS a retransmitted LINK whose first reply was lost answers EEXIST although it
        # succeeded: the private temp file then has a second name, the one we asked for.
        return _linked(source)
    except OSError as err:
        if _linked(source):
            return True
        raise describe(err, "link", path) from None
    return True


def _linked(source: Path) -> bool:
    """True when `source` (a private temp file) has gained a second name: our link worked."""
    try:
        return os.stat(source).st_nlink >= 2
    except OSError:
        return False


def read_json(path: Path) -> dict[str, Any]:
    """Parse a JSON object; SchemaError for empty, truncated or corrupt content.

    FileNotFoundError passes through: a file that vanished is the caller's business.
    """
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise
    except OSError as err:
        raise describe(err, "read", path) from None
    try:
        obj = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise SchemaError(f"{path}: corrupt or truncated JSON ({err})") from None
    if not isinstance(obj, dict):
        raise SchemaError(f"{path}: expected a JSON object, got {type(obj).__name__}")
    return obj


def touch(path: Path) -> int:
    """Renew: set mtime to now and return the new mtime in ns (raises FileNotFoundError).

    If the filesystem's timestamp granularity hides the change (same mtime as before), the
    mtime is bumped by one second so that observers always see the lease move.
    """
    before = os.stat(path).st_mtime_ns
    os.utime(path, None)
    after = os.stat(path).st_mtime_ns
    if after == before:
        after = before + 1_000_000_000
        os.utime(path, ns=(after, after))
    return after
