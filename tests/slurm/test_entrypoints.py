"""submitit's entry points (hargo_hpc.slurm.entrypoints), in this process, the way submitit's
job process runs them: `__call__` on the main thread, and `checkpoint()` from a signal handler
that interrupts it (submitit's own handler does that on its USR2, then exits). The command is a
test double of the trainer: on SIGUSR1 it "checkpoints" (writes a file) and exits 75."""

from __future__ import annotations

import os
import pickle
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from waiting import wait_until

from hargo_hpc.slurm.entrypoints import (
    EXIT_DEADLINE,
    EXIT_REQUEUE,
    CommandFailed,
    HargoCommand,
    Resumable,
)

TRAINER_DOUBLE = """
import signal, sys, time
from pathlib import Path
out = Path(sys.argv[1])
def stop(signum, frame):
    (out / "checkpoint").write_text("step 3")
    sys.exit({status})
signal.signal(signal.SIGUSR1, {handler})
(out / "ready").write_text(" ".join(sys.argv[2:]))
time.sleep(120)
sys.exit(3)
"""


class Requeued(BaseException):
    """What submitit's handler does after checkpoint(): requeue, then leave (`sys.exit`)."""


def wait_for_file(path: Path) -> None:
    wait_until(path.exists, 30, f"{path}", poll=0.05)


def run_as_submitit_would(entry: Resumable, ready: Path) -> tuple[Any, float]:
    """Call `entry` on this (main) thread; once its command is ready, SIGUSR2 arrives and the
    handler calls `entry.checkpoint()` and leaves. Returns what checkpoint() returned and how
    long it took."""
    got: dict[str, Any] = {}

    def handler(signum: int, frame: Any) -> None:
        started = time.monotonic()
        got["again"] = entry.checkpoint()
        got["took"] = time.monotonic() - started
        raise Requeued

    def signal_when_ready() -> None:
        wait_for_file(ready)
        os.kill(os.getpid(), signal.SIGUSR2)

    old = signal.signal(signal.SIGUSR2, handler)
    try:
        threading.Thread(target=signal_when_ready, daemon=True).start()
        with pytest.raises(Requeued):
            entry()
    finally:
        signal.signal(signal.SIGUSR2, old)
    return got["again"], got["took"]


