"""Rewards of one RL step: text tasks in process, GEMM code through the handoff to the bench.

`RewardRouter.score(step, examples, completions)` returns a `RewardBatch`, one entry per
completion, in the order given: a text task's rewards computed here, once per task on its
share; a remote task's requests submitted to the handoff first (the bench works while the
text rewards are computed) and their records read back (`task.reward_from_record`); a record
that is not scored (`infra_error`, a timeout) leaves the loss and is counted, never scored as
a failure. The wait is the handoff's, watched by the local workers' liveness hook. Only rank 0
holds a router. Light: no torch. The rules: docs/rewards.md.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hargo_hpc.errors import HargoError
from hargo_hpc.handoff.errors import HandoffError
from hargo_hpc.handoff.settings import HandoffSettings
from hargo_hpc.handoff.trainer import Trainer
from hargo_hpc.tasks.base import Example, Task
from hargo_hpc.train.rollout.local_workers import WorkerDied

__all__ = ["RewardBatch", "RewardError", "RewardRouter", "request_id"]

Liveness = Callable[[str], None]  # raises (WorkerDied) when a worker is gone; arg: what waits


class RewardError(HargoError, RuntimeError):
    """A step's rewards cannot be had (one line): e.g. the handoff holds another batch."""


class WaitInterrupted(HargoError, RuntimeError):
    """The wait for a step's bench results ended by a stop request (`should_stop`)."""


def request_id(index: int) -> str:
    """The handoff request id of completion `index` of a step's batch: `r00000`, `r00001`..."""
    return f"r{index:05d}"


@dataclass
class RewardBatch:
    """The rewards of one step's completions, in the order they were given.

    rewards: per completion; 0.0 where not scored. scored: False for an `infra_error` or
    `scored: false` record: the completion is dropped from the loss (and counted). records:
    the bench record of a remote task's completion (GEMM), else None. wait_s: seconds spent
    submitting to and waiting for the handoff (0 without remote tasks).
    """

    rewards: list[float]
    scored: list[bool]
    records: list[dict[str, Any] | None]
    wait_s: float

    @property
    def unscored(self) -> int:
        """How many completions are not scored (dropped from the loss)."""
        return self.scored.count(False)

    def statuses(self) -> dict[str, int]:
        """The bench status histogram of the remote records (`{}` without any)."""
        return dict(Counter(str(r.get("status")) for r in self.records if r is not None))


@dataclass
class PendingRewards:
    """A submitted step (`RewardRouter.submit`): its text rewards computed, its remote rows
    (`remote`: their indices) at the bench until `RewardRouter.collect`."""

    handoff_step: int
    owners: list[Task]
    remote: list[int]
    rewards: list[float]
    wait_s: float = 0.0
    unscored: set[int] = field(default_factory=set)  # text rows whose reward was None


