"""The suite leaves the machine alone: the bench and the handoff write their cache and roof where
the environment says (here: the session's temporary directory, set by conftest.py), never into
the home directory. Each path runs as a user runs it, in a subprocess whose HOME is a fresh
empty directory, and that directory must still be empty afterwards. (The demo's path is checked
the same way in tests/slurm/test_demo.py; conftest.py also fails the session if the suite's
home, or the user's real ~/.cache/hargo-hpc, changed.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from hargo_hpc.bench.calibrate import kernel_source


def fresh_home_env(tmp_path: Path) -> tuple[dict[str, str], Path]:
    home = tmp_path / "home"
    home.mkdir()
    return {**os.environ, "HOME": str(home)}, home


def cache_entries() -> list[Path]:
    root = Path(os.environ["XDG_CACHE_HOME"]) / "hargo-hpc" / "bench"  # set by conftest.py
    return sorted(root.rglob("meta.json")) if root.is_dir() else []


def test_bench_run_writes_nothing_into_home(tmp_path: Path) -> None:
    env, home = fresh_home_env(tmp_path)
    kernel = tmp_path / "kernel.c"
    # a unique comment: a fresh compile, so the cache must take a new entry
    kernel.write_text(f"/* {tmp_path.name} */\n" + kernel_source("naive"))
    before = cache_entries()
    done = subprocess.run(
        [sys.executable, "-m", "hargo_hpc", "bench", "run", str(kernel), "--size", "48",
         "--reps", "1", "--json"],
        capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["status"] == "ok"
    assert list(home.iterdir()) == []
    assert len(cache_entries()) > len(before)  # the cache went where XDG_CACHE_HOME says


def test_handoff_worker_with_the_real_bench_writes_nothing_into_home(tmp_path: Path) -> None:
    from hargo_hpc.handoff import HandoffSettings, Trainer

    env, home = fresh_home_env(tmp_path)
    root = tmp_path / "handoff"
    root.mkdir()
    settings = HandoffSettings(lease_s=5, poll_interval_s=0.05, worker_max_idle_s=6)
    trainer = Trainer(root, settings, progress=False)
    trainer.submit(0, [{"id": "k0", "kind": "gemm", "payload": {
        "completion": f"/* {tmp_path.name} */\n" + kernel_source("naive"),
        "problem": {"size": 48}}}])
    config = tmp_path / "job.toml"
    config.write_text("[bench]\nsize = 48\nrepetitions = 1\n")
    worker = subprocess.Popen(
        [sys.executable, "-m", "hargo_hpc", "worker", "--handoff", str(root), "--config",
         str(config), "--max-idle", "6", "--lease", "5", "-q"],
        env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        results = trainer.collect(0, timeout=120)
        trainer.stop("test over")
        _, stderr = worker.communicate(timeout=60)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.communicate()
    assert worker.returncode == 0, stderr
    assert results["k0"]["status"] == "ok"
    assert list(home.iterdir()) == []
