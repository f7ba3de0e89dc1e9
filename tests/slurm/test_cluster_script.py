"""scripts/slurm-cluster.sh: idempotent up, crash recovery, down by pid file, clear refusals."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from staging import readable_copy
from waiting import wait_until

REPO = Path(__file__).resolve().parents[2]
SCRIPT = str(REPO / "scripts" / "slurm-cluster.sh")
DAEMONS = ("munged", "mariadbd", "slurmdbd", "slurmctld", "slurmd")

pytestmark = pytest.mark.slurm


def cluster(action: str, state: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([SCRIPT, action, state], capture_output=True, text=True, timeout=180,
                          env={**os.environ, **env})


def running_pids(state: str) -> dict[str, int]:
    """The daemons of the cluster in `state` that are alive (pid file + /proc)."""
    alive = {}
    for name in DAEMONS:
        pidfile = Path(state, "run", f"{name}.pid")
        if not pidfile.exists():
            continue
        pid = int(pidfile.read_text().strip())
        stat = Path(f"/proc/{pid}/stat")
        if stat.exists() and stat.read_text().split()[2] != "Z":
            alive[name] = pid
    return alive


@pytest.mark.slow
def test_up_twice_recover_then_down_leaves_nothing(tmp_path: Path) -> None:
    state = f"/tmp/hargo-t{os.getpid()}"  # short: unix socket paths
    # 1100 above the suite's cluster (16817: 17917), beside a second suite's (17817: 18917)
    ports = {"HARGO_SLURM_PORT_BASE": str(int(os.environ.get("HARGO_SLURM_PORT_BASE")
                                              or 16817) + 1100)}
    try:
        first = cluster("up", state, **ports)
        assert first.returncode == 0, first.stderr
        assert first.stdout.strip() == f"SLURM_CONF={state}/etc/slurm.conf"
        pids = running_pids(state)
        assert set(pids) == set(DAEMONS)

        start = time.monotonic()
        second = cluster("up", state, **ports)
        assert second.returncode == 0
        assert time.monotonic() - start < 5
        assert running_pids(state) == pids  # a no-op: the same processes

        os.kill(pids["slurmctld"], signal.SIGKILL)  # a crash
        wait_until(lambda: cluster("status", state, **ports).returncode == 1, 30,
                   "the status to see slurmctld gone", poll=0.2)
        third = cluster("up", state, **ports)
        assert third.returncode == 0, third.stderr
        assert set(running_pids(state)) == set(DAEMONS)
        status = cluster("status", state, **ports)
        assert status.returncode == 0 and "hargo1 idle" in status.stdout
    finally:
        down = cluster("down", state, **ports)
    assert down.returncode == 0
    assert running_pids(state) == {}
    for pid in pids.values():
        assert not Path(f"/proc/{pid}/cmdline").exists() or \
            Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    shutil.rmtree(state, ignore_errors=True)


def test_refuses_without_root() -> None:
    """As uid 65534, from a copy it can read (the checkout may sit in a 0700 directory)."""
    with tempfile.TemporaryDirectory(prefix="hargo-nobody-") as scratch:
        script = readable_copy(Path(SCRIPT), Path(scratch))
        done = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                               str(script), "up", "/tmp/hargo-nobody"], capture_output=True,
                              text=True, cwd=scratch)  # fmt: skip
    assert done.returncode != 0
    assert "must run as root" in done.stderr


def test_names_missing_packages(tmp_path: Path) -> None:
    done = subprocess.run([SCRIPT, "up", "/tmp/hargo-nopkg"], capture_output=True, text=True,
                          env={**os.environ, "PATH": "/bin:/usr/bin"})  # no /usr/sbin daemons
    assert done.returncode != 0
    assert "missing munged" in done.stderr and "apt-get install" in done.stderr


def test_usage_errors() -> None:
    done = subprocess.run([SCRIPT, "start", "/tmp/x"], capture_output=True, text=True)
    assert done.returncode == 2 and "unknown action 'start'" in done.stderr
    done = subprocess.run([SCRIPT, "up"], capture_output=True, text=True)
    assert done.returncode == 2 and "up needs STATE_DIR" in done.stderr
    done = subprocess.run([SCRIPT, "--help"], capture_output=True, text=True)
    assert done.returncode == 0 and "status STATE_DIR" in done.stdout
    assert "node-kill      STATE_DIR NODE" in done.stdout and "HARGO_SLURM_GPU_NODES" in done.stdout
    done = subprocess.run([SCRIPT, "node-kill", "/tmp/x"], capture_output=True, text=True)
    assert done.returncode == 2 and "node-kill needs STATE_DIR NODE" in done.stderr
    done = subprocess.run([SCRIPT, "node-partition", "/tmp/x", "hargo-g1", "maybe"],
                          capture_output=True, text=True)
    assert done.returncode == 2 and "node-partition takes on or off, not 'maybe'" in done.stderr
    done = subprocess.run([SCRIPT, "node-freeze", "/tmp/x", "hargo-g1"], capture_output=True,
                          text=True)
    assert done.returncode == 2 and "node-freeze needs STATE_DIR NODE on|off" in done.stderr
    with tempfile.TemporaryDirectory(prefix="hargo-u", dir="/tmp") as state:  # never started
        done = subprocess.run([SCRIPT, "node-start", state, "hargo-g1"], capture_output=True,
                              text=True)
        assert done.returncode == 1 and "needs a cluster started with HARGO_SLURM_GPU_NODES" \
            in done.stderr
    for name, value in (("HARGO_SLURM_GPU_NODES", "two"), ("HARGO_SLURM_CPUS", "999")):
        done = subprocess.run([SCRIPT, "up", "/tmp/hargo-never"], capture_output=True, text=True,
                              env={**os.environ, "HARGO_SLURM_GPU_NODES": "1", name: value})
        assert done.returncode == 1 and f"{name}={value}:" in done.stderr, done.stderr
        assert not Path("/tmp/hargo-never").exists()
