"""Atomic file writes: the one write-temp-then-rename of the project.

Used by the resolved config, the roof store, the compile cache and the handoff; `read_jsonl`
and `last_record` read back the append-only JSONL logs. A file (or a
directory) is written under a private temporary name in the target's directory and put in place
with one `rename`, so a reader sees the old content or the new one, never a part, and a crash
leaves at most a temporary name that readers skip.

OS errors pass through as `OSError` (the temporary name already removed); callers that owe
their users a one-line message (the handoff's `describe`) translate them.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

TEMP_PREFIX = ".tmp-"


def temp_name(directory: Path, prefix: str = TEMP_PREFIX) -> Path:
    """A fresh private name in `directory` (not created)."""
    return directory / f"{prefix}{secrets.token_hex(6)}"


def write_temp(
    directory: Path, data: bytes, *, prefix: str = TEMP_PREFIX, fsync: bool = True,
    mode: int = 0o644,
) -> Path:
    """`data` in a new file under a private name in `directory`; returns its path.

    Created with O_EXCL, written in full, fsync'ed when asked; removed again on any failure.
    """
    tmp = temp_name(directory, prefix)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
    except BaseException:
        unlink_quietly(tmp)
        raise
    return tmp


def write_atomic(
    path: str | os.PathLike[str], data: bytes | str, *, prefix: str = TEMP_PREFIX,
    fsync: bool = True, mode: int = 0o644,
) -> None:
    """Replace `path` with `data` (str is written as UTF-8) in one rename."""
    target = Path(path)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    tmp = write_temp(target.parent, raw, prefix=prefix, fsync=fsync, mode=mode)
    try:
        os.replace(tmp, target)
    except BaseException:
        unlink_quietly(tmp)
        raise


@contextlib.contextmanager
def publish_directory(final: Path, mode: int = 0o755) -> Iterator[Path]:
    """Fill a private directory next to `final` inside the `with`; then rename it to `final`.

    When `final` already exists (another writer published first: ENOTEMPTY or EEXIST), the
    first one stays and ours is dropped. On an exception inside the `with` nothing is published.
    """
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f"{TEMP_PREFIX}{final.name[:12]}-", dir=final.parent))
    try:
        yield tmp
        os.chmod(tmp, mode)
        try:
            os.rename(tmp, final)
        except OSError:
            if not final.is_dir():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def unlink_quietly(path: Path) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


def read_jsonl(path: Path) -> list[Any]:
    """The records of a JSONL file that others append to (metrics, SQD results): [] when it
    does not exist; a line that does not parse (half written when its writer was killed) is
    skipped."""
    if not path.is_file():
        return []
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records


def last_record(path: Path, chunk: int = 65536) -> dict[str, Any] | None:
    """The last complete JSON object of a JSONL file, reading only its tail.

    A last line without its newline is being appended right now: it is skipped, as is any
    line that does not parse. None when the file is missing or holds no such line.
    """
    try:
        with path.open("rb") as handle:
            end = start = handle.seek(0, 2)
            while start > 0:
                start = max(0, start - chunk)
                chunk *= 2  # a record longer than the block: read twice as far back
                handle.seek(start)
                found = _last_object(handle.read(end - start), whole=start == 0)
                if found is not None:
                    return found
    except OSError:
        pass
    return None


def _last_object(data: bytes, *, whole: bool) -> dict[str, Any] | None:
    lines = data.split(b"\n")
    lines.pop()  # after the last newline: empty, or a torn line
    if not whole and lines:
        lines.pop(0)  # the block may start mid-line
    for line in reversed(lines):
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict):
            return obj
    return None
