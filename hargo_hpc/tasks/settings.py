"""Settings of the text tasks' rewards: the `[rewards]` section of an experiment file.

Owned by `hargo_hpc.tasks`; `hargo_hpc.config` composes it. Pure pydantic, no torch.
What each reward computes, and why: docs/tasks.md.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class RewardSettings(BaseModel):
    """How the text tasks turn a completion into a reward (GEMM's comes from the bench)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    data_race_parse: Literal["strict", "lenient"] = Field(
        "lenient",
        description="strict: the whole trimmed, lower-cased answer is yes/no; lenient: the "
        "first yes/no word",
    )
    unparsable_reward: float = Field(
        -0.5, description="data race: reward of an answer with no yes/no (correct 1, wrong 0)"
    )
    qa_metric: Literal["f1", "exact", "similarity"] = Field(
        "f1", description="MLPerf QA: token F1, normalised exact match, or embedding similarity"
    )
    brevity_chars: int = Field(
        40, gt=0, description="MLPerf QA: answers longer than this many characters pay a term"
    )
    brevity_weight: float = Field(
        0.2, ge=0, le=1, description="MLPerf QA: the most the brevity term can take off"
    )
    similarity_baseline: Literal["question", "none"] = Field(
        "question",
        description="PLP (and MLPerf's similarity metric): question = pay only the similarity "
        "beyond the question's own, so an echo earns 0; none = the plain cosine (echoing pays: "
        "for ablations and for tests of the loop, which need contrast from an untrained model)",
    )
    similarity_model: str = Field(
        "", description="sentence-embedding model directory; '' = the packaged all-MiniLM-L6-v2"
    )
