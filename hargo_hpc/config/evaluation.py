"""The evaluation's section of a job file, `[eval]`; the options of `hargo eval` override it
for one call. Pure pydantic, no torch.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class EvalSettings(BaseModel):
    """How `hargo eval` (and a submission's eval job) evaluates a run."""

    model_config = ConfigDict(extra="forbid")

    max_examples: int = Field(
        0, ge=0, description="at most this many held-out examples of any task (0 = no cap "
        "beyond each task's eval size: its eval_examples, else 200 yes/no, 100 QA, every GEMM "
        "problem)")
    sample: bool = Field(
        False, description="HPC-GPT's sampling (temperature 0.2, top-p 0.95) instead of greedy")
    judge: str = Field("auto", min_length=1,
                       description="WinRate judge: auto (the task's own score) or llm:MODEL_DIR")
    batch_size: int = Field(8, ge=1, description="prompts per generate call")
