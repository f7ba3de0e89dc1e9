"""When a trainer in a Slurm job must stop to checkpoint before its time limit: the job's end as
Slurm says it, and a lead derived from the run's own measured step and save times, never less
than the configured `signal_lead_s` (docs/cluster.md, "4. Time limits, requeues and waiting").
"""

from __future__ import annotations

import datetime
import math
import os
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

REASON = "the job's time limit"  # StopSignals.requested when the deadline stops the run


def derived_lead_s(floor_s: float, step_s: float, save_s: float) -> float:
    """max(floor, 1.5 · (step + save)): a stop needs the step in progress (at most one, the
    last one's time) and a save (the last one's time), with half again as margin for a slower
    filesystem; never less than the lead the job's signal has."""
    return max(float(floor_s), 1.5 * (step_s + save_s))


def lead_advice(floor_s: float, step_s: float, save_s: float) -> str | None:
    """A line when a stop needs more than the signal's lead covers (`derived_lead_s` above
    `floor_s`), saying the lead that would leave it to Slurm's signal; None when it covers."""
    needed = derived_lead_s(floor_s, step_s, save_s)
    if needed <= floor_s:
        return None
    suggest = int(math.ceil(needed / 10.0) * 10)
    return (f"a save took {save_s:.0f} s and a step {step_s:.0f} s: more than the time-limit "
            f"signal's lead (slurm.train.signal_lead_s {floor_s:.0f} s) covers; this trainer "
            f"stops by itself {needed:.0f} s before its job's end (a lead of at least "
            f"{suggest} leaves it to the signal)")


def parse_end(text: str) -> float | None:
    """squeue's `%e` (local time, 2026-12-05T15:04:12) as epoch seconds; None for a job
    without an end (`N/A`, `Unknown`, `NONE`)."""
    try:
        return datetime.datetime.fromisoformat(text.strip()).timestamp()
    except ValueError:
        return None


def job_end(environ: Mapping[str, str] | None = None,
            run: Callable[..., subprocess.CompletedProcess[str]] = subprocess.run
            ) -> float | None:
    """This Slurm job's end (epoch seconds): `SLURM_JOB_END_TIME` where Slurm sets it, else
    squeue's end time of `SLURM_JOB_ID`; None outside a job or when neither says."""
    env = os.environ if environ is None else environ
    if env.get("SLURM_JOB_END_TIME", "").isdigit():
        return float(env["SLURM_JOB_END_TIME"])
    job = env.get("SLURM_JOB_ID")
    if not job:
        return None
    try:
        done = run(["squeue", "-h", "-j", job, "-o", "%e"], capture_output=True, text=True,
                   timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = done.stdout.strip().splitlines() if done.returncode == 0 else []
    return parse_end(lines[0]) if lines else None


@dataclass(frozen=True)
class Deadline:
    end: float  # epoch seconds
    floor_s: float  # the job's configured signal lead

    def lead_s(self, step_s: float, save_s: float) -> float:
        return derived_lead_s(self.floor_s, step_s, save_s)

    def reached(self, step_s: float, save_s: float, now: float | None = None) -> bool:
        """Whether to stop now: the derived lead exceeds the signal's (which would come too late
        for a save) and what is left of the job is no more than it. A lead the signal covers
        is left to the signal."""
        lead = self.lead_s(step_s, save_s)
        left = self.end - (time.time() if now is None else now)
        return lead > self.floor_s and left <= lead

    @classmethod
    def of_job(cls, floor_s: float) -> Deadline | None:
        """This job's deadline, None outside a Slurm job (or one without an end)."""
        end = job_end()
        return None if end is None else cls(end, floor_s)
