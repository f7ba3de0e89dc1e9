"""What a worker killed mid-run leaves (its runs' scratch directories; their cgroups:
test_cgroups) is removed by the next worker of the same host, and nothing else is."""

from __future__ import annotations

import os
import socket
import tempfile
from pathlib import Path

import pytest

from hargo_hpc.bench import run_request, stale
from hargo_hpc.bench.reference import kernel_source

from .procs import dead_pid


def test_a_runs_name_carries_its_worker() -> None:
    host = socket.gethostname()
    assert stale.owned_prefix() == f"hargo-run-{os.getpid()}@{host}-"
    assert stale.owner(f"{stale.owned_prefix()}x1_y") == (os.getpid(), host)
    assert stale.owner("hargo-run-12@node-a-b-tok") == (12, "node-a-b")
    for other in ("hargo-test-12", "hargo-run-12-tok", "hargo-run-x@h-t", "hargo-run-1@h",
                  "hargo-run-1@-t", "hargo-run-@h-t"):
        assert stale.owner(other) is None, other


def test_is_stale_only_for_a_dead_worker_of_this_host() -> None:
    host, dead = socket.gethostname(), dead_pid()
    assert stale.is_stale(f"hargo-run-{dead}@{host}-a")
    assert not stale.is_stale(f"hargo-run-{os.getpid()}@{host}-a")  # alive
    assert not stale.is_stale(f"hargo-run-1@{host}-a")  # init: alive (another user's: still)
    assert not stale.is_stale(f"hargo-run-{dead}@not-{host}-a")  # another host's pid space
    assert not stale.is_stale(f"hargo-build-{dead}@{host}-a")


def test_the_next_run_removes_a_dead_workers_scratch(settings, cache_dir, run_tmp) -> None:
    """A dead worker's run directory (with its files) goes at the next run in the same temp
    directory; a live worker's, another host's and an unrelated one stay, and the run leaves
    nothing of its own."""
    host, dead = socket.gethostname(), dead_pid()
    assert tempfile.gettempdir() == str(run_tmp)
    made = {name: run_tmp / name for name in (
        f"hargo-run-{dead}@{host}-abc", f"hargo-run-{os.getpid()}@{host}-def",
        f"hargo-run-{dead}@other-{host}-ghi", "hargo-run-jkl")}
    for path in made.values():
        path.mkdir()
        (path / "channel.txt").write_text("left behind")
    rec = run_request({"id": "s", "completion": kernel_source("naive")}, settings,
                      cache_dir=cache_dir)
    assert rec["status"] == "ok"
    left = sorted(p.name for p in run_tmp.iterdir())
    assert left == sorted(list(made)[1:]), left


def test_the_sweep_runs_once_per_process_and_directory(tmp_path: Path) -> None:
    host = socket.gethostname()
    first = tmp_path / f"hargo-run-{dead_pid()}@{host}-a"
    first.mkdir()
    assert stale.sweep_scratch(tmp_path) == [first] and not first.exists()
    again = tmp_path / f"hargo-run-{dead_pid()}@{host}-b"
    again.mkdir()
    assert stale.sweep_scratch(tmp_path) == []  # swept already by this process
    assert again.is_dir()
    with pytest.raises(FileNotFoundError):
        (tmp_path / "absent").stat()
    assert stale.sweep_scratch(tmp_path / "absent") == []
