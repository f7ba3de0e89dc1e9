"""Stratified train/eval splits and the mixture sampler: counts, determinism, proportions,
epochs, resume."""

from __future__ import annotations

import json
import math
from collections import Counter

import pytest

from hargo_hpc.tasks.base import Example
from hargo_hpc.tasks.split import MixtureSampler, eval_count, mixture_proportions, split_examples


def make(task: str, n: int, label: str = "", start: int = 0) -> list[Example]:
    return [Example(task, f"{task}:{i}", f"q{i}", "", "a", label=label)
            for i in range(start, start + n)]


def strata_of(examples: list[Example]) -> Counter[tuple[str, str]]:
    return Counter((e.task, e.label) for e in examples)


def test_eval_count_rounds_half_up_and_keeps_one_in_train() -> None:
    assert eval_count(5, 0.1) == 1   # 0.5 rounds up (Python's round(0.5) would give 0)
    assert eval_count(25, 0.1) == 3  # 2.5 -> 3 (round would give 2)
    assert eval_count(10, 0.14) == 1  # 1.4 -> 1
    assert eval_count(1, 0.9) == 0   # a stratum of one stays in train
    assert eval_count(2, 0.9) == 1   # 1.8 -> 2, capped at n - 1 = 1
    assert eval_count(0, 0.5) == 0


def test_split_counts_per_task_and_label() -> None:
    examples = (make("race", 5, "yes") + make("race", 25, "no", start=5) + make("qa", 1)
                + make("plp", 10))
    train, evaluation = split_examples(examples, 0.1, seed=0)
    # per stratum: 5 -> 1, 25 -> 3, 1 -> 0, 10 -> 1 (eval_count above)
    assert strata_of(evaluation) == {("race", "yes"): 1, ("race", "no"): 3, ("plp", ""): 1}
    assert strata_of(train) == {("race", "yes"): 4, ("race", "no"): 22, ("qa", ""): 1,
                                ("plp", ""): 9}
    # a partition of the input, each part in input order
    assert sorted(e.id for e in train + evaluation) == sorted(e.id for e in examples)
    position = {e.id: i for i, e in enumerate(examples)}
    for part in (train, evaluation):
        assert [position[e.id] for e in part] == sorted(position[e.id] for e in part)


def test_split_is_determined_by_seed_and_set() -> None:
    examples = make("race", 40, "yes") + make("race", 40, "no", start=40) + make("qa", 30)
    train, evaluation = split_examples(examples, 0.25, seed=7)
    again = split_examples(examples, 0.25, seed=7)
    assert again == (train, evaluation)
    _, reversed_eval = split_examples(examples[::-1], 0.25, seed=7)
    assert {e.id for e in reversed_eval} == {e.id for e in evaluation}
    _, other_eval = split_examples(examples, 0.25, seed=8)
    # 10 of 40 (twice) and 8 (7.5 rounded up) of 30: the same draw for all three strata under
    # another seed has probability 1/(C(40,10)^2 C(30,8)) ~ 1e-24
    assert len(other_eval) == len(evaluation) == 28
    assert {e.id for e in other_eval} != {e.id for e in evaluation}


def test_split_rejects_bad_input() -> None:
    assert split_examples(make("qa", 4), 0.0, seed=0) == (make("qa", 4), [])
    with pytest.raises(ValueError, match="eval_fraction must be in"):
        split_examples(make("qa", 4), 1.0, seed=0)
    with pytest.raises(ValueError, match="'qa:0' appears more than once"):
        split_examples(make("qa", 2) + make("qa", 1), 0.5, seed=0)


def test_proportions_from_weights_and_sizes() -> None:
    sizes = {"a": 30, "b": 10, "c": 5}
    # no weights: by size, 30/45, 10/45, 5/45
    got = mixture_proportions(sizes)
    assert got == pytest.approx({"a": 30 / 45, "b": 10 / 45, "c": 5 / 45})
    # explicit 3:1:0
    assert mixture_proportions(sizes, {"a": 3, "b": 1, "c": 0}) == {"a": 0.75, "b": 0.25,
                                                                     "c": 0.0}
    # c unset counts as its share of all examples, 5/45 = 1/9: total 1 + 1 + 1/9 = 19/9
    got = mixture_proportions(sizes, {"a": 1.0, "b": 1.0})
    assert got == pytest.approx({"a": 9 / 19, "b": 9 / 19, "c": 1 / 19})


