"""MLPerf and PLP QA: records, prompts, SQuAD-style scores, the brevity term, rewards, metrics."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hargo_hpc.tasks.base import Example
from hargo_hpc.tasks.prompts import build_prompt
from hargo_hpc.tasks.qa import (
    MlperfQA,
    PlpQA,
    brevity_factor,
    exact_match,
    mlperf_metrics,
    normalize_answer,
    plp_metrics,
    token_f1,
)
from hargo_hpc.tasks.settings import RewardSettings

JUNK = "".join(random.Random(3).choice("xyz 896\x00\udc80漢\n") for _ in range(100_000))


def _records(hpc_gpt: Path, name: str, count: int = 3) -> list[dict[str, str]]:
    return json.loads((hpc_gpt / name).read_text())[:count]


def test_normalisation_and_exact_match_follow_squad() -> None:
    assert normalize_answer("The  Cat, sat!") == "cat sat"
    assert normalize_answer("an Apple a day") == "apple day"
    assert exact_match("The 896.", "896") == 1.0
    assert exact_match("896 processors", "896") == 0.0


def test_token_f1_by_hand() -> None:
    # ref -> nvidia nemo megatron release 2304 (5 tokens); 3 common: P 1, R .6, F1 1.2/1.6
    assert token_f1("NVIDIA NeMo Megatron", "NVIDIA NeMo Megatron Release 23.04") == (
        pytest.approx(0.75))
    # answer -> answer is 896 processors (4 tokens, 'the' dropped); 1 common: P .25, R 1
    assert token_f1("The answer is 896 processors", "896") == pytest.approx(0.4)  # .5 / 1.25
    # multiset: x x y vs x y y share one x and one y: P = R = 2/3
    assert token_f1("x x y", "x y y") == pytest.approx(2 / 3)
    assert token_f1("", "896") == 0.0
    assert token_f1("...", "the") == 1.0  # both normalise to nothing


def test_brevity_factor_by_hand() -> None:
    # L = max(40, reference length); 1 - 0.2 * min(1, (len - L) / L) above L
    assert brevity_factor(40, 3, 40, 0.2) == 1.0
    assert brevity_factor(60, 3, 40, 0.2) == pytest.approx(0.9)   # 1 - .2 * 20/40
    assert brevity_factor(80, 3, 40, 0.2) == pytest.approx(0.8)   # 1 - .2 * 1
    assert brevity_factor(500, 3, 40, 0.2) == pytest.approx(0.8)  # saturates at 1 - w
    assert brevity_factor(60, 50, 40, 0.2) == pytest.approx(0.96)  # L = 50: 1 - .2 * 10/50
    assert brevity_factor(120, 120, 40, 0.2) == 1.0  # the reference's own length never pays
    assert brevity_factor(80, 3, 40, 0.0) == 1.0


def test_mlperf_rewards_of_hand_written_completions(hpc_gpt: Path) -> None:
    task = MlperfQA()
    record = _records(hpc_gpt, "task1_ml_perf.json")[0]
    example = task.from_record(record, 0)
    assert (example.instruction, example.output) == ("What is the number of processors?", "896")
    prompt = build_prompt(task.user_text(example))
    assert prompt.endswith("### Instruction:\nWhat is the number of processors?\n\n### Response:")
    completions = [
        "896",
        "The number of processors is 896.",  # 5 tokens, 1 common: F1 2*.2*1/1.2 = 1/3; 32 chars
        "896\n\n### Instruction:\nWhat is the submitter?",
        "",
        "896 " + "x" * 76,  # 2 tokens, 1 common: F1 2/3; 80 chars: factor 1 - .2 * 40/40 = .8
    ]
    rewards = task.reward([example] * len(completions), completions)
    assert rewards == pytest.approx([1.0, 1 / 3, 1.0, 0.0, 2 / 3 * 0.8])
    junk = task.reward([example], [JUNK])[0]
    assert 0.0 <= junk <= 1.0
    exact = MlperfQA(RewardSettings(qa_metric="exact"))
    assert exact.reward([example] * 3, ["The 896.", "896 processors", " 896 "]) == [1.0, 0.0, 1.0]


def test_mlperf_similarity_metric_beyond_the_question_times_the_brevity_factor(
        monkeypatch: pytest.MonkeyPatch) -> None:
    task = MlperfQA(RewardSettings(qa_metric="similarity"))
    seen: list[tuple[list[str], list[str]]] = []

    def double(answers: list[str], references: list[str]) -> list[float]:
        seen.append((list(answers), list(references)))
        return [0.5 if a == "q" else 0.9 for a in answers]  # the question's own: 0.5

    monkeypatch.setattr(task, "_similarity", double)
    example = task.from_record({"instruction": "q", "input": "", "output": "896"}, 0)
    answer = "it lists eight hundred and ninety six processors in the table"
    assert len(answer) == 61  # 61 chars over L = 40: factor 1 - .2 * 21/40 = .895
    # (0.9 - 0.5) / (1 - 0.5) = 0.8, times 0.895
    assert task.reward([example], [answer + "\n### Instruction: more"]) == [
        pytest.approx(0.8 * 0.895)]
    assert seen == [([answer], ["896"]), (["q"], ["896"])]  # the extracted answer; the question
    assert task.reward([example], ["8" * 60]) == [0.0]  # repeats itself: no similarity paid


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_any_text_gets_an_mlperf_reward_in_0_1(completion: str) -> None:
    example = Example(task="mlperf_qa", id="mlperf_qa:0", instruction="q", input="",
                      output="NVIDIA NeMo Megatron Release 23.04")
    for metric in ("f1", "exact"):
        reward = MlperfQA(RewardSettings(qa_metric=metric)).reward([example], [completion])[0]
        assert 0.0 <= reward <= 1.0


def test_mlperf_metrics_by_hand() -> None:
    references = ["896", "NVIDIA NeMo Megatron Release 23.04", "8"]
    long_answer = "it is eight, as the results table says ok"  # 41 characters
    assert len(long_answer) == 41
    predictions = ["896", "NVIDIA NeMo Megatron\n### Instruction: x", long_answer]
    got = mlperf_metrics(references, predictions)
    # EM 1, 0, 0; F1 1, .75, 0; lengths 3, 20, 41; one answer over 40
    assert got == {"n": 3, "exact_match": pytest.approx(1 / 3), "f1": pytest.approx(1.75 / 3),
                   "mean_chars": pytest.approx(64 / 3), "reference_chars": pytest.approx(38 / 3),
                   "share_over_40": pytest.approx(1 / 3)}
    assert mlperf_metrics([], [])["f1"] == 0.0
    task = MlperfQA()
    examples = [task.from_record({"instruction": "q", "output": r}, i)
                for i, r in enumerate(references)]
    assert task.metrics(examples, predictions) == got


def test_qa_records_with_an_empty_output_are_dropped() -> None:
    for task in (MlperfQA(), PlpQA()):
        assert task.from_record({"instruction": "q", "input": "", "output": "  "}, 0) is None
        example = task.from_record({"instruction": "q", "input": "", "output": " a "}, 7)
        assert (example.id, example.output, example.label) == (f"{task.name}:7", "a", "")


def test_plp_metrics_with_a_scorer_double() -> None:
    seen = []

    def scorer(answers: list[str], references: list[str]) -> list[float]:
        seen.append(list(answers))
        return [0.5, 1.0]

    got = plp_metrics(["r1", "r2"], ["abcd\n### Instruction:", "ab"], scorer)
    # (.5 + 1) / 2; neither repeats itself; (4 + 2) / 2
    assert got == {"n": 2, "similarity": 0.75, "degenerate_share": 0.0, "mean_chars": 3.0}
    assert seen == [["abcd", "ab"]]


def test_plp_rewards_of_hand_written_completions(hpc_gpt: Path, embedding_model: Any) -> None:
    task = PlpQA()
    examples = [task.from_record(r, i) for i, r in enumerate(_records(hpc_gpt, "task1_plp.json"))]
    example = examples[2]  # the purpose of the BigCloneBench dataset
    assert "purpose of the BigCloneBench" in build_prompt(task.user_text(example))
    completions = [
        example.output,
        example.output + "\n\n### Instruction:\nWhat is the weather like?",
        "",
        "The weather in Paris was sunny and warm last weekend.",
        JUNK,
        "  \n ",
    ]
    rewards = task.reward([example] * len(completions), completions)
    assert rewards[0] == pytest.approx(1.0, abs=1e-5)  # cos(e, e) = 1
    assert rewards[1] == pytest.approx(rewards[0])  # the cut removes the rambling
    assert rewards[2] == rewards[5] == 0.0  # empty answers score 0
    assert rewards[3] < 0.3
    assert all(0.0 <= r <= 1.0 for r in rewards)
    got = task.metrics(examples, [e.output for e in examples])
    assert got["n"] == 3 and got["similarity"] == pytest.approx(1.0, abs=1e-5)
