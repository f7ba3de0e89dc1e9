"""What a task is: an `Example`, and the `Task` every task family implements.

A task turns published records (HPC-GPT's Alpaca JSON, or GEMM problems) into examples, an
example into the text the model is asked, a completion into an answer, and answers into
rewards and metrics. The trainer and the evaluation only see this interface: they mix tasks
without knowing them, asking a task for its capabilities (`remote`, `staged`, `problem_key`,
`sft_corpus`, `headline`), never for its name. The task name travels with each example for
metrics and logs; it never reaches `hargo_hpc.algorithms`.

Nothing here imports torch; the similarity reward loads its model on first use.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence, Sized
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from hargo_hpc.errors import HargoError
from hargo_hpc.tasks.settings import RewardSettings


class DataError(HargoError, ValueError):
    """Bad task data or predictions; the message is one line naming the file and the record."""


def check_pairs(left: Sized, right: Sized, left_name: str, right_name: str) -> None:
    """ValueError naming both counts unless `left` and `right` pair one to one (examples and
    their completions, references and predictions)."""
    if len(left) != len(right):
        raise ValueError(f"{len(left)} {left_name} but {len(right)} {right_name}")


@dataclass(frozen=True)
class Example:
    """One question of one task.

    `id` is stable across runs (`<task>:<index in the source>`); `output` is the reference
    answer; `label` the class used for stratified splits (data race: yes/no; else '');
    `meta` holds what a task needs besides (GEMM: the problem).
    """

    task: str
    id: str
    instruction: str
    input: str
    output: str
    label: str = ""
    meta: Mapping[str, Any] = field(default_factory=dict)


class Stage(Protocol):
    """What a task needs of an SQD stage (`hargo_hpc.sqd.StageSpec`): the techniques it
    forbids and requires, those it permits, and whether it is open (asks the plain prompt)."""

    name: str
    forbid: list[str]
    require: list[str]

    @property
    def permitted(self) -> list[str]: ...

    @property
    def open(self) -> bool: ...


class Task(ABC):
    """One task: subclasses set the class variables and implement the abstract methods."""

    name: ClassVar[str]
    files: ClassVar[tuple[str, ...]] = ()  # the published file names (HPC-GPT), for a directory
    sample: ClassVar[str] = ""  # the shipped sample's file name in hargo_hpc/tasks/samples/
    remote: ClassVar[bool] = False  # True: rewarded by the bench through the handoff (GEMM)
    alpaca: ClassVar[bool] = True  # its records are Alpaca's instruction / input / output
    reward_kind: ClassVar[str] = ""  # a remote task's request kind (handoff.workloads); '' = name
    staged: ClassVar[bool] = False  # True: SQD stages its prompts per problem (GEMM)
    # 'module:function' giving (user text, completion) SFT pairs of its examples, for a task
    # whose data has no reference answers (GEMM: tasks.corpus.sft_examples); '' = the answers
    sft_corpus: ClassVar[str] = ""
    headline: ClassVar[tuple[str, ...]] = ()  # the metrics an evaluation table shows first
    form: ClassVar[tuple[str, ...]] = ()  # the metrics that say answers are in form (hargo sft)
    # metrics that are maxima: reported as points, never with an interval (a bootstrap of a
    # maximum cannot exceed the observed one: its upper end is the value itself)
    points: ClassVar[tuple[str, ...]] = ()
    # which way is better, for a verdict on a change: higher, except these (lower is better)
    # and the undirected ones (a length: up or down, neither better)
    lower_better: ClassVar[tuple[str, ...]] = ()
    undirected: ClassVar[tuple[str, ...]] = ()
    # generation budget: tokens a completion may take (None = rollout.max_new_tokens) and stop
    # strings of its own (config.generation_budget; a TaskSpec may set either)
    max_new_tokens: ClassVar[int | None] = None
    stop: ClassVar[tuple[str, ...]] = ()
    # evaluation: at most this many held-out examples (0 = all), this many completions each
    # (> 1: sampled); sizes that can tell two methods apart (docs/evaluation.md)
    eval_examples: ClassVar[int] = 0
    eval_samples: ClassVar[int] = 1

    def __init__(self, rewards: RewardSettings | None = None) -> None:
        self.rewards = rewards or RewardSettings()

    @abstractmethod
    def from_record(self, record: Mapping[str, Any], index: int) -> Example | None:
        """The example of one validated source record; None when it does not fit the task
        (dropped, and counted in the log)."""

    def user_text(self, example: Example) -> str:
        """What the model is asked, before any template (Alpaca or chat: `prompts.py`)."""
        if example.input:
            return f"{example.instruction}\n\n{example.input}"
        return example.instruction

    def problem_key(self, example: Example) -> str | None:
        """The problem `example` poses, for a staged task (SQD keeps one stage per problem);
        None for a task that is not staged."""
        return None

    def prompt_for(self, example: Example, permitted: Sequence[str] | None = None,
                   forbidden: Sequence[str] | None = None) -> str:  # fmt: skip
        """The user text of `example` at an SQD stage that permits and forbids these
        techniques (a staged task's)."""
        raise NotImplementedError(f"task {self.name!r} is not staged")

    def stage_text(self, example: Example, stage: Stage | None) -> str:
        """The user text of `example` asked at `stage`: the plain one for None or an open
        stage, else the stage's (`prompt_for` with what it permits and forbids). Training and
        evaluation both ask through here, so the two prompts cannot drift apart."""
        if stage is None or stage.open:
            return self.user_text(example)
        return self.prompt_for(example, stage.permitted, stage.forbid)

    @abstractmethod
    def extract(self, completion: str) -> str:
        """The answer in a completion (any text: empty, huge, binary; never raises)."""

    def reward(self, examples: Sequence[Example], completions: Sequence[str]) -> list[float]:
        """One reward per (example, completion) pair, computed here (text tasks)."""
        raise NotImplementedError(f"task {self.name!r} is rewarded remotely (request/record)")

    def request(self, example: Example, completion: str, *, stage: int | None = None,
                forbidden: Sequence[str] | None = None) -> dict[str, Any]:
        """The payload of a remotely rewarded task's handoff request (plain JSON data that the
        workload of its `reward_kind` reads; the trainer adds the id and the kind): GEMM's is
        a `bench.contract.BenchRequest` but its id (completion, problem; the SQD `stage` and
        the techniques its prompt `forbidden`)."""
        raise NotImplementedError(f"task {self.name!r} is rewarded in process (reward)")

    def reward_from_record(self, record: Mapping[str, Any]) -> float | None:
        """The reward in a bench result record; None when it is not a reward (infra_error)."""
        raise NotImplementedError(f"task {self.name!r} is rewarded in process (reward)")

    @abstractmethod
    def metrics(self, examples: Sequence[Example], predictions: Sequence[str]) -> dict[str, Any]:
        """The task's metrics over predictions (raw completions) of these examples."""
