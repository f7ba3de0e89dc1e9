"""SQD as the RL loop holds it (`sqd.enabled`): one object per run over the problems of the
training split's staged tasks (`Task.staged`; each example's `Task.problem_key`: GEMM's problem
names), with the stage each prompt gets, what a step's bench records tell it, and its state for
the checkpoint (`state_dict` / `load_state_dict`, `hargo_hpc.sqd.Sqd`'s). It asks the tasks for
these capabilities, never for their names.

Each step, after the rewards came back (`observe`): a required technique of the stage a prompt
had, missing from an ok kernel, costs the stage penalty (`BenchSettings.stage_penalty`: the
off-stage reward, as a forbidden one costs in the bench; the reward is
`bench.reward.record_reward`'s); an on-stage ok kernel gets the archive's bonus on top
(`Sqd.bonuses`: a new or better elite, a rarely visited cell); then SQD sees
the step's results (archive, advancement) and rank 0 writes its files under `<run dir>/sqd/`.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hargo_hpc.bench.reward import record_reward
from hargo_hpc.sqd import RESULTS, Result, Sqd, SqdSettings, StageSpec
from hargo_hpc.tasks.base import Example, Task
from hargo_hpc.train import metrics as m
from hargo_hpc.train.backend import distributed

if TYPE_CHECKING:
    from hargo_hpc.train.rollout.rewards import RewardBatch

def _to_stderr(line: str) -> None:
    print(line, file=sys.stderr)


class SqdRun:
    """SQD over `problems`, writing to `directory`; `penalty`: the reward of an ok kernel that
    misses a required technique (`BenchSettings.stage_penalty`); `log`: where rank 0 says
    what SQD did (a stage advanced), the run's log."""

    def __init__(self, settings: SqdSettings, problems: Sequence[str], directory: Path,
                 tasks: Mapping[str, Task], penalty: float,
                 log: Callable[[str], object] = _to_stderr) -> None:
        self.sqd = Sqd(settings, problems)
        self.directory = directory
        self.tasks = dict(tasks)
        self.penalty = penalty
        self.log = log

    @classmethod
    def of(cls, settings: SqdSettings, train: Mapping[str, Sequence[Example]],
           tasks: Mapping[str, Task], directory: Path, penalty: float,
           log: Callable[[str], object] = _to_stderr) -> SqdRun | None:
        """SQD over the problems of the training split's staged tasks; None when SQD is off
        or the run has no staged task."""
        names = [name for name in train if name in tasks and tasks[name].staged]
        if not settings.enabled or not names:
            return None
        problems = sorted({key for name in names for e in train[name]
                           if (key := tasks[name].problem_key(e)) is not None})
        return cls(settings, problems, directory, tasks, penalty, log)

    def _problem(self, example: Example) -> str | None:
        """The problem of `example` when its task is staged; None otherwise (a text task)."""
        task = self.tasks.get(example.task)
        return task.problem_key(example) if task is not None and task.staged else None

    def stage_of(self, example: Example) -> StageSpec | None:
        """The SQD stage of `example`'s problem now; None for a task that is not staged."""
        problem = self._problem(example)
        return None if problem is None else self.sqd.stage_of(problem)

    def observe(self, step: int, rows: Sequence[Example], texts: Sequence[str],
                stages: Sequence[StageSpec | None], batch: RewardBatch) -> None:
        """The required-technique penalty and the archive's bonus (`Sqd.bonuses`, against the
        archive before this step) written into `batch.rewards`, then SQD's step (the module
        docstring); every rank alike, rank 0 prints and writes."""
        results, where = [], []
        for i, (example, text, stage) in enumerate(zip(rows, texts, stages, strict=True)):
            record, problem = batch.records[i], self._problem(example)
            if problem is None or record is None or stage is None:
                continue
            missing = (self.sqd.required_miss(problem, record, stage.name)
                       if record.get("status") == "ok" else [])
            reward = record_reward(record, missing=missing, penalty=self.penalty)
            if batch.scored[i] and reward is not None:
                batch.rewards[i] = reward
            results.append(Result(problem, self.tasks[example.task].extract(text), record,
                                  stage.name))
            where.append(i)
        for i, bonus in zip(where, self.sqd.bonuses(results), strict=True):
            if bonus and batch.scored[i]:
                batch.rewards[i] += bonus
        for line in self.sqd.observe(step, results):
            if distributed.is_main():
                self.log(line)
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
