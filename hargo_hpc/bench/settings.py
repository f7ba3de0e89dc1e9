"""Settings of the compile-and-time benchmark: the `[bench]` section of an experiment file.

Owned by `hargo_hpc.bench`; `hargo_hpc.config` composes it into the experiment config.
Pure pydantic, no torch.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class Penalties(BaseModel):
    """Reward of each failure status (defaults: the seed paper's levels), and of an ok kernel
    off its SQD stage (`off_stage`: a forbidden technique used or a required one missing,
    judged after the code under `stage_rules = "after"`)."""

    model_config = ConfigDict(extra="forbid")

    format_violation: float = -100.0
    compile_error: float = -40.0
    timeout: float = -30.0
    runtime_error: float = -20.0
    wrong_result: float = -10.0
    off_stage: float = Field(
        -5.0, description="an ok kernel that breaks its stage's rules: above wrong_result, "
        "below every on-stage ok kernel (whose reward is >= 0)",
    )

    @model_validator(mode="after")
    def _off_stage_between(self) -> Penalties:
        if not self.wrong_result < self.off_stage < 0:
            raise ValueError(f"off_stage ({self.off_stage:g}) must lie above wrong_result "
                             f"({self.wrong_result:g}) and below 0, the least an ok kernel on its "
                             "stage earns")  # fmt: skip
        return self


class BenchSettings(BaseModel):
    """How generated DGEMM kernels are compiled, run, verified, timed and rewarded."""

    model_config = ConfigDict(extra="forbid")

    compiler: str = "gcc"
    flags: list[str] = Field(default_factory=lambda: ["-O3", "-march=native", "-fopenmp"])
    size: int = Field(256, gt=0, description="M = N = K of the timed problem (paper: 256)")
    check_size: int = Field(
        97, gt=0, description="second verified size, not a multiple of any block size"
    )
    warmup: int = Field(1, ge=0)
    repetitions: int = Field(
        5, ge=1, description="timed pairs (kernel call, reference call) at least"
    )
    max_repetitions: int = Field(
        63, ge=1,
        description="timed pairs at most (more than `repetitions` only within the budget; "
        "below `repetitions` it is raised to it)",
    )
    timed_budget_ms: float = Field(
        150.0, ge=0,
        description="pairs are added past `repetitions` until the kernel's timed calls sum to "
        "this (a fast kernel's per-pair ratio is the noisiest; 0 = exactly `repetitions`)",
    )
    threads: int = Field(0, ge=0, description="OpenMP threads; 0 = the CPUs allocated to the job")
    proc_bind: str = Field(
        "close", description="OMP_PROC_BIND for the run ('' = leave threads unpinned)"
    )
    compile_timeout_s: float = Field(30.0, gt=0)
    run_timeout_s: float = Field(20.0, gt=0)
    request_timeout_s: float = Field(120.0, gt=0)
    memory_limit_mb: int = Field(2048, gt=0)
    output_cap_bytes: int = Field(4096, gt=0)
    shaping: Literal["raw", "scaled", "log"] = "scaled"
    reward_scale: float = Field(1.0, gt=0)
    reference: str = Field(
        "auto",
        description="DGEMM timed next to every candidate: auto (numpy's OpenBLAS, else the "
        "shipped openmp kernel), openblas, or a shipped kernel's name",
    )
    reference_margin: float | None = Field(
        None, ge=1.0,
        description="off (None) by default; if set, GFLOPS above margin x the reference's best "
        "call of the same run are also flagged suspicious (the reference may run a generic "
        "kernel: an honest faster kernel would get 0)",
    )
    peak_margin: float = Field(
        1.25, ge=1.0,
        description="GFLOPS above margin x the node's theoretical peak (bench/peak.py: threads "
        "x clock x DP FLOP/cycle, derived at run time) are flagged suspicious, not rewarded",
    )
    untimed_call_timeout_s: float = Field(
        5.0, gt=0, description="limit of each untimed call (warm-up, check) and of start-up"
    )
    seed: int = Field(
        0,
        ge=0,
        description="0 = fresh getrandom() inputs per call (training); a fixed seed reproduces a "
        "run but the kernel can read it: debugging only",
    )
    cache_dir: str = Field("", description="compile cache; '' = $XDG_CACHE_HOME/hargo-hpc/bench")
    cache_max_bytes: int = Field(
        2 << 30, gt=0,
        description="compile cache bound in bytes; least recently used entries beyond it go",
    )
    cache_max_entries: int = Field(20000, gt=0, description="compile cache bound in entries")
    static_data_limit_mb: int = Field(
        64, gt=0,
        description="a kernel's allocated sections + commons beyond this: format_violation",
    )
    sandbox_uids: str = Field(
        "61000-61999",
        description="uids leased one per request when the worker is root ('' = sandbox_user)",
    )
    sandbox_user: str = Field(
        "nobody", description="the user compiles run as when sandbox_uids is ''"
    )
    compile_memory_limit_mb: int = Field(4096, gt=0)
    output_limit_bytes: int = Field(
        1 << 20, gt=0, description="stdout+stderr beyond this kills the run (runtime_error)"
    )
    max_processes: int = Field(256, gt=0, description="RLIMIT_NPROC of the sandboxed user")
    penalties: Penalties = Field(default_factory=Penalties)
    stage_rules: Literal["after", "before"] = Field(
        "after",
        description="when an SQD stage's rules apply: 'after' judges the code as plain GRPO "
        "does and gives an ok kernel that breaks them penalties.off_stage; 'before' (the "
        "ablation, harness <= 2.2) refuses a forbidden technique before compiling "
        "(format_violation) and a missing required one costs format_violation too",
    )

    def stage_penalty(self) -> float:
        """The reward of an ok kernel that misses a technique its SQD stage requires: the
        off-stage reward, or under `stage_rules = "before"` the format-violation penalty."""
        p = self.penalties
        return p.off_stage if self.stage_rules == "after" else p.format_violation

    def pair_bounds(self) -> tuple[int, int]:
        """(fewest, most) timed pairs the judge makes: repetitions, and max_repetitions raised to
        it; with timed_budget_ms 0 exactly `repetitions`."""
        if self.timed_budget_ms == 0:
            return self.repetitions, self.repetitions
        return self.repetitions, max(self.repetitions, self.max_repetitions)
