"""A uid of its own for every sandboxed request, from a configured range (`bench.sandbox_uids`).

With its own uid a request's threads count only against its own RLIMIT_NPROC, and it cannot
signal, re-pin (sched_setaffinity) or read the memory of another request, of the judge or of the
reference process: the kernel refuses such calls across uids. Any uid works with setresuid as
root, without an /etc/passwd entry, so the range needs no accounts.

A uid is leased by creating `<lease dir>/<uid>` with O_EXCL; the file holds the holder's pid,
and a lease whose holder is gone (a worker killed with -9) is taken over; a uid that a live
process runs as is skipped, leased or not. The lease directory
is node-local shared memory (`/dev/shm`), so every worker of a node sees the same leases
(`$HARGO_UID_LEASE_DIR` overrides it; the test suite points it into its temporary directory).

Without root there is no uid to drop to: the request keeps the worker's uid, and the record
says so (`sandbox_unavailable`).
"""

from __future__ import annotations

import contextlib
import os
import random
import tempfile
from collections.abc import Iterator
from pathlib import Path

from hargo_hpc.bench.sandbox import InfraError

LEASE_DIR_NAME = "hargo-uids"


def parse_range(text: str) -> range:
    """ "61000-61999" -> range(61000, 62000); raise ValueError with one line otherwise."""
    low, sep, high = text.partition("-")
    try:
        first, last = int(low), int(high if sep else low)
    except ValueError:
        raise ValueError(f"bench.sandbox_uids: {text!r} is not a range like 61000-61999") from None
    if not 0 < first <= last < 2**31 - 1:
        raise ValueError(f"bench.sandbox_uids: {text!r} must be within 1..2147483646, low-high")
    return range(first, last + 1)


def lease_dir() -> Path:
    """`$HARGO_UID_LEASE_DIR`, else `/dev/shm/hargo-uids` (else under the temp dir)."""
    if os.environ.get("HARGO_UID_LEASE_DIR"):
        path = Path(os.environ["HARGO_UID_LEASE_DIR"])
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        return path
    base = Path("/dev/shm") if os.access("/dev/shm", os.W_OK) else Path(tempfile.gettempdir())
    path = base / LEASE_DIR_NAME
    path.mkdir(mode=0o700, exist_ok=True)
    return path


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie holds nothing
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return True


def _try(path: Path) -> bool:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        try:
            holder = int(path.read_text() or "0")
        except (OSError, ValueError):
            return False  # being written right now
        if holder and not _alive(holder):
            with contextlib.suppress(OSError):
                path.unlink()  # a dead holder's lease: whoever creates it next wins
        return False
    with os.fdopen(fd, "w") as fh:
        fh.write(str(os.getpid()))
    return True


def _running_uids() -> set[int]:
    """The real uids of the live processes (from /proc): a uid some process runs as is not
    free, whatever the lease directory says (a test suite's private leases beside a node's
    workers, a process that outlived its lease)."""
    found = set()
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            text = status.read_text()
        except OSError:
            continue  # gone meanwhile
        for line in text.splitlines():
            if line.startswith("Uid:"):
                found.add(int(line.split()[1]))
                break
    return found


@contextlib.contextmanager
def leased_uid(spec: str) -> Iterator[int | None]:
    """A uid of `spec` for the `with` block (None when not root or `spec` is ''); released at
    the end. Raises InfraError when every uid of the range is taken."""
    if os.geteuid() != 0 or not spec:
        yield None
        return
    uids = parse_range(spec)
    directory = lease_dir()
    start = random.randrange(len(uids))  # workers start at different places: few collisions
    for _ in range(2):  # the second pass takes the leases freed from dead holders in the first
        for i in range(len(uids)):
            uid = uids[(start + i) % len(uids)]
            path = directory / str(uid)
            if _try(path):
                if uid in _running_uids():  # run by someone with another lease directory
                    with contextlib.suppress(OSError):
                        path.unlink()
                    continue
                try:
                    yield uid
                finally:
                    with contextlib.suppress(OSError):
                        path.unlink()
                return
    raise InfraError(f"every sandbox uid of {spec} is leased (more concurrent requests than uids)")
