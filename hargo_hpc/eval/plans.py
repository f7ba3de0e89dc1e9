"""What an evaluation plans and gets back, shared by `eval.evaluate` and the modules it uses
(the baseline cache, paired comparisons): each task's `TaskPlan`, one model's `Answers`, and
`EvalError`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hargo_hpc.errors import HargoError
from hargo_hpc.tasks.base import Example, Stage, Task

Log = Callable[[str], object]


class EvalError(HargoError, ValueError):
    """The evaluation cannot run (one line naming the path or option)."""


@dataclass(frozen=True)
class TaskPlan:
    """How one task is evaluated: its examples, `samples` completions of each (rows
    u·samples … u·samples + samples − 1 answer example u), and the decoding."""

    examples: list[Example]
    samples: int
    max_new_tokens: int
    stop: tuple[str, ...]
    do_sample: bool
    temperature: float = 1.0
    top_p: float = 1.0
    stage: Stage | None = None  # an SQD stage the prompts state; None: the plain prompt

    def user_text(self, task: Task, example: Example) -> str:
        """The prompt's user text (`Task.stage_text`)."""
        return task.stage_text(example, self.stage)

    def forbidden(self) -> list[list[str] | None]:
        """Per row, the techniques its prompt forbade (what the bench request carries)."""
        return [None if self.stage is None else list(self.stage.forbid)] * len(self.rows)

    @property
    def rows(self) -> list[Example]:
        """The example of every row."""
        return [e for e in self.examples for _ in range(self.samples)]

    def decoding(self) -> dict[str, Any]:
        """What metrics.json records of it (the baseline's cache key includes it)."""
        out: dict[str, Any] = {"samples": self.samples, "max_new_tokens": self.max_new_tokens,
                               "stop": list(self.stop), "do_sample": self.do_sample}
        if self.do_sample:  # each (example, sample) its own stream (eval.evaluate.example_seed)
            out.update(temperature=self.temperature, top_p=self.top_p,
                       seeding="per example and sample")
        if self.stage is not None:
            out["stage"] = {"name": self.stage.name, "forbid": list(self.stage.forbid),
                            "require": list(self.stage.require)}
        return out


@dataclass
class Answers:
    """One model's answers per task, one per row of the task's plan."""

    texts: dict[str, list[str]] = field(default_factory=dict)
    records: dict[str, list[dict[str, Any] | None]] = field(default_factory=dict)

    def predictions(self, task: Task) -> list[Any]:
        """What `task.metrics` scores: bench records for a remote task, else the texts."""
        return list(self.records[task.name] if task.remote else self.texts[task.name])
