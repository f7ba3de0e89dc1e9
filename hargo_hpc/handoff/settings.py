"""Settings of the shared-filesystem handoff: the `[handoff]` section of an experiment file.

Owned by `hargo_hpc.handoff`; `hargo_hpc.config` composes it into the experiment config.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

STEP_SPAN = 1_000_000  # handoff steps per run sharing one handoff (run i: i*SPAN + step)

class HandoffSettings(BaseModel):
    """Where trainer and bench workers exchange requests and results, and how patiently."""

    model_config = ConfigDict(extra="forbid")

    dir: str = Field("", description="handoff directory on the shared FS; '' = <run dir>/handoff")
    lease_s: float = Field(60.0, gt=0, description="a claim not renewed for this long expires")
    poll_interval_s: float = Field(0.5, gt=0)
    step_timeout_s: float = Field(900.0, gt=0, description="stragglers become infra_error")
    max_attempts: int = Field(3, ge=1, description="infra failures before a request gives up")
    workers: int = Field(4, ge=1, description="size of the bench worker job array")
    worker_max_idle_s: float = Field(600.0, gt=0)
    worker_threads: int = Field(1, ge=1, description="requests one worker benchmarks at once")
    fsync: bool = Field(
        True, description="fsync results and the trainer's files before they are put in place"
    )
    max_infra_share: float = Field(
        0.5, gt=0, le=1,
        description="a worker whose workload runs end infra_error more often than this (after "
        "infra_min_runs) exits non-zero with the first error: a broken harness must not "
        "quietly shrink the training data",
    )
    infra_min_runs: int = Field(8, ge=1, description="runs before max_infra_share is judged")
    local_workers: int = Field(
        0, ge=0,
        description="hargo train starts this many local `hargo worker` processes on its handoff "
        "directory and stops them at the end; 0 under hargo submit, where the worker array "
        "does it",
    )

    step_offset: int = Field(
        0, ge=0,
        description="added to the trainer's step numbers in the handoff directory: runs that "
        "share one directory (the runs of a sweep under hargo submit) get disjoint ranges",
    )

    @model_validator(mode="after")
    def _idle_outlives_lease(self) -> HandoffSettings:
        if self.worker_max_idle_s <= self.lease_s:
            raise ValueError(
                f"worker_max_idle_s ({self.worker_max_idle_s:g}) must be longer than lease_s "
                f"({self.lease_s:g}): a worker must outlive a lease to take over a dead claim"
            )
        return self
