"""A generated step on its way to the update (`step.start_step` → `step.finish_step`), and what a
checkpoint keeps of it when it is in flight (rollout.max_staleness 1)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from torch import Tensor

from hargo_hpc.sqd import StageSpec
from hargo_hpc.tasks.base import Example
from hargo_hpc.train import metrics as m
from hargo_hpc.train.rollout.generate import Generations

if TYPE_CHECKING:
    from hargo_hpc.train.rollout.rewards import PendingRewards


@dataclass
class Rollout:
    """A generated step on its way to the update (`start_step` → `finish_step`): every rank's
    prompts, this rank's generations and its share of them, the sampling policy's log-probs
    when the update needs them, and rank 0's submitted rewards."""

    step: int
    everything: list[Example]  # the step's prompts, the same on every rank
    prompts: list[str]  # their templated texts (a GEMM problem's at its stage then)
    stages: list[StageSpec | None]  # per row, the SQD stage its prompt had (None: no SQD)
    gen: Generations  # this rank's
    texts: list[str]  # every rank's completions, in row order
    old: Tensor | None  # this rank's rows under the sampling policy
    policy_version: int  # optimizer steps taken before generation
    pending: PendingRewards | None = None  # rank 0: the submitted rewards; elsewhere None
    timer: m.PhaseTimer = field(default_factory=m.PhaseTimer)

    def rows(self) -> list[Example]:
        """The example of every row: each prompt's G completions in turn."""
        G = len(self.stages) // max(len(self.everything), 1)
        return [e for e in self.everything for _ in range(G)]

    def examples(self, rank: int, world: int) -> list[Example]:
        share = len(self.everything) // world
        return self.everything[rank * share:(rank + 1) * share]

    def state_dict(self) -> dict[str, Any]:
        """This rank's part as tensors and plain values (a checkpoint's `loop_rank<r>.pt`); the
        submitted rewards are not in it: `resume_rollout` submits them again."""
        return {"step": self.step, "policy_version": self.policy_version,
                "examples": [[e.task, e.id] for e in self.everything],
                "prompts": self.prompts, "texts": self.texts, "old": self.old,
                "stages": [None if s is None else s.name for s in self.stages],
                "gen": {name: getattr(self.gen, name)
                        for name in Generations.__dataclass_fields__}}
