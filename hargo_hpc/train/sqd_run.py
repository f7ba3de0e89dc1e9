"""SQD as the RL loop holds it (`sqd.enabled`): one object per run over the GEMM problems of
the training split, with the stage each prompt gets, what a step's bench records tell it, and
its state for the checkpoint (`state_dict` / `load_state_dict`, `hargo_hpc.sqd.Sqd`'s).

Each step, after the rewards came back (`observe`): a required technique of the stage a prompt
had, missing from an ok kernel, costs the format-violation penalty (the bench judged what is
forbidden, SQD what is required); then SQD sees the step's results (archive, advancement) and
rank 0 writes its files under `<run dir>/sqd/`.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hargo_hpc.sqd import RESULTS, Result, Sqd, SqdSettings, StageSpec
from hargo_hpc.tasks.base import Example, Task
from hargo_hpc.train import distributed
from hargo_hpc.train import metrics as m

if TYPE_CHECKING:
    from hargo_hpc.train.rewards import RewardBatch

SQD_TASKS = ("gemm",)  # the tasks whose prompts SQD stages


class SqdRun:
    """SQD over `problems`, writing to `directory`; `penalty`: the reward of an ok kernel that
    misses a required technique (bench.penalties.format_violation)."""

    def __init__(self, settings: SqdSettings, problems: Sequence[str], directory: Path,
                 tasks: Mapping[str, Task], penalty: float) -> None:
        self.sqd = Sqd(settings, problems)
        self.directory = directory
        self.tasks = dict(tasks)
        self.penalty = penalty

    @classmethod
    def of(cls, settings: SqdSettings, train: Mapping[str, Sequence[Example]],
           tasks: Mapping[str, Task], directory: Path, penalty: float) -> SqdRun | None:
        """SQD over the GEMM problems of the training split; None when SQD is off or the run
        has no staged task."""
        names = [name for name in SQD_TASKS if name in train]
        if not settings.enabled or not names:
            return None
        problems = sorted({e.meta["problem"]["name"] for name in names for e in train[name]})
        return cls(settings, problems, directory, tasks, penalty)

    def stage_of(self, example: Example) -> StageSpec | None:
        """The SQD stage of `example`'s problem now; None for a text task."""
        if example.task not in SQD_TASKS:
            return None
        return self.sqd.stage_of(example.meta["problem"]["name"])

    def observe(self, step: int, rows: Sequence[Example], texts: Sequence[str],
                stages: Sequence[StageSpec | None], batch: RewardBatch) -> None:
        """The required-technique penalty written into `batch.rewards`, then SQD's step (the
        module docstring); every rank alike, rank 0 prints and writes."""
        results = []
        for i, (example, text, stage) in enumerate(zip(rows, texts, stages, strict=True)):
            record = batch.records[i]
            if example.task not in SQD_TASKS or record is None or stage is None:
                continue
            problem = example.meta["problem"]["name"]
            missing = (self.sqd.required_miss(problem, record, stage.name)
                       if record.get("status") == "ok" else [])
            if missing and batch.scored[i]:
                batch.rewards[i] = float(self.penalty)
            results.append(Result(problem, self.tasks[example.task].extract(text), record,
                                  stage.name))
        for line in self.sqd.observe(step, results):
            if distributed.is_main():
                print(line, file=sys.stderr)
        if distributed.is_main():
            self.sqd.save(self.directory, step, results)

    def metrics(self) -> dict[str, float]:
        return self.sqd.metrics()

    def state_dict(self) -> dict[str, Any]:
        return self.sqd.state_dict()

    def load_state_dict(self, state: Mapping[str, Any], where: str) -> None:
        """Restore a checkpoint's SQD state; SqdError (one line, naming `where`) when it does
        not fit this run's problems."""
        self.sqd.load_state_dict(state, where)

    def truncate_after(self, step: int) -> None:
        """(Rank 0, on resume.) Cut the results log back to the checkpoint's step."""
        m.truncate_after(self.directory / RESULTS, step)
