"""submitit's entry points (hargo_hpc.slurm.entrypoints), in this process: a command run to its
end, its failure raised, and `Resumable.checkpoint` stopping a running command (SIGUSR1; the
command, a test double of the trainer, exits 75 as the trainer does after its checkpoint) and
returning the same task again, with --resume, picklable as submitit needs it."""

from __future__ import annotations

import pickle
import sys
import threading
import time
from pathlib import Path

import pytest

from hargo_hpc.slurm.entrypoints import EXIT_REQUEUE, CommandFailed, HargoCommand, Resumable

# a test double of `hargo train`: on SIGUSR1 it "checkpoints" (a file) and exits 75
TRAINER_DOUBLE = """
import signal, sys, time
from pathlib import Path
out = Path(sys.argv[1])
def stop(signum, frame):
    (out / "checkpoint").write_text("step 3")
    sys.exit({status})
signal.signal(signal.SIGUSR1, stop)
(out / "ready").write_text(" ".join(sys.argv[2:]))
time.sleep(120)
sys.exit(3)
"""


def wait_for_file(path: Path, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if time.monotonic() > deadline:
            pytest.fail(f"no {path} within {timeout_s:.0f} s")
        time.sleep(0.05)


def test_a_command_runs_to_its_end_and_a_failure_raises(tmp_path: Path) -> None:
    out = tmp_path / "out.txt"
    assert HargoCommand([sys.executable, "-c", f"open({str(out)!r}, 'w').write('ran')"])() == 0
    assert out.read_text() == "ran"
    with pytest.raises(CommandFailed, match="exited with status 3"):
        HargoCommand([sys.executable, "-c", "raise SystemExit(3)"])()


def test_checkpoint_stops_the_command_and_returns_the_task_again_to_resume(
        tmp_path: Path) -> None:
    argv = [sys.executable, "-c", TRAINER_DOUBLE.format(status=EXIT_REQUEUE), str(tmp_path)]
    entry = Resumable(argv, {"HARGO_TEST": "1"}, lead_s=30)
    copy = pickle.loads(pickle.dumps(entry))  # what submitit stores and loads in the job
    assert (copy.argv, copy.env, copy.lead_s) == (argv, {"HARGO_TEST": "1"}, 30)
    assert copy.command() == [*argv, "--resume"]  # always: a fresh run starts at step 0

    failures: list[BaseException] = []

    def call() -> None:
        try:
            entry()
        except CommandFailed as err:  # in a job, submitit exits before __call__ returns
            failures.append(err)

    runner = threading.Thread(target=call)
    runner.start()
    wait_for_file(tmp_path / "ready")
    assert (tmp_path / "ready").read_text() == "--resume"
    started = time.monotonic()
    again = entry.checkpoint()  # what submitit's handler calls on its signal
    assert time.monotonic() - started < 20
    assert entry.checkpointed is True and (tmp_path / "checkpoint").read_text() == "step 3"
    runner.join(10)
    assert not runner.is_alive()
    task = again.function
    assert isinstance(task, Resumable) and task is not entry
    assert (task.argv, task.env, task.lead_s) == (argv, {"HARGO_TEST": "1"}, 30)
    assert pickle.loads(pickle.dumps(task)).command() == [*argv, "--resume"]


def test_a_command_that_does_not_stop_within_the_lead_is_killed(tmp_path: Path) -> None:
    stubborn = TRAINER_DOUBLE.format(status=0).replace(
        "signal.signal(signal.SIGUSR1, stop)", "signal.signal(signal.SIGUSR1, signal.SIG_IGN)")
    entry = Resumable([sys.executable, "-c", stubborn, str(tmp_path)], lead_s=12)
    runner = threading.Thread(target=lambda: pytest.raises(CommandFailed, entry))
    runner.start()
    wait_for_file(tmp_path / "ready")
    started = time.monotonic()
    entry.checkpoint()  # waits lead_s - 10 s = 2 s, then SIGKILL
    assert 1.5 < time.monotonic() - started < 15
    assert entry.checkpointed is False and entry._child is not None
    assert entry._child.returncode == -9
    runner.join(10)
    assert not runner.is_alive()
