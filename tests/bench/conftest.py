"""Fixtures of the bench tests: small problems, short timeouts, private temp and cache dirs."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from hargo_hpc.bench.settings import BenchSettings


@pytest.fixture(scope="session")
def scratch_root() -> Path:
    """A temp root the sandbox user can traverse (pytest's own tmp dirs are 0700)."""
    root = Path(tempfile.mkdtemp(prefix="hargo-bench-tests-"))
    os.chmod(root, 0o755)
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture()
def run_tmp(scratch_root: Path, monkeypatch: pytest.MonkeyPatch, request) -> Path:
    """The directory where the harness makes its per-run temp dirs, for this test only."""
    d = scratch_root / f"tmp-{request.node.name[:40].replace('[', '-').replace(']', '')}"
    d.mkdir(exist_ok=True)
    os.chmod(d, 0o755)
    monkeypatch.setattr(tempfile, "tempdir", str(d))
    monkeypatch.setenv("HARGO_ROOF_FILE", str(scratch_root / "roof.json"))
    return d


@pytest.fixture(scope="session")
def cache_dir(scratch_root: Path) -> str:
    return str(scratch_root / "cache")


@pytest.fixture()
def settings() -> BenchSettings:
    return BenchSettings(
        size=64,
        check_size=37,
        warmup=1,
        repetitions=2,
        timed_budget_ms=0,  # exactly 2 timed pairs
        compile_timeout_s=8.0,
        run_timeout_s=3.0,
        request_timeout_s=30.0,
        memory_limit_mb=1024,
        # at these tiny sizes OpenBLAS's thread start-up dominates and a shipped kernel may beat
        # it: no test is about the margin except the one that sets it
        reference_margin=100.0,
    )
