"""What a submitit job runs: one `hargo` command line, as the child of submitit's job process.

submitit pickles one of these callables per array task; in the job, its `_submit` process
loads it and calls it (once per rank, with Slurm's rank variables, which the trainer reads:
train.backend.distributed). `HargoCommand` runs a command to its end; `Resumable` adds
submitit's checkpoint-and-requeue for `hargo train` and `hargo sft` (docs/slurm.md, "Time
limits and preemption"). Slurm signals every process of a job step, the commands included:
they treat USR2 (submitit's) as USR1 (the trainer stops at its next phase boundary; a bench
worker releases its claims and exits).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

import submitit

from hargo_hpc.errors import EXIT_DEADLINE, EXIT_REQUEUE, HargoError

RELEASE_S = 20.0  # how long a stopped command may take to let go before SIGKILL
STOP_SIGNALS = frozenset({signal.SIGUSR1, signal.SIGUSR2, signal.SIGTERM})  # the trainer's
MARGIN_S = 10.0  # of the signal's lead, kept for submitit's requeue and exit
POLL_S = 0.1


class CommandFailed(HargoError, RuntimeError):
    """The command exited non-zero; the message names it and its status."""


def global_rank() -> int:
    """This task's rank in the job (Slurm's SLURM_PROCID; 0 outside Slurm)."""
    return int(os.environ.get("SLURM_PROCID", "0") or 0)


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    """Linux: the command gets SIGKILL when submitit's process dies (no orphan)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class HargoCommand:
    """One command line run to its end in the job: its output and errors into the task's log;
    a non-zero exit raises `CommandFailed` (submitit records the task as failed, Slurm sees a
    non-zero exit). `once`: only global rank 0 runs it (the jobs whose batch script runs its
    command once, not once per task: bench worker, eval, report, stop). When the job ends
    early (time limit, cancel) the command gets SIGUSR1 and a moment to let go of what it
    holds (a bench worker releases its claims), then SIGKILL; it also dies with its parent."""

    def __init__(self, argv: Sequence[str], env: Mapping[str, str] | None = None,
                 once: bool = False) -> None:
        self.argv = list(argv)
        self.env = dict(env or {})
        self.once = once
        self._child: subprocess.Popen[bytes] | None = None

    def __getstate__(self) -> dict[str, Any]:  # what submitit pickles: no process
        return {"argv": self.argv, "env": self.env, "once": self.once}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["argv"], state["env"], state["once"])  # type: ignore[misc]

    def command(self) -> list[str]:
        return self.argv

    def __call__(self) -> int:
        if self.once and global_rank() != 0:
            return 0  # the command runs on rank 0 only
        argv = self.command()
        print(f"hargo: running {' '.join(argv)}", flush=True)
        sys.stdout.flush()
        child = subprocess.Popen(argv, env={**os.environ, **self.env},  # its output: the log's
                                 stderr=subprocess.STDOUT, preexec_fn=_die_with_parent)
        self._child = child
        threading.Thread(target=child.wait, daemon=True).start()  # sets child.returncode
        try:
            while child.returncode is None:  # plain sleeps: submitit's handler may run here
                time.sleep(POLL_S)
        finally:
            if child.returncode is None:  # the job is ending under us (an exception, an exit)
                self._stop(child, RELEASE_S)
        return self.finished(child.returncode)

    @staticmethod
    def _stop(child: subprocess.Popen[bytes], within_s: float) -> bool:
        """SIGUSR1, then up to `within_s` for the command to exit (SIGKILL after); whether it
        exited on its own. Lock-free: safe inside a signal handler."""
        child.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + within_s
        while child.returncode is None and time.monotonic() < deadline:
            time.sleep(POLL_S)
        if child.returncode is not None:
            return True
        child.kill()
        deadline = time.monotonic() + 5.0
        while child.returncode is None and time.monotonic() < deadline:
            time.sleep(POLL_S)
        return False

    def finished(self, status: int) -> int:
        if status != 0:
            raise CommandFailed(f"{' '.join(self.command())} exited with status {status}")
        return status


