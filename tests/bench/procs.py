"""Which sandboxed processes are still alive (tests assert none survive their run)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from hargo_hpc.bench.settings import BenchSettings
from hargo_hpc.bench.uids import parse_range

# The node's workers lease their uids here (the suite leases in its own directory): a uid
# leased here belongs to a worker running beside the suite (a submission), not to a test.
NODE_LEASES = Path("/dev/shm/hargo-uids")


def sandbox_processes() -> list[str]:
    """Live processes of a sandbox uid (the leased range, or nobody) but those the node's own
    workers hold a lease on; [] when not root."""
    if os.geteuid() != 0:
        return []
    uids = {*map(str, parse_range(BenchSettings().sandbox_uids)), "65534"}
    uids -= set(os.listdir(NODE_LEASES)) if NODE_LEASES.is_dir() else set()
    found = []
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            text = status.read_text()
        except OSError:
            continue
        uid = next((ln.split()[1] for ln in text.splitlines() if ln.startswith("Uid:")), "")
        if uid in uids and "State:\tZ" not in text:
            found.append(text.splitlines()[0])
    return found


def dead_pid() -> int:
    """The pid of a process that has exited (checked: not reused since)."""
    while True:
        child = subprocess.Popen(["true"])
        child.wait()
        try:
            os.kill(child.pid, 0)
        except ProcessLookupError:
            return child.pid
