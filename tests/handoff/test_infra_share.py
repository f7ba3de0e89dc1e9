"""Harness errors are not silent: an `infra_error` is never scored, so a harness bug that turns
every request into one would quietly shrink the training data. The worker counts them, the
status shows the share, and past `max_infra_share` the worker exits non-zero with the first
error's message."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from hargo_hpc.cli.handoff import handoff
from hargo_hpc.handoff import HandoffSettings, Trainer, Worker
from hargo_hpc.handoff.exits import ExitReason

from .conftest import HERE, make_requests
from .doubles import SometimesBrokenDouble, broken_harness_double


def settings(**extra: object) -> HandoffSettings:
    base = {"lease_s": 0.6, "poll_interval_s": 0.02, "step_timeout_s": 20, "max_attempts": 3,
            "worker_max_idle_s": 5.0}  # fmt: skip
    return HandoffSettings(**{**base, **extra})


def test_a_broken_harness_stops_the_worker_with_its_first_error(root: Path) -> None:
    fast = settings(max_infra_share=0.5, infra_min_runs=8)
    Trainer(root, fast, progress=False).submit(0, make_requests(20))
    stopped = Worker(root, broken_harness_double, settings=fast, handle_signals=False).run()
    assert stopped.reason is ExitReason.INFRA and stopped.failed
    text = str(stopped)
    assert text.startswith("failed: 8 of 8 workload runs ended infra_error (more than 50%)")
    assert "harness error: KeyError: 'gflops'" in text
    status = CliRunner().invoke(handoff, ["status", str(root), "--all-workers"]).output
    assert "infra errors: 8 of 8 workload runs (100.0%); first: harness error: KeyError" in status


def test_a_low_share_of_infra_errors_keeps_the_worker_going(root: Path) -> None:
    fast = settings(max_infra_share=0.5, infra_min_runs=4, worker_max_idle_s=1.0)
    trainer = Trainer(root, fast, progress=False)
    trainer.submit(0, make_requests(20))
    double = SometimesBrokenDouble(every=5)  # 1 run in 5: retried, then ok
    stopped = Worker(root, double, settings=fast, handle_signals=False, max_idle_s=1.0).run()
    assert stopped.reason is ExitReason.IDLE, str(stopped)
    results = trainer.collect(0, timeout=5)
    assert all(r["status"] == "ok" for r in results.values())
    status = CliRunner().invoke(handoff, ["status", str(root), "--all-workers"]).output
    runs = double.total
    assert f"infra errors: {runs // 5} of {runs} workload runs ({runs // 5 / runs:.1%})" in status


def test_the_worker_command_exits_1_with_the_message(root: Path) -> None:
    Trainer(root, settings(), progress=False).submit(0, make_requests(12))
    done = subprocess.run(
        [sys.executable, "-m", "hargo_hpc", "worker", "--handoff", str(root), "--workload",
         "doubles:broken_harness_double", "--max-infra-share", "0.25", "--lease", "0.6",
         "--max-idle", "5", "-q"],
        capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(HERE)},
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("worker stopped: failed: 8 of 8 workload runs ended infra_error")
    assert "(more than 25%)" in last and "KeyError: 'gflops'" in last
