"""What a submitit job runs: one `hargo` command line, as the child of submitit's job process.

submitit pickles one of these callables per array task; in the job, its `_submit` process
loads it and calls it (once per rank: submitit starts `tasks_per_node` x `nodes` of them with
`srun`, each with Slurm's rank variables, which the trainer reads: train.backend.distributed).

- `HargoCommand(argv)`: runs `argv` to its end, its output into the job's log; a non-zero exit
  raises `CommandFailed` (submitit records the task as failed, Slurm sees a non-zero exit).
  When the job ends early (time limit, cancel) the command gets SIGUSR1 and a moment to let go
  of what it holds (a bench worker releases its claims), then SIGKILL.
- `Resumable(argv)`, a `submitit.helpers.Checkpointable`, for `hargo train` and `hargo sft`.
  Its command always runs with `--resume`: a fresh run starts at step 0, a restarted one (a
  requeue, by submitit or by `scontrol requeue`) continues from its latest checkpoint. On
  submitit's signal (USR2 by default, `signal_lead_s` before the time limit, or on
  preemption) submitit calls `checkpoint()`: it sends SIGUSR1 to the command, which writes a
  checkpoint at its next phase boundary and exits 75 (`EXIT_REQUEUE`); `checkpoint()` waits
  for that (at most the lead less a margin) and returns its own resubmission; submitit then
  requeues the task (`scontrol requeue`), which continues where it stopped.

Slurm signals every process of a job step, the commands included: they treat USR2
(submitit's) as USR1 (the trainer: stop at the next phase boundary; a bench worker: release
its claims and exit).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

import submitit

EXIT_REQUEUE = 75  # the trainer's exit status after a stop with a checkpoint (train.run)
RELEASE_S = 20.0  # how long a stopped command may take to let go before SIGKILL
MARGIN_S = 10.0  # of the signal's lead, kept for submitit's requeue and exit


class CommandFailed(RuntimeError):
    """The command exited non-zero; the message names it and its status."""


class HargoCommand:
    """One command line run to its end in the job (the module docstring)."""

    def __init__(self, argv: Sequence[str], env: Mapping[str, str] | None = None) -> None:
        self.argv = list(argv)
        self.env = dict(env or {})
        self._child: subprocess.Popen[bytes] | None = None
        self._ended = threading.Event()

    def __getstate__(self) -> dict[str, Any]:  # what submitit pickles: no process, no event
        return {"argv": self.argv, "env": self.env}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["argv"], state["env"])  # type: ignore[misc]

    def command(self) -> list[str]:
        return self.argv

    def __call__(self) -> int:
        argv = self.command()
        print(f"hargo: running {' '.join(argv)}", flush=True)
        self._ended.clear()
        sys.stdout.flush()
        child = subprocess.Popen(argv, env={**os.environ, **self.env},  # its output: the log's
                                 stderr=subprocess.STDOUT)
        self._child = child
        threading.Thread(target=self._reap, args=(child,), daemon=True).start()
        try:
            while not self._ended.wait(1.0):  # short waits: submitit's handler can run between
                pass
        finally:
            if child.poll() is None:  # the job is ending under us (an exception, an exit)
                self._stop(child, RELEASE_S)
        return self.finished(child.returncode)

    def _reap(self, child: subprocess.Popen[bytes]) -> None:
        child.wait()
        self._ended.set()

    def _stop(self, child: subprocess.Popen[bytes], within_s: float) -> bool:
        """SIGUSR1, then wait up to `within_s` for the command to exit (SIGKILL after);
        whether it exited on its own."""
        child.send_signal(signal.SIGUSR1)
        if self._ended.wait(within_s):
            return True
        child.kill()
        self._ended.wait(5.0)
        return False

    def finished(self, status: int) -> int:
        if status != 0:
            raise CommandFailed(f"{' '.join(self.command())} exited with status {status}")
        return status


class Resumable(HargoCommand, submitit.helpers.Checkpointable):
    """`hargo train` / `hargo sft` under submitit's checkpoint-and-requeue (module docstring).
    `lead_s`: the signal's lead before the time limit (the job kind's `signal_lead_s`)."""

    def __init__(self, argv: Sequence[str], env: Mapping[str, str] | None = None,
                 lead_s: float = 120.0) -> None:
        super().__init__(argv, env)
        self.lead_s = lead_s
        self.checkpointed: bool | None = None  # set by checkpoint(): whether it exited in time

    def __getstate__(self) -> dict[str, Any]:
        return {**super().__getstate__(), "lead_s": self.lead_s}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["argv"], state["env"], state["lead_s"])  # type: ignore[misc]

    def command(self) -> list[str]:
        return self.argv if "--resume" in self.argv else [*self.argv, "--resume"]

    def checkpoint(self, *args: Any, **kwargs: Any) -> submitit.helpers.DelayedSubmission:
        """Stop the command (it checkpoints and exits 75), then this same task again: it runs
        with --resume, so it continues from the checkpoint just written."""
        child = self._child
        started = time.monotonic()
        if child is not None and child.poll() is None:
            self.checkpointed = self._stop(child, max(self.lead_s - MARGIN_S, 1.0))
            took = time.monotonic() - started
            said = ("checkpoint written" if child.returncode == EXIT_REQUEUE
                    else f"exited {child.returncode}" if self.checkpointed
                    else "no checkpoint within the lead; killed")
            print(f"hargo: stopped for requeue after {took:.0f} s: {said}", flush=True)
        return submitit.helpers.DelayedSubmission(type(self)(self.argv, self.env, self.lead_s))

    def finished(self, status: int) -> int:
        if status == EXIT_REQUEUE and self.checkpointed is None:
            # stopped by a signal that was not submitit's (`scontrol requeue`, preemption by
            # SIGTERM): Slurm requeues the task itself, which continues with --resume
            raise CommandFailed(f"{' '.join(self.command())} stopped after a checkpoint "
                                "(a signal not from submitit); a requeued task continues it")
        return super().finished(status)
