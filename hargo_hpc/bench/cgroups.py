"""A cgroup of its own for every sandboxed run, where the worker may create one.

`run_cgroup(name, pids_max=)` (or `create`) makes a `pids` + `cpuset` group below the
worker's own group in each hierarchy (v1 or v2), limited to the worker's CPUs; the run's first
process `enter`s it before its exec, and it is emptied and removed after. `sweep_stale`
removes the groups a dead worker of this host left. What the layer stops, and what remains
without it: docs/bench.md, "Sandbox: what each layer stops" and "The run's cgroup".
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from hargo_hpc.bench.stale import stale_in

ROOT = Path("/sys/fs/cgroup")
V1_CONTROLLERS = ("pids", "cpuset")


@dataclass
class RunCgroup:
    """The directories of one run's group (one per v1 hierarchy, or one v2 group)."""

    dirs: list[Path]
    version: int

    def procs_files(self) -> list[str]:
        """Where the run's first process writes its pid (before its exec)."""
        return [str(d / "cgroup.procs") for d in self.dirs]

    def enter(self) -> None:
        """Move the calling process in (called in the child between fork and exec)."""
        pid = str(os.getpid())
        for path in self.procs_files():
            with open(path, "w") as fh:
                fh.write(pid)

    def remove(self, timeout_s: float = 5.0) -> None:
        """Kill whatever is left in the group, then remove it (bounded wait)."""
        end = time.monotonic() + timeout_s
        for directory in self.dirs:
            while True:
                pids = _pids(directory)
                if not pids or time.monotonic() > end:
                    break
                for pid in pids:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(pid, signal.SIGKILL)
                time.sleep(0.002)
            with contextlib.suppress(OSError):
                directory.rmdir()


def _pids(directory: Path) -> list[int]:
    try:
        return [int(x) for x in (directory / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []


def sweep_stale(parent: Path, version: int) -> list[Path]:
    """Remove the run groups in `parent` left by a dead worker of this host (`stale.stale_in`),
    killing what is left in them; returns them."""
    found = stale_in(parent)
    for directory in found:
        RunCgroup([directory], version).remove(timeout_s=1.0)
    return found


def _own_path(controller: str) -> str | None:
    """This process's group in hierarchy `controller` ('' for v2), from /proc/self/cgroup."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, names, path = line.split(":", 2)
        found = controller in names.split(",") if controller else names == ""
        if found:
            return path
    return None


def _write(path: Path, value: str) -> None:
    with open(path, "w") as fh:
        fh.write(value)


def _cpus() -> str:
    return ",".join(str(c) for c in sorted(os.sched_getaffinity(0)))


def create(name: str, *, pids_max: int) -> tuple[RunCgroup | None, str]:
    """A fresh group `name` for one run, or (None, why not)."""
    try:
        if (ROOT / "cgroup.controllers").is_file():
            return _create_v2(name, pids_max), ""
        if all((ROOT / c).is_dir() for c in V1_CONTROLLERS):
            return _create_v1(name, pids_max), ""
    except OSError as err:
        return None, f"cgroup (cannot create one here: {err.strerror or err})"
    return None, "cgroup (no pids and cpuset controllers mounted)"


def _create_v1(name: str, pids_max: int) -> RunCgroup:
    made: list[Path] = []
    try:
        for controller in V1_CONTROLLERS:
            own = _own_path(controller)
            if own is None:
                raise OSError(0, f"this process has no {controller} group")
            parent = ROOT / controller / own.lstrip("/")
            sweep_stale(parent, 1)
            directory = parent / name
            directory.mkdir()
            made.append(directory)
            if controller == "pids":
                _write(directory / "pids.max", str(pids_max))
            else:  # cpuset needs both set before a process may enter
                _write(directory / "cpuset.cpus", _cpus())
                _write(directory / "cpuset.mems", (directory.parent / "cpuset.mems").read_text())
    except OSError:
        RunCgroup(made, 1).remove()
        raise
    return RunCgroup(made, 1)


def _create_v2(name: str, pids_max: int) -> RunCgroup:
    own = _own_path("")
    if own is None:
        raise OSError(0, "this process has no cgroup v2 group")
    parent = ROOT / own.lstrip("/")
    enabled = set((parent / "cgroup.subtree_control").read_text().split())
    missing = {"pids", "cpuset"} - enabled
    if missing:
        raise OSError(0, f"controllers {', '.join(sorted(missing))} not delegated to {parent}")
    sweep_stale(parent, 2)
    directory = parent / name
    directory.mkdir()
    group = RunCgroup([directory], 2)
    try:
        _write(directory / "pids.max", str(pids_max))
        _write(directory / "cpuset.cpus", _cpus())
    except OSError:
        group.remove()
        raise
    return group


@contextlib.contextmanager
def run_cgroup(name: str, *, pids_max: int) -> Iterator[tuple[RunCgroup | None, str]]:
    """(group or None, why not) for the `with` block; the group is removed at the end."""
    group, why = create(name, pids_max=pids_max)
    try:
        yield group, why
    finally:
        if group is not None:
            group.remove()
