"""A generated step on its way to the update (`step.start_step` → `step.finish_step`), and what a
checkpoint keeps of it when it is in flight (rollout.max_staleness 1)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import torch
from torch import Tensor
from torch.nn.functional import pad

from hargo_hpc.sqd import StageSpec
from hargo_hpc.tasks.base import Example
from hargo_hpc.train import metrics as m
from hargo_hpc.train.rollout.generate import Generations, merge_generations

if TYPE_CHECKING:
    from hargo_hpc.train.rollout.rewards import PendingRewards

T = TypeVar("T")


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

    def extended(self, more: Rollout, world: int, pad_id: int) -> Rollout:
        """This step with `more` of its prompts (a refill round: `train.step.refill`), each
        rank's share one block again (rank r: its prompts here, then its prompts of `more`),
        this rank's generations and log-probs joined (padded to the wider), timers added."""
        G = len(self.stages) // max(len(self.everything), 1)
        mine, theirs = self.gen.prompt_ids.shape[0] // G, more.gen.prompt_ids.shape[0] // G
        gen = merge_generations([(range(mine), self.gen),
                                 (range(mine, mine + theirs), more.gen)],
                                mine + theirs, G, pad_id)
        old = None
        if self.old is not None and more.old is not None:
            width = max(self.old.shape[1], more.old.shape[1])
            old = torch.cat([pad(self.old, (0, width - self.old.shape[1])),
                             pad(more.old, (0, width - more.old.shape[1]))])
        for phase, seconds in more.timer.seconds.items():
            self.timer.seconds[phase] = self.timer.seconds.get(phase, 0.0) + seconds
        return Rollout(self.step, by_rank(self.everything, more.everything, world),
                       by_rank(self.prompts, more.prompts, world),
                       by_rank(self.stages, more.stages, world), gen,
                       by_rank(self.texts, more.texts, world), old, self.policy_version,
                       timer=self.timer)

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


def by_rank(first: Sequence[T], more: Sequence[T], world: int) -> list[T]:
    """Two rank-ordered lists (each `world` equal blocks, rank r's r-th) as one: rank r's
    block of `first`, then its block of `more`, for r = 0 … world − 1."""
    a, b = len(first) // world, len(more) // world
    return [x for r in range(world) for x in (*first[r * a:(r + 1) * a],
                                               *more[r * b:(r + 1) * b])]
