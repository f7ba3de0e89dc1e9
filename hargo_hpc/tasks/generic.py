"""A task from a data file and a reward function, no class to write: `[[data.tasks]] kind =
"generic"` names the file (JSON, JSONL or a saved HF dataset), the fields holding the prompt
and the reference, and a reward function imported from the PYTHONPATH, called as TRL calls its
reward functions. docs/tasks.md, "A task from a data file and a reward function".
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from hargo_hpc._lazy import load_target
from hargo_hpc.tasks.base import DataError, Example, Task
from hargo_hpc.tasks.qa import extract_answer

RewardFunction = Callable[..., Sequence[float | None]]


def generic_task(name: str, *, prompt_field: str, reference_field: str, reward: str,
                 max_new_tokens: int | None = None) -> type[Task]:
    """The Task class of a generic task entry (`config.experiment.TaskSpec`, kind "generic");
    DataError (one line) for a reward function that does not import or is not callable."""
    try:
        function = load_target(reward)
    except (ImportError, AttributeError) as err:
        raise DataError(f"task {name!r}: reward {reward!r}: {type(err).__name__}: {err} (is "
                        "its module on the PYTHONPATH of every node?)") from None
    if not callable(function):
        raise DataError(f"task {name!r}: reward {reward!r} is not a function")
    return type(f"Generic_{name}", (GenericTask,), {
        "name": name, "prompt_field": prompt_field, "reference_field": reference_field,
        "reward_function": staticmethod(function), "reward_name": reward,
        "max_new_tokens": max_new_tokens})


class GenericTask(Task):
    """A prompt and a reference per record; the user's function scores the completions."""

    prompt_field = "prompt"
    reference_field = "answer"
    reward_function: RewardFunction
    reward_name = ""
    alpaca = False  # records hold whatever fields the entry names
    headline = ("reward_mean", "scored_share")

    def from_record(self, record: Mapping[str, Any], index: int) -> Example | None:
        prompt, reference = record.get(self.prompt_field), record.get(self.reference_field)
        if not isinstance(prompt, str) or not prompt.strip() or reference is None:
            return None  # not a record of this task: dropped and counted
        return Example(task=self.name, id=f"{self.name}:{index}", instruction=prompt,
                       input="", output=str(reference))

    def extract(self, completion: str) -> str:
        return extract_answer(completion)

    def reward(self, examples: Sequence[Example], completions: Sequence[str]
               ) -> list[float | None]:  # type: ignore[override]
        """`reward_function(prompts=…, completions=…, references=…)`, one value per completion:
        a number, or None where it does not apply (the row is then not scored). DataError for
        another length or a value that is neither."""
        values = list(self.reward_function(
            prompts=[e.instruction for e in examples], completions=list(completions),
            references=[e.output for e in examples]))
        if len(values) != len(examples):
            raise DataError(f"task {self.name!r}: reward {self.reward_name!r} returned "
                            f"{len(values)} values for {len(examples)} completions")
        bad = [v for v in values if v is not None and not isinstance(v, int | float)]
        if bad:
            raise DataError(f"task {self.name!r}: reward {self.reward_name!r} returned "
                            f"{bad[0]!r}, not a number or None")
        return [None if v is None else float(v) for v in values]

    def answer_scores(self, examples: Sequence[Example], answers: Sequence[str]) -> list[float]:
        """WinRate's auto judge: the reward of each answer, 0 where it does not apply (so
        two such answers tie)."""
        return [0.0 if v is None else v for v in self.reward(examples, answers)]

    def metrics(self, examples: Sequence[Example], predictions: Sequence[str]) -> dict[str, Any]:
        """reward_mean over the scored predictions, scored_share, n."""
        values = self.reward(examples, predictions)
        scored = [v for v in values if v is not None]
        return {"n": len(values),
                "reward_mean": sum(scored) / len(scored) if scored else 0.0,
                "scored_share": len(scored) / len(values) if values else 0.0}
