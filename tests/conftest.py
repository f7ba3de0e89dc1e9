"""Shared fixtures: offline Hugging Face, the repository root, the local Slurm cluster."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"

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
    if _SUMMARY:
        terminalreporter.section("figures reported by tests")
        for line in _SUMMARY:
            terminalreporter.write_line(line)
