"""Rewards that pay for answers: completions an RL policy could learn to raise a text reward
without answering (tests/tasks/data/gaming.json, kept as the bench keeps attack kernels) earn
at most the honest wrong answer's reward, and the reference's own words shuffled keep at most
three quarters of the reference's. Each task's reward is the real one (PLP's with the packaged
embedding model)."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from hargo_hpc.tasks.base import Example, Task
from hargo_hpc.tasks.data import load_examples
from hargo_hpc.tasks.data_race import DataRaceC
from hargo_hpc.tasks.qa import MlperfQA, PlpQA
from hargo_hpc.tasks.settings import RewardSettings

GAMING = json.loads((Path(__file__).parent / "data" / "gaming.json").read_text())
SHUFFLED_KEEPS_AT_MOST = 0.75


def _sample(task: Task, index: int) -> Example:
    """Example `index` of the task's shipped sample."""
    return load_examples(task)[index]


def _fill(text: str, question: str, wrong: str) -> str:
    return text.replace("{question}", question).replace("{wrong}", wrong)


def _attacks(case: dict[str, Any]) -> dict[str, str]:
    return {**GAMING["common_attacks"], **case["attacks"]}


def _shuffled(text: str) -> str:
    """The words of `text` in a seeded random order other than their own."""
    words, rng = text.split(), random.Random(0)
    shuffled = list(words)
    while shuffled == words and len(set(words)) > 1:
        rng.shuffle(shuffled)
    return " ".join(shuffled)


@pytest.mark.parametrize("mode", ["strict", "lenient"])
def test_data_race_attacks_earn_no_more_than_the_wrong_label(mode: str) -> None:
    task = DataRaceC(RewardSettings(data_race_parse=mode))
    for index in GAMING["data_race_c"]["examples"]:
        example = _sample(task, index)
        wrong = "no" if example.label == "yes" else "yes"
        honest = task.reward([example], [wrong])[0]
        for name, text in _attacks(GAMING["data_race_c"]).items():
            attack = _fill(text, task.user_text(example), wrong)
            got = task.reward([example], [attack])[0]
            assert got <= honest, f"{mode} {example.id} {name}: {got} > wrong label {honest}"


def _qa_cases(task: Task, name: str) -> list[tuple[Example, str, dict[str, str]]]:
    cases = []
    for case in GAMING[name]:
        example = _sample(task, case["example"])
        wrong = case["wrong"]
        attacks = {k: _fill(v, task.user_text(example), wrong) for k, v in _attacks(case).items()}
        cases.append((example, wrong, attacks))
    return cases


def _check_qa(task: Task, name: str) -> None:
    for example, wrong, attacks in _qa_cases(task, name):
        honest, right = task.reward([example] * 2, [wrong, example.output])
        names = list(attacks)
        got = task.reward([example] * len(names), [attacks[n] for n in names])
        over = {n: round(g, 3) for n, g in zip(names, got, strict=True) if g > honest + 1e-9}
        assert not over, f"{example.id}: above the honest wrong answer's {honest:.3f}: {over}"
        if len(example.output.split()) > 1:
            shuffled = task.reward([example], [_shuffled(example.output)])[0]
            assert shuffled <= SHUFFLED_KEEPS_AT_MOST * right, (
                f"{example.id}: the reference shuffled keeps {shuffled:.3f} of {right:.3f}")


def test_mlperf_attacks_earn_no_more_than_an_honest_wrong_answer() -> None:
    _check_qa(MlperfQA(), "mlperf_qa")


def test_plp_attacks_earn_no_more_than_an_honest_wrong_answer(embedding_model: Any) -> None:
    _check_qa(PlpQA(), "plp_qa")


def test_the_ablation_without_the_question_baseline_pays_an_echo(embedding_model: Any) -> None:
    """`rewards.similarity_baseline = "none"` (the plain cosine) is what the default guards
    against: the question echoed outscores the honest wrong answer there, and earns 0 here."""
    plain, default = PlpQA(RewardSettings(similarity_baseline="none")), PlpQA()
    example, wrong, attacks = _qa_cases(default, "plp_qa")[1]  # false sharing
    echo, honest = plain.reward([example] * 2, [attacks["echo"], wrong])
    assert echo > honest > 0
    assert default.reward([example], [attacks["echo"]]) == [0.0]
