"""The GEMM request, defined once: what the task builds (`tasks.gemm.Gemm.request`: all but the
id, the payload of a handoff request of kind `gemm`) and the bench runs
(`bench.runner.gemm_workload` adds the id back; `run_request` / `run_bench`).

    id          unique within an RL step (the handoff makes it a file name)
    completion  the raw model text; the bench extracts the kernel from it
    problem     {name, M, N, K} (or {size}, and check_size): `bench.result.Problem.from_dict`;
                in process also a `Problem` as it is; None: the 256^3 default
    stage       the SQD stage index the prompt had (recorded, never read by the bench), or None
    forbidden   the techniques the prompt forbade (names or aliases: `bench.techniques`), or None

Other keys are kept as they are (the handoff passes them through to the bench). Light: pydantic
only, so the handoff's schema and the tasks import it without the bench's runtime.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class BenchRequest(BaseModel):
    """One completion to benchmark (the fields: the module docstring)."""

    model_config = ConfigDict(extra="allow")

    id: str = Field(description="unique within the step; becomes a file name")
    completion: str = Field(description="the raw model text")
    problem: Any = Field(None, description="{name, M, N, K}; None: the bench's default")
    stage: int | None = Field(None, description="SQD stage")
    forbidden: list[str] | None = Field(None, description="techniques the prompt forbade")