class RewardRouter:
    """Rewards completions through the task registry's tasks (it holds nothing to release:
    the local bench workers belong to the loop that starts them).

    tasks: the run's tasks by name (every `example.task` must be one). handoff_dir: where
    remote tasks' requests go (None: text tasks only). poll_timeout_s: how long a step waits
    for the bench before the stragglers become `infra_error` (None:
    `handoff_settings.step_timeout_s`). log: one line per notable event (completions not
    scored). progress: the waiting step's progress line on stderr. handoff_settings: the
    `[handoff]` section (poll interval, fsync, step timeout). liveness: called before a step's
    requests go out and once a tick of the wait (`Liveness`; e.g. `LocalWorkers.check`).
    should_stop: asked once a tick of the wait; True ends the wait with `WaitInterrupted`
    (the loop's stop request: the step is checkpointed in flight and resumed later).
    """

    def __init__(
        self,
        tasks: Mapping[str, Task],
        *,
        handoff_dir: Path | None,
        poll_timeout_s: float | None = None,
        log: Callable[[str], object] = print,
        progress: bool = True,
        handoff_settings: HandoffSettings | None = None,
        liveness: Liveness | None = None,
        should_stop: Callable[[], bool] | None = None,
    ) -> None:
        if poll_timeout_s is not None and not poll_timeout_s > 0:
            raise ValueError(f"poll_timeout_s must be positive, got {poll_timeout_s}")
        self.tasks = dict(tasks)
        self.handoff_dir = Path(handoff_dir) if handoff_dir is not None else None
        self.settings = handoff_settings or HandoffSettings()
        self.poll_timeout_s = poll_timeout_s
        self.log = log
        self.progress = progress
        self.liveness = liveness
        self.should_stop = should_stop
        self._trainer: Trainer | None = None


    def _handoff(self) -> Trainer:
        if self.handoff_dir is None:
            raise ValueError("this reward router has no handoff directory")
        if self._trainer is None:
            self._trainer = Trainer(self.handoff_dir, self.settings, progress=self.progress)
        return self._trainer

    # ------------------------------------------------------------------ scoring

    def score(
        self,
        step: int,
        examples: Sequence[Example],
        completions: Sequence[str],
        *,
        stage: int | None = None,
        forbidden: Sequence[Sequence[str] | None] | None = None,
    ) -> RewardBatch:
        """The rewards of `completions` (completion i answers `examples[i]`): `submit`, then
        `collect`.

        stage: the SQD stage, sent with every remote request. forbidden: per completion, the
        techniques its prompt forbade (None: none). ValueError for mismatched lengths or an
        example of a task the router does not hold; WorkerDied when a local worker is gone;
        RewardError when the handoff already holds a different batch for `step`.
        """
        return self.collect(self.submit(step, examples, completions, stage=stage,
                                        forbidden=forbidden))

    def submit(
        self,
        step: int,
        examples: Sequence[Example],
        completions: Sequence[str],
        *,
        stage: int | None = None,
        forbidden: Sequence[Sequence[str] | None] | None = None,
    ) -> PendingRewards:
        """Send the step's remote requests to the handoff (the bench works on them from here
        on) and compute the text rewards meanwhile; `collect` waits for the rest. Submitting
        the same step again with the same completions (a resumed run) finds the stored batch
        and its results. Errors as `score`."""
        n = len(examples)
        if len(completions) != n:
            raise ValueError(f"step {step}: {len(completions)} completions for {n} examples")
        if forbidden is not None and len(forbidden) != n:
            raise ValueError(f"step {step}: {len(forbidden)} forbidden lists for {n} examples")
        owners = [self._task_of(example) for example in examples]
        pending = PendingRewards(step + self.settings.step_offset,  # disjoint from other runs'
                                 owners, [i for i, task in enumerate(owners) if task.remote],
                                 [0.0] * n)
        if pending.remote:  # first: the bench works while the text rewards are computed
            started = time.monotonic()
            self._submit(pending.handoff_step, pending.remote, owners, examples, completions,
                         stage, forbidden)
            pending.wait_s = time.monotonic() - started
        pending.unscored = self._text_rewards(owners, examples, completions, pending.rewards)
        return pending

    def collect(self, pending: PendingRewards) -> RewardBatch:
        """The rewards of a submitted step: waits for its bench results (progress, timeout:
        `infra_error`, unscored)."""
        n = len(pending.rewards)
        rewards, scored = list(pending.rewards), [i not in pending.unscored for i in range(n)]
        records: list[dict[str, Any] | None] = [None] * n
        wait_s = pending.wait_s
        if pending.remote:
            started = time.monotonic()
            by_id = self._collect(pending.handoff_step,
                                  [request_id(i) for i in pending.remote])
            wait_s += time.monotonic() - started
            for i in pending.remote:
                record = by_id[request_id(i)]
                records[i] = record
                value = pending.owners[i].reward_from_record(record)
                if value is None:
                    scored[i] = False
                else:
                    rewards[i] = float(value)
            self._report_unscored(pending.handoff_step,
                                  [records[i] for i in pending.remote if not scored[i]],
                                  len(pending.remote))  # fmt: skip
        return RewardBatch(rewards, scored, records, wait_s)

    def _task_of(self, example: Example) -> Task:
        task = self.tasks.get(example.task)
        if task is None:
            known = ", ".join(sorted(self.tasks)) or "none"
            raise ValueError(f"example {example.id}: task {example.task!r} is not one of the "
                             f"router's tasks ({known})")  # fmt: skip
        return task

    def _text_rewards(
        self, owners: Sequence[Task], examples: Sequence[Example], completions: Sequence[str],
        rewards: list[float],
    ) -> set[int]:
        """Each text task once, on its share of the batch; rewards put back in place. A None
        reward (a reward function's "does not apply", as in TRL) leaves its row unscored: the
        rows returned, dropped from the loss and counted."""
        unscored: set[int] = set()
        groups: dict[str, list[int]] = {}
        for i, task in enumerate(owners):
            if not task.remote:
                groups.setdefault(examples[i].task, []).append(i)
        for name, indices in groups.items():
            task = self.tasks[name]
            values = task.reward([examples[i] for i in indices], [completions[i] for i in indices])
            if len(values) != len(indices):
                raise ValueError(f"task {name}: {len(values)} rewards for {len(indices)} "
                                 "completions")  # fmt: skip
            for i, value in zip(indices, values, strict=True):
                if value is None:
                    unscored.add(i)
                    continue
                if not isinstance(value, int | float) or not math.isfinite(value):
                    raise ValueError(f"task {name}: reward {value!r} of example "
                                     f"{examples[i].id} is not a finite number")  # fmt: skip
                rewards[i] = float(value)
        return unscored

    def _submit(
        self, step: int, remote: Sequence[int], owners: Sequence[Task],
        examples: Sequence[Example], completions: Sequence[str], stage: int | None,
        forbidden: Sequence[Sequence[str] | None] | None,
    ) -> None:
        """Build and submit the step's requests; RewardError when the step holds another."""
        if self.handoff_dir is None:
            raise ValueError(f"task {owners[remote[0]].name} is rewarded through the handoff, "
                             "but the reward router has no handoff directory")  # fmt: skip
        if self.liveness is not None:
            self.liveness(f"before step {step}")
        requests = [
            {"id": request_id(i), "kind": owners[i].reward_kind or owners[i].name,
             "payload": owners[i].request(
                 examples[i], completions[i], stage=stage,
                 forbidden=None if forbidden is None else forbidden[i])}
            for i in remote
        ]
        try:
            self._handoff().submit(step, requests)
        except HandoffError as err:  # another batch for this step included
            raise RewardError(f"{self.handoff_dir}: {err}") from None

    def _collect(self, step: int, ids: list[str]) -> dict[str, dict[str, Any]]:
        """The handoff's wait (`Trainer.collect`: its progress line; stragglers at the timeout
        become infra_error), watching the local workers once a tick (`_Watch`)."""
        timeout = self.poll_timeout_s or self.settings.step_timeout_s
        watch = (None if self.liveness is None and self.should_stop is None
                 else _Watch(self.liveness, step, self.should_stop))
        try:
            return self._handoff().collect(step, ids, timeout, watch)
        except HandoffError as err:
            raise RewardError(f"step {step}: {err}") from None

    def _report_unscored(
        self, step: int, unscored: Sequence[dict[str, Any] | None], total: int
    ) -> None:
        if not unscored:
            return
        first = unscored[0] or {}
        why = str(first.get("error") or first.get("reason") or first.get("status") or "")
        self.log(f"step {step}: {len(unscored)} of {total} bench results not scored "
                 f"(infra_error), dropped from the loss; first: {why[:200]}")  # fmt: skip


class _Watch:
    """`Trainer.poll`'s tick: the stop request, then the liveness hook. A worker found gone is
    reported at the next tick, after one more listing of `results/`: that listing holds
    everything the worker wrote, so a worker that wrote the step's last result and left does
    not fail the step, and the count in the message ("waited for 1 of 2") is the true one."""

    def __init__(self, liveness: Liveness | None, step: int,
                 should_stop: Callable[[], bool] | None = None) -> None:
        self.liveness, self.step, self.gone = liveness, step, False
        self.should_stop = should_stop

    def __call__(self, waiting: int, total: int) -> None:
        if self.should_stop is not None and self.should_stop():
            raise WaitInterrupted(f"step {self.step}: stopped while waiting for {waiting} of "
                                  f"{total} bench results")
        if self.liveness is None:
            return
        during = f"while step {self.step} waited for {waiting} of {total} bench results"
        if self.gone:
            self.liveness(during)  # raises again, now with the count after the worker left
        try:
            self.liveness(during)
        except WorkerDied:
            self.gone = True

