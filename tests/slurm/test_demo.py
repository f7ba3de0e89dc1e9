"""`make demo`'s script, end to end on the local cluster: Slurm array, handoff, real bench."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.slurm, pytest.mark.slow]


def test_demo_runs_twice(slurm_cluster: dict[str, str], tmp_path: Path) -> None:
    home = tmp_path / "home"  # the demo and its Slurm jobs must write nothing into HOME
    home.mkdir()
    runs = tmp_path / "runs"
    for _ in range(2):  # the second run reuses the run directory
        done = subprocess.run(
            [sys.executable, str(REPO / "scripts" / "demo.py"), f"run.dir={runs}"],
            capture_output=True, text=True, timeout=600, cwd=tmp_path,
            env={**os.environ, "HOME": str(home)},
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert "demo ok" in done.stdout
        assert "p1-openmp-forbidden  format_violation" in done.stdout
        assert "p0-syntax            compile_error" in done.stdout
    assert (runs / "demo" / "config.toml").is_file()
    assert list(home.iterdir()) == []


def test_demo_bad_override_exits_2(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "demo.py"), "handoff.workers=0"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )
    assert done.returncode == 2
    assert "handoff.workers: bad value 0" in done.stderr
    assert list(tmp_path.iterdir()) == []