@pytest.mark.parametrize(("sizes", "weights", "message"), [
    ({"a": 3, "b": 2}, {"a": 0, "b": 0}, "every task has weight 0"),
    ({"a": 3}, {"z": 1.0}, "weight of unknown task"),
    ({"a": 3}, {"a": -1.0}, "weight must be >= 0"),
    ({"a": 3, "b": 0}, {"b": 1.0}, "task b has weight 1.0 but no examples"),
    ({"a": 0}, None, "every task has weight 0"),
])
def test_proportions_refuse(sizes: dict[str, int], weights: dict[str, float] | None,
                            message: str) -> None:
    with pytest.raises(ValueError, match=message):
        mixture_proportions(sizes, weights)


def test_realised_proportions_3_to_1() -> None:
    sampler = MixtureSampler({"a": make("a", 50), "b": make("b", 7)}, {"a": 3, "b": 1}, seed=11)
    drawn = Counter(e.task for e in sampler.batch(4000))
    share = drawn["a"] / 4000
    # binomial: sigma = sqrt(0.75 * 0.25 / 4000) = 0.00685; +-0.03 is 4.4 sigma (a random seed
    # fails it with probability ~1e-5); the fixed seed makes the figure reproducible
    sigma = math.sqrt(0.75 * 0.25 / 4000)
    assert abs(share - 0.75) < 0.03, (share, sigma)
    print(f"realised share of a at 3:1 over 4000 draws: {share:.4f} (sigma {sigma:.4f})")


def test_weight_zero_is_never_drawn_and_none_is_by_size() -> None:
    sampler = MixtureSampler({"a": make("a", 20), "b": make("b", 20), "c": make("c", 60)},
                             {"b": 0.0}, seed=3)
    drawn = Counter(e.task for e in sampler.batch(2000))
    assert drawn["b"] == 0
    # a: 20/100, c: 60/100 of weight 0.8 -> 0.25 / 0.75; sigma(500 of 2000) = 19.4, bound 5 sigma
    assert abs(drawn["a"] - 500) < 97 and drawn["a"] + drawn["c"] == 2000


def test_each_epoch_draws_every_example_once_in_a_new_order() -> None:
    items = make("a", 6)
    drawn = [e.id for e in MixtureSampler({"a": items}, seed=5).batch(18)]
    epochs = [drawn[0:6], drawn[6:12], drawn[12:18]]
    for epoch in epochs:
        assert sorted(epoch) == sorted(e.id for e in items)
    # three shuffles of 6 all alike: probability 1/720^2 for an honest reshuffle
    assert len({tuple(epoch) for epoch in epochs}) > 1


def test_same_seed_same_sequence_other_seed_other() -> None:
    by_task = {"a": make("a", 9), "b": make("b", 4)}
    first = [e.id for e in MixtureSampler(by_task, seed=1).batch(40)]
    assert [e.id for e in MixtureSampler(by_task, seed=1).batch(40)] == first
    assert [e.id for e in MixtureSampler(by_task, seed=2).batch(40)] != first


def test_resume_continues_the_sequence() -> None:
    by_task = {"a": make("a", 9), "b": make("b", 4), "c": make("c", 3)}
    sampler = MixtureSampler(by_task, {"a": 2, "b": 1, "c": 1}, seed=42)
    for _ in range(5):  # 35 draws: epochs of b (4) and c (3) wrap several times
        sampler.batch(7)
    state = json.loads(json.dumps(sampler.state_dict()))  # as a checkpoint stores it
    expected = [[e.id for e in sampler.batch(7)] for _ in range(3)]
    resumed = MixtureSampler(by_task, {"a": 2, "b": 1, "c": 1}, seed=42)
    resumed.load_state_dict(state)
    assert [[e.id for e in resumed.batch(7)] for _ in range(3)] == expected
    # a fresh sampler (no state) starts over instead: not the continuation
    fresh = MixtureSampler(by_task, {"a": 2, "b": 1, "c": 1}, seed=42)
    assert [[e.id for e in fresh.batch(7)] for _ in range(3)] != expected


def test_state_of_other_data_is_refused() -> None:
    state = MixtureSampler({"a": make("a", 5)}, seed=0).state_dict()
    with pytest.raises(ValueError, match="does not match this sampler"):
        MixtureSampler({"a": make("a", 6)}, seed=0).load_state_dict(state)
    with pytest.raises(ValueError, match="does not match this sampler"):
        MixtureSampler({"a": make("a", 5)}, seed=1).load_state_dict(state)
    with pytest.raises(ValueError, match="batch size must be >= 0"):
        MixtureSampler({"a": make("a", 5)}, seed=0).batch(-1)
