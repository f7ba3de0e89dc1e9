"""A stored roof never changes a reward (F: the roof measured under load once made the fastest
kernels worth 0): `hargo bench run` of the shipped blocked kernel, with a roof file that claims
this machine does 1 GFLOPS, is ok and rewarded by the reference timed in its own run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from hargo_hpc.bench.reference import kernel_source


def test_a_roof_of_one_gflops_changes_nothing(tmp_path: Path, scratch_root: Path) -> None:
    roof = tmp_path / "roof.json"
    host, threads = os.uname().nodename, len(os.sched_getaffinity(0))
    roof.write_text(json.dumps({f"{host}/threads={threads}/size={n}": {"gflops": 1.0}
                                for n in (64, 128, 256)}))  # fmt: skip
    kernel = tmp_path / "blocked.c"
    kernel.write_text(kernel_source("blocked"))
    env = {**os.environ, "HARGO_ROOF_FILE": str(roof), "TMPDIR": str(scratch_root)}
    done = subprocess.run([sys.executable, "-m", "hargo_hpc", "bench", "run", str(kernel),
                           "--size", "128", "--reps", "3", "--json"],
                          capture_output=True, text=True, timeout=120, env=env)  # fmt: skip
    assert done.returncode == 0, done.stderr
    rec = json.loads(done.stdout)
    assert rec["status"] == "ok" and not rec["suspicious"], rec["reason"]
    assert rec["gflops"]["median"] > 1.0 and rec["reward"] > 0
    q = rec["ratio"]
    assert rec["reward"] == (100 * q if q <= 1 else 100 * (2 - 1 / q))
    assert json.loads(roof.read_text())[f"{host}/threads={threads}/size=128"] == {"gflops": 1.0}
