"""A cgroup per run (pids, cpuset), created below the worker's own groups and removed after."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from hargo_hpc.bench import cgroups, run_request
from hargo_hpc.bench.reference import kernel_source


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
