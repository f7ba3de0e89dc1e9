"""`hargo handoff ...` and `hargo worker`, through click's runner; retention and status."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner
from waiting import wait_until

from hargo_hpc.cli.handoff import handoff, worker
from hargo_hpc.handoff import HandoffSettings, Trainer, retention
from hargo_hpc.handoff.errors import HandoffError
from hargo_hpc.handoff.layout import Layout

from .conftest import HERE, make_requests, running_workers
from .doubles import noop_workload_double


def finished_steps(root: Path, settings: HandoffSettings, steps: int = 3) -> Trainer:
    trainer = Trainer(root, settings, progress=False)
    with running_workers(root, noop_workload_double, settings, count=1):
        for step in range(steps):
            trainer.submit(step, make_requests(5, prefix=f"s{step}-"))
            trainer.collect(step)
    return trainer


def test_status_shows_steps_workers_and_oldest_pending(
    root: Path, fast: HandoffSettings
) -> None:
    trainer = finished_steps(root, fast, steps=1)
    trainer.submit(1, make_requests(4))
    Layout(root).claim(1, "r00002", 1).write_text("{}")
    result = CliRunner().invoke(handoff, ["status", str(root), "--all-workers"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert any(line.split()[:8] == ["0", "closed", "5", "0", "0", "5", "0", "0"]
               for line in lines)
    assert any(line.split()[:8] == ["1", "open", "4", "3", "1", "0", "0", "0"]
               for line in lines)
    assert "oldest pending: step 1 request r00000" in result.output
    assert "workers: 0 live, 1 gone" in result.output and "stop sentinel" in result.output
    as_json = json.loads(CliRunner().invoke(handoff, ["status", str(root), "--json"]).output)
    assert as_json["steps"][1]["claimed"] == 1


def test_compact_keeps_results_readable_and_prune_spares_open_steps(
    root: Path, fast: HandoffSettings
) -> None:
    trainer = finished_steps(root, fast, steps=3)
    before = trainer.collect(1)
    trainer.submit(3, make_requests(2))  # open: never touched
    runner = CliRunner()
    result = runner.invoke(handoff, ["compact", str(root)])
    assert result.exit_code == 0, result.output
    assert result.output.count("5 results") == 3
    layout = Layout(root)
    assert not layout.results(1).exists() and layout.compacted(1).exists()
    again = Trainer(root, fast, progress=False).collect(1)
    assert {k: v["handoff"]["written_at"] for k, v in again.items()} == {
        k: v["handoff"]["written_at"] for k, v in before.items()}
    with pytest.raises(HandoffError, match="not closed"):
        retention.compact(root, 3)
    assert runner.invoke(handoff, ["compact", str(root), "--step", "3"]).exit_code == 2
    result = runner.invoke(handoff, ["prune", str(root), "--keep", "0", "--dry-run"])
    assert "would prune 3 step(s): 0, 1, 2" in result.output
    assert "not closed: 3" in result.output
    result = runner.invoke(handoff, ["prune", str(root), "--keep", "1"])
    assert result.exit_code == 0 and "pruned 3 step(s)" in result.output
    assert layout.step_numbers() == [3]


def test_stop_and_schema_commands(root: Path) -> None:
    runner = CliRunner()
    assert runner.invoke(handoff, ["stop", str(root)]).exit_code == 0
    assert json.loads(Layout(root).stop.read_text())["kind"] == "stop"
    schemas = json.loads(runner.invoke(handoff, ["schema"]).output)
    assert "result" in schemas and "request_batch" in schemas


def test_missing_directory_is_one_line_exit_2(tmp_path: Path) -> None:
    runner = CliRunner()
    for args in (["status", str(tmp_path / "x")], ["prune", str(tmp_path / "x"), "--keep", "1"],
                 ["stop", str(tmp_path / "x")]):
        result = runner.invoke(handoff, args)
        assert result.exit_code == 2 and "does not exist" in result.output
    result = runner.invoke(worker, ["--handoff", str(tmp_path / "x"),
                                    "--workload", "json:loads"])
    assert result.exit_code == 2
    assert result.output.strip().splitlines()[-1].startswith("error: handoff directory")
    result = runner.invoke(worker, ["--handoff", str(tmp_path), "--workload", "no.such:thing"])
    assert result.exit_code == 2 and "cannot load it" in result.output


def test_worker_command_runs_until_idle(root: Path) -> None:
    trainer = Trainer(root, HandoffSettings(), progress=False)
    trainer.submit(0, make_requests(10))
    proc = subprocess.run(
        [sys.executable, "-c", "from hargo_hpc.cli.handoff import worker; worker()",
         "--handoff", str(root), "--workload", "doubles:noop_workload_double",
         "--max-idle", "0.5", "--lease", "0.4", "--threads", "2"],
        capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(HERE)},
    )
    assert proc.returncode == 0, proc.stderr
    assert "worker stopped: idle for 0.5 s" in proc.stderr
    assert len(trainer.collect(0, timeout=1)) == 10


def test_status_lists_live_workers_with_their_heartbeat(
    root: Path, fast: HandoffSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hargo_hpc.handoff import status as status_module

    def live() -> int:
        return sum(w.live for w in status_module.gather(root).workers)

    with running_workers(root, noop_workload_double, fast, count=2, worker_id="slurm9_1-cn1-pid7"):
        # What the test needs is two live workers in the status, not two names in workers/
        # (the directory may not exist yet, and a listing also shows the heartbeats' temp files).
        wait_until(lambda: live() == 2, 10, "two live workers", poll=0.02)
        status = status_module.gather(root)
        # Heartbeats are rewritten every 0.5 s, so an age read at a random moment is 0-0.6 s and
        # may round to "1 s". Show the CLI the moment of the older heartbeat: ages are then 0.
        beats = [p for p in Layout(root).workers.iterdir() if not p.name.startswith(".")]
        frozen = min(p.stat().st_mtime for p in beats)
        monkeypatch.setattr(status_module, "time", SimpleNamespace(time=lambda: frozen))
        result = CliRunner().invoke(handoff, ["status", str(root)])
    assert [w.live for w in status.workers] == [True, True]
    assert "workers: 2 live, 0 gone" in result.output
    assert result.output.count("slurm9_1-cn1-pid7 live: last heartbeat 0 s ago") == 2


def test_a_worker_idle_from_the_first_step_waits_for_training(root: Path) -> None:
    """--idle-from-first-step: on a handoff without steps the worker outlives --max-idle
    (a submission's training may queue for long); once a step opens, it serves it and the
    idle clock applies from then on."""
    proc = subprocess.Popen(
        [sys.executable, "-c", "from hargo_hpc.cli.handoff import worker; worker()",
         "--handoff", str(root), "--workload", "doubles:noop_workload_double",
         "--max-idle", "0.5", "--lease", "0.4", "--idle-from-first-step"],
        stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(HERE)})
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            proc.wait(timeout=3.0)  # six times --max-idle without a step: still there
        trainer = Trainer(root, HandoffSettings(), progress=False)
        trainer.submit(0, make_requests(4))
        assert len(trainer.collect(0, timeout=30)) == 4
        assert proc.wait(timeout=30) == 0
        said = proc.stderr.read() if proc.stderr else ""
        assert "the first step is open" in said and "worker stopped: idle for 0.5 s" in said
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
