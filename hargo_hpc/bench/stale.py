"""What a run leaves behind when its worker is killed mid-run, and the sweep that removes it.

Each run's scratch directory and cgroup are named for the worker that made them:

    hargo-run-<pid>@<host>-<token>

A worker killed by SIGKILL (a node's OOM killer, `scancel --signal=KILL`, a failed node) cannot
remove them. Whatever makes the next one beside them removes those of a dead worker of its own
host: the hostname says whose pid space the pid belongs to (nodes that share a filesystem or a
cgroup tree have their own hostnames), and a pid that no longer exists there says the worker is
gone. A live worker's, another host's, and a name of any other form are left alone.
"""

from __future__ import annotations

import os
import shutil
import socket
from pathlib import Path

PREFIX = "hargo-run-"
_SWEPT: set[tuple[int, str]] = set()  # (pid, directory): scratch directories swept already


def owned_prefix() -> str:
    """`hargo-run-<pid>@<host>-`: the start of the name of each of this worker's runs."""
    return f"{PREFIX}{os.getpid()}@{socket.gethostname()}-"


def owner(name: str) -> tuple[int, str] | None:
    """(pid, host) of the worker a run's name names; None for a name of another form (the
    token after the last '-' has none itself, as `tempfile.mkdtemp`'s do not)."""
    if not name.startswith(PREFIX):
        return None
    pid, at, rest = name[len(PREFIX):].partition("@")
    host, dash, token = rest.rpartition("-")
    if not (at and dash and pid.isdigit() and host and token):
        return None
    return int(pid), host


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def is_stale(name: str) -> bool:
    """Whether `name` is a run of a dead worker of this host."""
    found = owner(name)
    return found is not None and found[1] == socket.gethostname() and not _alive(found[0])


def stale_in(directory: str | Path) -> list[Path]:
    """The subdirectories of `directory` that are runs of a dead worker of this host
    (`is_stale`); [] when it cannot be read."""
    try:
        return [p for p in Path(directory).iterdir() if is_stale(p.name) and p.is_dir()]
    except OSError:
        return []


def sweep_scratch(directory: str | Path) -> list[Path]:
    """Remove the stale run directories in `directory` (`stale_in`), once per process and
    directory; returns them."""
    key = (os.getpid(), str(directory))
    if key in _SWEPT:
        return []
    _SWEPT.add(key)
    found = stale_in(directory)
    for path in found:
        shutil.rmtree(path, ignore_errors=True)
    return found
