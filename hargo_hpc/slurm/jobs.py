"""Submitting and watching batch jobs with the Slurm commands (`sbatch`, `sacct`)."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

from hargo_hpc.errors import HargoError

# Terminal states: the job's processes are gone (REVOKED: a federation sibling ran it).
FINISHED = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY",
                      "NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "DEADLINE", "REVOKED"})
TIMEOUT_S = 60


class SlurmError(HargoError, RuntimeError):
    """A Slurm command failed; the message quotes the command and its stderr."""


def _run(argv: list[str]) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S)
    except FileNotFoundError:
        raise SlurmError(f"{argv[0]} not found: is this a Slurm login node?") from None
    except subprocess.TimeoutExpired:
        raise SlurmError(f"{argv[0]} did not answer within {TIMEOUT_S} s") from None
    if done.returncode != 0:
        raise SlurmError(f"{shlex.join(argv)} failed: {done.stderr.strip()}")
    return done.stdout


def sbatch(script: str | os.PathLike[str]) -> str:
    """Submit a batch script; return the job id."""
    return _run(["sbatch", "--parsable", str(script)]).strip().split(";")[0]


def sacct_states(job_id: str) -> dict[str, str]:
    """JobID -> State for the job and each of its array tasks (no steps)."""
    out = _run(["sacct", "-j", job_id, "-X", "-n", "-P", "-o", "JobID,State"])
    states = {}
    for line in out.splitlines():
        job, _, state = line.partition("|")
        states[job] = state.split()[0] if state else "UNKNOWN"  # "CANCELLED by 0"
    return states


def write_script(text: str, path: str | os.PathLike[str]) -> Path:
    """Write a batch script (executable) and return its path."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)
    target.chmod(0o755)
    return target

