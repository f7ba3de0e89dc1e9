"""Train/eval splits stratified per task and label, and the task mixture of training prompts.

Both are deterministic functions of their seed: every random choice comes from a
`random.Random` seeded with a string built from the seed and what is drawn (Python seeds a
`Random` from a string through SHA-512, the same on every platform and run, whatever
PYTHONHASHSEED). See docs/data.md.
"""

from __future__ import annotations

import math
import random
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from hargo_hpc.tasks.base import Example


def eval_count(n: int, eval_fraction: float) -> int:
    """How many of a stratum's `n` examples go to eval:
    `min(floor(eval_fraction * n + 0.5), n - 1)` for n >= 1, i.e. rounded half up (not
    Python's half-to-even `round`), and never a stratum's last example, so a stratum of one
    stays in train and every stratum is trained on."""
    if n <= 1:
        return 0
    return min(math.floor(eval_fraction * n + 0.5), n - 1)


def split_examples(
    examples: Sequence[Example], eval_fraction: float | Mapping[str, float], seed: int
) -> tuple[list[Example], list[Example]]:
    """`(train, eval)`: each (task, label) stratum gives `eval_count(n, f)` of its examples to
    eval, f being `eval_fraction` (one share for every task, or a share per task name), chosen
    by shuffling the stratum sorted by id with `Random(f"{seed}:split:{task}:{label}")`. Which
    examples go where depends only on the seed and the set of examples (not their order); both
    lists keep the input order."""
    shares = eval_fraction if isinstance(eval_fraction, Mapping) else None
    for share in (shares.values() if shares is not None else [eval_fraction]):
        if not 0 <= share < 1:  # type: ignore[operator]
            raise ValueError(f"eval_fraction must be in [0, 1), got {share}")
    ids = [example.id for example in examples]
    if len(set(ids)) != len(ids):
        duplicate = next(i for i in ids if ids.count(i) > 1)
        raise ValueError(f"example id {duplicate!r} appears more than once")
    strata: dict[tuple[str, str], list[str]] = defaultdict(list)
    for example in examples:
        strata[(example.task, example.label)].append(example.id)
    held_out: set[str] = set()
    for (task, label), members in strata.items():
        members.sort()
        random.Random(f"{seed}:split:{task}:{label}").shuffle(members)
        share = shares[task] if shares is not None else eval_fraction
        held_out.update(members[:eval_count(len(members), share)])  # type: ignore[arg-type]
    train = [example for example in examples if example.id not in held_out]
    evaluation = [example for example in examples if example.id in held_out]
    return train, evaluation


def mixture_proportions(
    sizes: Mapping[str, int], weights: Mapping[str, float | None] | None = None
) -> dict[str, float]:
    """Each task's share of the drawn prompts.

    `p_t = w_t / sum_u w_u`, where `w_t` is the task's weight, or, when it is None or missing,
    its share of all examples `n_t / sum_u n_u` (so with no weights at all `p_t` is
    proportional to the task's size). Weight 0: never drawn. ValueError for a negative
    weight, a weight of an unknown task, a positive weight of a task without examples, or when
    every weight is 0.
    """
    weights = dict(weights or {})
    unknown = sorted(set(weights) - set(sizes))
    if unknown:
        raise ValueError(f"weight of unknown task(s) {', '.join(unknown)}")
    total = sum(sizes.values())
    raw: dict[str, float] = {}
    for name, size in sizes.items():
        weight = weights.get(name)
        if weight is None:
            weight = size / total if total else 0.0
        elif weight < 0:
            raise ValueError(f"task {name}: weight must be >= 0, got {weight}")
        elif weight > 0 and size == 0:
            raise ValueError(f"task {name} has weight {weight} but no examples")
        raw[name] = float(weight)
    weight_sum = sum(raw.values())
    if weight_sum <= 0:
        raise ValueError("every task has weight 0 (or no examples): nothing to sample")
    return {name: weight / weight_sum for name, weight in raw.items()}


class MixtureSampler:
    """Draws training prompts from several tasks in fixed proportions, deterministically.

    Draw k (counted from 0 over the sampler's life) picks task t with probability `p_t`
    (`mixture_proportions`) from `Random(f"{seed}:draw:{k}").random()` against the
    cumulative proportions in task-name order, then the next example of t's current epoch:
    each epoch is t's examples (their list order) shuffled by
    `Random(f"{seed}:epoch:{t}:{epoch}")`, so every example of t is drawn once before any is
    drawn again, in a new order each epoch. The state (`state_dict`) is the draw count and
    each task's epoch and position: a resumed run continues the same sequence.
    """

    def __init__(
        self, examples_by_task: Mapping[str, Sequence[Example]],
        weights: Mapping[str, float | None] | None = None, seed: int = 0,
    ) -> None:
        self.examples = {name: list(examples_by_task[name]) for name in sorted(examples_by_task)}
        self.seed = seed
        self.proportions = mixture_proportions(
            {name: len(items) for name, items in self.examples.items()}, weights
        )
        self._draws = 0
        self._epoch = dict.fromkeys(self.examples, 0)
        self._position = dict.fromkeys(self.examples, 0)
        self._order: dict[str, list[int]] = {}
        cumulative, self._bounds = 0.0, []
        for name, share in self.proportions.items():
            if share > 0:
                cumulative += share
                self._bounds.append((cumulative, name))

    def batch(self, n: int) -> list[Example]:
        """The next `n` prompts of the sequence."""
        if n < 0:
            raise ValueError(f"batch size must be >= 0, got {n}")
        return [self._draw() for _ in range(n)]

    def _draw(self) -> Example:
        u = random.Random(f"{self.seed}:draw:{self._draws}").random()
        self._draws += 1
        name = next((t for bound, t in self._bounds if u < bound), self._bounds[-1][1])
        if self._position[name] == len(self.examples[name]):
            self._epoch[name] += 1
            self._position[name] = 0
            self._order.pop(name, None)
        example = self.examples[name][self._epoch_order(name)[self._position[name]]]
        self._position[name] += 1
        return example

    def _epoch_order(self, name: str) -> list[int]:
        order = self._order.get(name)
        if order is None:
            order = list(range(len(self.examples[name])))
            random.Random(f"{self.seed}:epoch:{name}:{self._epoch[name]}").shuffle(order)
            self._order[name] = order
        return order

    def state_dict(self) -> dict[str, Any]:
        """Where the sequence stands (JSON-serialisable), with the seed and task sizes it
        belongs to."""
        return {
            "seed": self.seed,
            "draws": self._draws,
            "sizes": {name: len(items) for name, items in self.examples.items()},
            "epoch": dict(self._epoch),
            "position": dict(self._position),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from `state`; ValueError when it belongs to another seed or other data."""
        sizes = {name: len(items) for name, items in self.examples.items()}
        if state.get("seed") != self.seed or state.get("sizes") != sizes:
            raise ValueError(
                f"sampler state of seed {state.get('seed')} and task sizes {state.get('sizes')} "
                f"does not match this sampler (seed {self.seed}, sizes {sizes})"
            )
        self._draws = int(state["draws"])
        self._epoch = {name: int(state["epoch"][name]) for name in self.examples}
        self._position = {name: int(state["position"][name]) for name in self.examples}
        self._order = {}