class Resumable(HargoCommand, submitit.helpers.Checkpointable):
    """`hargo train` / `hargo sft` under submitit's checkpoint-and-requeue. The command always
    runs with `--resume` (a fresh run starts at step 0, a restarted one continues from its
    latest checkpoint, a finished one ends at once). On submitit's signal submitit calls
    `checkpoint()` on rank 0: it sends SIGUSR1 to the command, which checkpoints at its next
    phase boundary and exits 75 (`EXIT_REQUEUE`); `checkpoint()` waits for that (at most
    `lead_s`, the job kind's `signal_lead_s`, less `MARGIN_S`) and returns its own
    resubmission, which submitit requeues. A command that crashes meanwhile fails the task.

    `checkpoint()` runs inside a signal handler on the main thread, interrupting `__call__`,
    so nothing there takes a lock: a reaper thread waits for the child and sets its return
    code, and both poll that attribute."""

    def __init__(self, argv: Sequence[str], env: Mapping[str, str] | None = None,
                 lead_s: float = 120.0) -> None:
        super().__init__(argv, env)
        self.lead_s = lead_s
        self.checkpointed: bool | None = None  # set by checkpoint(): whether it exited in time

    def __getstate__(self) -> dict[str, Any]:
        return {"argv": self.argv, "env": self.env, "lead_s": self.lead_s}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["argv"], state["env"], state["lead_s"])  # type: ignore[misc]

    def command(self) -> list[str]:
        return self.argv if "--resume" in self.argv else [*self.argv, "--resume"]

    def checkpoint(self, *args: Any, **kwargs: Any) -> submitit.helpers.DelayedSubmission:
        """Stop the command (it checkpoints and exits 75), then this same task again: it runs
        with --resume, so it continues from the checkpoint just written (or, when the command
        did not stop within the lead and was killed, from its previous one). CommandFailed
        when the command crashed instead: the task fails rather than repeating the crash."""
        child, started = self._child, time.monotonic()
        if child is not None and child.returncode is None:
            self.checkpointed = self._stop(child, max(self.lead_s - MARGIN_S, 1.0))
            status = child.returncode
            # killed by a stop signal: past its handlers (finishing, or not yet started: Slurm
            # signals every process of the step); --resume continues from its last checkpoint
            # (or ends at once when the run had finished)
            stopped = status is not None and -status in STOP_SIGNALS
            said = ("checkpoint written" if status == EXIT_REQUEUE
                    else "no checkpoint within the lead; killed" if not self.checkpointed
                    else f"ended by {signal.Signals(-status).name}, outside its handler"
                    if stopped else f"exited {status}")
            print(f"hargo: stopped for requeue after {time.monotonic() - started:.0f} s: "
                  f"{said}", flush=True)
            if self.checkpointed and status not in (EXIT_REQUEUE, EXIT_DEADLINE, 0) \
                    and not stopped:
                raise CommandFailed(f"{' '.join(self.command())} exited with status {status} "
                                    "while stopping for a requeue")
        # exit 0 (it finished meanwhile): the requeued task's --resume ends at once
        return submitit.helpers.DelayedSubmission(type(self)(self.argv, self.env, self.lead_s))

    def finished(self, status: int) -> int:
        if status == EXIT_DEADLINE and global_rank() == 0 and self.checkpointed is None:
            # stopped by itself before the job's end (its measured save outlasts the signal's
            # lead): requeue as submitit does on its own signal, through its handler
            handler = signal.getsignal(signal.SIGUSR2)
            if callable(handler):
                print("hargo: stopped before the time limit, checkpoint written; requeueing",
                      flush=True)
                signal.raise_signal(signal.SIGUSR2)
                return status  # the handler requeues and exits; not reached under submitit
            raise CommandFailed(f"{' '.join(self.command())} stopped before its time limit; "
                                "nothing here requeues it: continue with --resume")
        if status == EXIT_DEADLINE:
            return status  # ranks >= 1 stop with rank 0, whose task requeues the job
        if status == EXIT_REQUEUE and (self.checkpointed is not None or global_rank() != 0):
            # stopped for submitit's requeue: rank 0's handler requeues the task; the other
            # ranks' commands stop with it (the ranks agree to stop) and must not fail it
            return status
        if status == EXIT_REQUEUE:
            # stopped by a signal that was not submitit's (`scontrol requeue`, preemption by
            # SIGTERM): Slurm requeues the task itself, which continues with --resume
            raise CommandFailed(f"{' '.join(self.command())} stopped after a checkpoint "
                                "(a signal not from submitit); a requeued task continues it")
        return super().finished(status)