def test_a_command_runs_to_its_end_and_a_failure_raises(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "out.txt"
    write = [sys.executable, "-c", f"open({str(out)!r}, 'a').write('ran')"]
    assert HargoCommand(write)() == 0
    assert out.read_text() == "ran"
    with pytest.raises(CommandFailed, match="exited with status 3"):
        HargoCommand([sys.executable, "-c", "raise SystemExit(3)"])()
    monkeypatch.setenv("SLURM_PROCID", "1")  # a job that runs its command once: rank 0's
    assert HargoCommand(write, once=True)() == 0 and out.read_text() == "ran"
    assert HargoCommand(write)() == 0 and out.read_text() == "ranran"


def test_checkpoint_stops_the_command_and_returns_the_task_again_to_resume(
        tmp_path: Path) -> None:
    argv = [sys.executable, "-c", TRAINER_DOUBLE.format(status=EXIT_REQUEUE, handler="stop"),
            str(tmp_path)]
    entry = Resumable(argv, {"HARGO_TEST": "1"}, lead_s=30)
    copy = pickle.loads(pickle.dumps(entry))  # what submitit stores and loads in the job
    assert (copy.argv, copy.env, copy.lead_s) == (argv, {"HARGO_TEST": "1"}, 30)
    assert copy.command() == [*argv, "--resume"]  # always: a fresh run starts at step 0

    again, took = run_as_submitit_would(entry, tmp_path / "ready")
    assert (tmp_path / "ready").read_text() == "--resume"
    assert took < 20 and entry.checkpointed is True
    assert (tmp_path / "checkpoint").read_text() == "step 3"
    task = again.function
    assert isinstance(task, Resumable) and task is not entry
    assert (task.argv, task.env, task.lead_s) == (argv, {"HARGO_TEST": "1"}, 30)
    assert pickle.loads(pickle.dumps(task)).command() == [*argv, "--resume"]


def test_a_command_that_does_not_stop_within_the_lead_is_killed_and_requeued(
        tmp_path: Path) -> None:
    stubborn = TRAINER_DOUBLE.format(status=0, handler="signal.SIG_IGN")
    entry = Resumable([sys.executable, "-c", stubborn, str(tmp_path)], lead_s=12)
    again, took = run_as_submitit_would(entry, tmp_path / "ready")  # 12 - 10 s, then SIGKILL
    assert 1.5 < took < 15
    assert entry.checkpointed is False and entry._child is not None
    assert entry._child.returncode == -signal.SIGKILL
    assert isinstance(again.function, Resumable)  # resumes from its previous checkpoint


def test_a_command_ended_by_the_stop_signal_itself_is_requeued(tmp_path: Path) -> None:
    """Slurm signals every process of the step: a trainer past its handlers (its last step
    done, exiting) dies of the signal. That is a stop, not a crash: requeued, and its --resume
    ends at once (a suite run failed here before)."""
    unguarded = TRAINER_DOUBLE.format(status=0, handler="signal.SIG_DFL")
    entry = Resumable([sys.executable, "-c", unguarded, str(tmp_path)], lead_s=30)
    again, took = run_as_submitit_would(entry, tmp_path / "ready")
    assert entry._child is not None and entry._child.returncode == -signal.SIGUSR1
    assert entry.checkpointed is True and took < 20
    assert isinstance(again.function, Resumable)


def test_a_command_that_crashes_while_stopping_fails_the_task(tmp_path: Path) -> None:
    crashing = TRAINER_DOUBLE.format(status=1, handler="stop")
    entry = Resumable([sys.executable, "-c", crashing, str(tmp_path)], lead_s=30)
    threading.Thread(target=lambda: (wait_for_file(tmp_path / "ready"),
                                     os.kill(os.getpid(), signal.SIGUSR2)), daemon=True).start()
    old = signal.signal(signal.SIGUSR2, lambda *_: entry.checkpoint())
    try:
        with pytest.raises(CommandFailed, match="exited with status 1 while stopping"):
            entry()
    finally:
        signal.signal(signal.SIGUSR2, old)


def test_the_other_ranks_stop_for_the_requeue_without_failing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    entry = Resumable([sys.executable, "-c", f"raise SystemExit({EXIT_REQUEUE})"])
    monkeypatch.setenv("SLURM_PROCID", "1")  # rank 0's handler requeues; rank 1 just ends
    assert entry() == EXIT_REQUEUE
    monkeypatch.setenv("SLURM_PROCID", "0")  # on rank 0, without submitit's signal: not ours
    with pytest.raises(CommandFailed, match="a signal not from submitit"):
        entry()


def test_a_command_that_stops_before_its_time_limit_is_requeued_by_submitits_handler(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The trainer stops by itself (exit 76: its measured save outlasts the signal's lead):
    rank 0 hands the requeue to the handler submitit installed for its own signal, which
    checkpoints (nothing left to stop) and requeues the same task."""
    entry = Resumable([sys.executable, "-c", f"raise SystemExit({EXIT_DEADLINE})"], lead_s=30)
    got: dict[str, Any] = {}

    def handler(signum: int, frame: Any) -> None:
        got["again"] = entry.checkpoint()
        raise Requeued

    monkeypatch.setenv("SLURM_PROCID", "0")
    old = signal.signal(signal.SIGUSR2, handler)
    try:
        with pytest.raises(Requeued):
            entry()
    finally:
        signal.signal(signal.SIGUSR2, old)
    assert isinstance(got["again"].function, Resumable)
    assert entry.checkpointed is None  # the command had ended: nothing was stopped
    monkeypatch.setenv("SLURM_PROCID", "1")  # the other ranks stop with rank 0
    assert entry() == EXIT_DEADLINE
    monkeypatch.setenv("SLURM_PROCID", "0")  # no handler: nothing here requeues it
    old = signal.signal(signal.SIGUSR2, signal.SIG_DFL)
    try:
        with pytest.raises(CommandFailed, match="stopped before its time limit"):
            entry()
    finally:
        signal.signal(signal.SIGUSR2, old)
