"""A cgroup per run (pids, cpuset), created below the worker's own groups and removed after."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

from hargo_hpc.bench import cgroups, run_request
from hargo_hpc.bench.reference import kernel_source
from hargo_hpc.bench.stale import owned_prefix

from .procs import dead_pid


def test_a_run_group_confines_its_processes_and_is_removed(tmp_path: Path) -> None:
    name = f"hargo-test-{os.getpid()}"
    with cgroups.run_cgroup(name, pids_max=40) as (group, why):
        if group is None:  # only without root: then the reason must say why
            assert os.geteuid() != 0, why
            assert why.startswith("cgroup (")
            return
        out = tmp_path / "inside"
        child = subprocess.run(["cat", "/proc/self/cgroup"], stdout=out.open("w"),
                               preexec_fn=group.enter, check=True)  # fmt: skip
        assert child.returncode == 0
        lines = out.read_text()
        assert name in lines
        pids = next(d for d in group.dirs if "pids" in str(d) or group.version == 2)
        assert (pids / "pids.max").read_text().strip() == "40"
        cpus = next(d for d in group.dirs if "cpuset" in str(d) or group.version == 2)
        allowed = {int(c) for part in (cpus / "cpuset.cpus").read_text().strip().split(",")
                   for c in _expand(part)}  # fmt: skip
        assert allowed == set(os.sched_getaffinity(0))
        dirs = list(group.dirs)
    assert not any(d.exists() for d in dirs)


def test_a_dead_workers_group_is_removed_with_what_it_left_running() -> None:
    """A worker killed mid-run leaves its group and the run's process in it; the next group
    created beside it removes both. A live worker's group and another host's are left."""
    host, dead = socket.gethostname(), dead_pid()
    names = {"live": f"{owned_prefix()}b", "elsewhere": f"hargo-run-{dead}@not-{host}-c",
             "stale": f"hargo-run-{dead}@{host}-a"}  # last: creating a group sweeps it
    groups: dict[str, cgroups.RunCgroup] = {}
    sleeper = None
    try:
        for key, name in names.items():
            group, why = cgroups.create(name, pids_max=8)
            if group is None:  # only without root: then the reason must say why
                assert os.geteuid() != 0, why
                return
            groups[key] = group
        sleeper = subprocess.Popen(["sleep", "600"], preexec_fn=groups["stale"].enter)
        with cgroups.run_cgroup(f"{owned_prefix()}d", pids_max=8) as (group, _):
            assert group is not None
        assert sleeper.wait(timeout=10) == -9  # killed by the sweep
        assert not any(d.exists() for d in groups["stale"].dirs)
        assert all(d.is_dir() for key in ("live", "elsewhere") for d in groups[key].dirs)
    finally:
        if sleeper is not None and sleeper.poll() is None:
            sleeper.kill()
            sleeper.wait()
        for group in groups.values():
            group.remove()


def _expand(part: str) -> range:
    low, _, high = part.partition("-")
    return range(int(low), int(high or low) + 1)


def test_each_run_reports_its_group(settings, cache_dir, run_tmp) -> None:
    # another process's group (a worker killed mid-run leaves its own) is not this run's
    before = set(Path(cgroups.ROOT).glob("*/hargo-run-*"))
    rec = run_request({"id": "g", "completion": kernel_source("naive")}, settings,
                      cache_dir=cache_dir)  # fmt: skip
    assert rec["status"] == "ok"
    layers = [x for x in rec["sandbox"] if x.startswith("cgroup:")]
    missing = [x for x in rec["sandbox_unavailable"] if x.startswith("cgroup")]
    assert len(layers) + len(missing) == 1, (rec["sandbox"], rec["sandbox_unavailable"])
    compile_layers = [x for x in rec["sandbox"] + rec["sandbox_unavailable"] if "mountns" in x]
    assert compile_layers, rec["sandbox"]
    assert set(Path(cgroups.ROOT).glob("*/hargo-run-*")) <= before  # removed after the run
