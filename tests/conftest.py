"""Shared fixtures: offline Hugging Face, a private home and cache, the repository root, the
local Slurm cluster.

Before any test module (or hargo_hpc) is imported, the suite points `HOME`, the XDG
directories and `HARGO_*` state (roof, uid leases, CPU locks) into one temporary directory,
removed at the end: nothing a test runs (the bench, the handoff, the demo, Slurm jobs, which inherit
the environment) can write into the user's home, and no roof or cache from an earlier run can
govern this one. At the end the session fails if the user's real `~/.cache/hargo-hpc` changed
anyway.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"

REAL_HOME = Path(os.environ.get("HOME") or os.path.expanduser("~"))
SESSION_TMP = Path(tempfile.mkdtemp(prefix="hargo-tests-"))
os.chmod(SESSION_TMP, 0o755)  # the bench's sandbox user traverses it
ISOLATED = {
    "HOME": SESSION_TMP / "home",
    "XDG_CACHE_HOME": SESSION_TMP / "cache",
    "XDG_CONFIG_HOME": SESSION_TMP / "config",
    "XDG_DATA_HOME": SESSION_TMP / "data",
    "HARGO_ROOF_FILE": SESSION_TMP / "roof" / "roof.json",
    "HARGO_UID_LEASE_DIR": SESSION_TMP / "uid-leases",
    "HARGO_CPU_LOCK_DIR": SESSION_TMP / "cpu-locks",
    "MPLCONFIGDIR": SESSION_TMP / "matplotlib",  # the report jobs' font cache, not in /tmp
}
for _name, _path in ISOLATED.items():
    (_path if _name != "HARGO_ROOF_FILE" else _path.parent).mkdir(parents=True, exist_ok=True)
    os.environ[_name] = str(_path)


def _snapshot(directory: Path) -> dict[str, tuple[int, int]]:
    """(size, mtime) of every file below `directory` (empty when it does not exist)."""
    found = {}
    for path in directory.rglob("*") if directory.is_dir() else ():
        try:
            st = path.lstat()
        except OSError:
            continue
        found[str(path)] = (st.st_size, st.st_mtime_ns)
    return found


REAL_CACHE = REAL_HOME / ".cache" / "hargo-hpc"
# the node-wide defaults of the uid leases and CPU locks: tests must use their own
NODE_STATE = [Path("/dev/shm/hargo-uids"), Path("/dev/shm/hargo-cpus")]
_REAL_CACHE_BEFORE = _snapshot(REAL_CACHE)
_NODE_STATE_BEFORE = {str(p): (p.exists(), _snapshot(p)) for p in NODE_STATE}


_PROBLEMS: list[str] = []


def _changed(before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]) -> str:
    """The first few paths added, removed or rewritten between two snapshots."""
    paths = sorted(p for p in before.keys() | after.keys() if before.get(p) != after.get(p))
    return ", ".join(paths[:8]) + (f" (+{len(paths) - 8} more)" if len(paths) > 8 else "")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    real_cache = _snapshot(REAL_CACHE)
    if real_cache != _REAL_CACHE_BEFORE:
        _PROBLEMS.append(f"the suite wrote into {REAL_CACHE}: "
                         f"{_changed(_REAL_CACHE_BEFORE, real_cache)}")
    for path in NODE_STATE:
        exists, files = _NODE_STATE_BEFORE[str(path)]
        if (path.exists(), _snapshot(path)) != (exists, files):
            _PROBLEMS.append(f"the suite wrote into {path}: {_changed(files, _snapshot(path))}"
                             if path.exists() else f"the suite removed {path}")
    in_home = _snapshot(ISOLATED["HOME"])
    if in_home or any(ISOLATED["HOME"].iterdir()):
        home = str(ISOLATED["HOME"]) + "/"
        _PROBLEMS.append("the suite wrote into its home directory: " + ", ".join(
            sorted(p.removeprefix(home) for p in in_home)[:8] or
            sorted(p.name for p in ISOLATED["HOME"].iterdir())))
    shutil.rmtree(SESSION_TMP, ignore_errors=True)
    if _PROBLEMS:  # tests leave the user's home and the node alone
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


REPO = Path(__file__).resolve().parents[1]
CLUSTER_SCRIPT = REPO / "scripts" / "slurm-cluster.sh"
# Short: munge and MariaDB put unix sockets in it (~107 bytes max).
SLURM_STATE = os.environ.get("HARGO_SLURM_STATE", "/tmp/hargo-slurm")


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


@pytest.fixture(scope="session")
def slurm_cluster() -> dict[str, str]:
    """Bring the local cluster up (a no-op when healthy) and point clients at it.

    Returns the client environment. The cluster is left running for the next session;
    `make cluster-down` stops it.
    """
    done = subprocess.run(
        [str(CLUSTER_SCRIPT), "up", SLURM_STATE], capture_output=True, text=True, timeout=180
    )
    if done.returncode != 0:
        pytest.fail(f"local Slurm cluster did not come up:\n{done.stdout}\n{done.stderr}")
    env = dict(line.split("=", 1) for line in done.stdout.split() if "=" in line)
    os.environ.update(env)
    return env


_SUMMARY: list[str] = []


@pytest.fixture
def summary_line() -> Callable[[str], None]:
    """Call it with a line to show in pytest's terminal summary (e.g. the chaos test's counts),
    so the figure appears in the CI log without `-s`."""
    return _SUMMARY.append


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The figures tests reported, then the isolation problems found at the session's end
    (`pytest_sessionfinish`), among the last lines printed, where a CI log's tail shows them."""
    if _SUMMARY:
        terminalreporter.section("figures reported by tests")
        for line in _SUMMARY:
            terminalreporter.write_line(line)
    if _PROBLEMS:
        terminalreporter.section("isolation", red=True)
        for problem in _PROBLEMS:
            terminalreporter.write_line(f"error: {problem}", red=True)
