"""Data race detection: records, prompts, answer parsing, rewards, HPC-GPT's metrics."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hargo_hpc.tasks.base import Example
from hargo_hpc.tasks.data_race import (
    METRIC_KEYS,
    DataRaceC,
    DataRaceFortran,
    data_race_metrics,
    parse_yes_no,
)
from hargo_hpc.tasks.prompts import build_prompt
from hargo_hpc.tasks.qa import MAX_ANSWER_CHARS, extract_answer
from hargo_hpc.tasks.settings import RewardSettings

UNPARSABLE = -0.5  # RewardSettings' default
JUNK = "".join(random.Random(7).choice("ab\x00\x07\udc80é漢 \n#;{}") for _ in range(100_000))


def _first(hpc_gpt: Path, label: str) -> tuple[Example, str]:
    """The first C/C++ record (of the first ten) whose output is `label`, and its prompt."""
    task = DataRaceC()
    records = json.loads((hpc_gpt / "task2_c_c++.json").read_text())[:10]
    for index, record in enumerate(records):
        example = task.from_record(record, index)
        if example is not None and example.label == label:
            return example, build_prompt(task.user_text(example))
    raise AssertionError(f"no {label!r} record among the first ten")


def test_from_record_keeps_yes_no_and_drops_the_rest() -> None:
    task = DataRaceC()
    example = task.from_record({"instruction": "code?", "input": "", "output": " Yes\n"}, 4)
    assert example == Example(task="data_race_c", id="data_race_c:4", instruction="code?",
                              input="", output="yes", label="yes")
    assert task.from_record({"instruction": "q", "input": "", "output": "NO"}, 0).label == "no"
    for index, output in enumerate(["no\n#pragma omp", "", "maybe"]):
        assert task.from_record({"instruction": "q", "input": "", "output": output}, index) is None


def test_fortran_is_the_same_task_in_another_language() -> None:
    task = DataRaceFortran()
    record = {"instruction": "Given a Fortran code snippet: ...", "input": "", "output": "no"}
    example = task.from_record(record, 3)
    assert (example.task, example.id, example.label) == ("data_race_fortran",
                                                         "data_race_fortran:3", "no")
    assert task.reward([example], ["No"]) == [1.0]
    assert (task.language, DataRaceC.language) == ("Fortran", "C/C++")


def test_the_shared_c_file_keeps_exactly_its_yes_no_records(hpc_gpt: Path) -> None:
    records = json.loads((hpc_gpt / "task2_c_c++.json").read_text())
    examples = [DataRaceC().from_record(r, i) for i, r in enumerate(records)]
    kept = [e for e in examples if e is not None]
    # papers.md: 1858 records = 984 no + 853 yes + 21 with code after the answer
    assert (len(kept), sum(e.label == "yes" for e in kept)) == (1837, 853)


def test_rewards_of_hand_written_completions_on_a_real_yes_record(hpc_gpt: Path) -> None:
    example, prompt = _first(hpc_gpt, "yes")
    assert prompt.startswith("Below is an instruction") and prompt.endswith("### Response:")
    assert "#pragma omp" in prompt and "Answer 'yes'" in prompt
    completions = ["yes", "No.", "Yes, there is a data race", "", " YES \n\n### Instruction:\nno",
                   "   \n\t", "There is no data race.", "\x00\udc80yes"]
    lenient = DataRaceC(RewardSettings(data_race_parse="lenient"))
    strict = DataRaceC(RewardSettings(data_race_parse="strict"))
    n = len(completions)
    assert lenient.reward([example] * n, completions) == [
        1.0, 0.0, 1.0, UNPARSABLE, 1.0, UNPARSABLE, 0.0, 1.0]
    # strict: only an answer that is exactly yes/no; 'No.' and a sentence are unparsable
    assert strict.reward([example] * n, completions) == [
        1.0, UNPARSABLE, UNPARSABLE, UNPARSABLE, 1.0, UNPARSABLE, UNPARSABLE, UNPARSABLE]
    junk = lenient.reward([example], [JUNK])[0]
    assert junk in (1.0, 0.0, UNPARSABLE)


def test_rewards_on_a_real_no_record_and_a_custom_unparsable_reward(hpc_gpt: Path) -> None:
    example, _ = _first(hpc_gpt, "no")
    task = DataRaceC(RewardSettings(data_race_parse="strict", unparsable_reward=-1.0))
    assert task.reward([example] * 4, ["no", "yes", "nope", "no\n### Response: yes"]) == [
        1.0, 0.0, -1.0, 1.0]


def test_lenient_parse_takes_the_first_standalone_word_and_refuses_a_hedge() -> None:
    assert parse_yes_no("No, yes.", "lenient") is None  # both words: a hedge
    assert parse_yes_no("yes/no", "lenient") is None
    assert parse_yes_no("No, NO.", "lenient") == "no"
    assert parse_yes_no("I know it is not racy; answer: YES", "lenient") == "yes"
    assert parse_yes_no("nope, notably", "lenient") is None
    assert parse_yes_no("'no'", "lenient") == "no"
    assert parse_yes_no("'no'", "strict") is None
    assert parse_yes_no(" No \n", "strict") == "no"


def test_extraction_cuts_at_a_new_section_and_caps_the_length() -> None:
    assert extract_answer("  yes\n\n### Instruction:\nGiven ...") == "yes"
    assert extract_answer("### Response:\nyes") == ""  # nothing before the marker
    assert extract_answer("C# and ####x stay") == "C# and ####x stay"  # not a section line
    assert extract_answer(b"yes\xff") == "yes\ufffd"
    long = extract_answer(JUNK)
    assert len(long) <= MAX_ANSWER_CHARS
    assert long.encode("utf-8")  # no lone surrogates left
    assert extract_answer(long) == long  # idempotent


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_any_text_gets_one_of_the_three_rewards(completion: str) -> None:
    example = DataRaceC().from_record({"instruction": "q", "input": "", "output": "yes"}, 0)
    for mode in ("strict", "lenient"):
        task = DataRaceC(RewardSettings(data_race_parse=mode))
        assert task.reward([example], [completion])[0] in (1.0, 0.0, UNPARSABLE)


def test_metrics_of_ten_predictions_with_two_unparsable() -> None:
    labels = ["yes", "yes", "yes", "yes", "no", "no", "no", "no", "yes", "no"]
    predictions = [
        "yes\n\n### Instruction:\nno",  # yes / yes   TP (cut at the section)
        "Yes",                          # yes / yes   TP
        " yes ",                        # yes / yes   TP
        "no",                           # yes / no    FN
        "no",                           # no  / no    TN
        "NO",                           # no  / no    TN
        "yes",                          # no  / yes   FP
        "  YES \n",                     # no  / yes   FP
        "maybe",                        # unparsable
        "No.",                          # unparsable (not exactly yes/no)
    ]
    got = data_race_metrics(labels, predictions)
    assert tuple(got) == METRIC_KEYS
    # TP 3, FP 2, TN 2, FN 1; parsed 8 of 10
    assert (got["tp"], got["fp"], got["tn"], got["fn"]) == (3, 2, 2, 1)
    assert got["precision"] == pytest.approx(3 / 5)       # 0.6
    assert got["recall"] == pytest.approx(3 / 4)          # 0.75
    assert got["accuracy"] == pytest.approx(5 / 8)        # (3 + 2) / 8 parsed
    assert got["specificity"] == pytest.approx(2 / 4)     # TN / (TN + FP)
    assert got["f1"] == pytest.approx(2 / 3)              # 2 * .6 * .75 / 1.35 = .9 / 1.35
    assert got["support_rate"] == pytest.approx(0.8)      # 8 / 10
    assert got["adjusted_f1"] == pytest.approx(0.8 * 2 / 3)  # 0.5333


def test_metrics_are_zero_where_a_formula_divides_by_zero() -> None:
    none_parsed = data_race_metrics(["yes", "no"], ["maybe", ""])
    assert none_parsed == {key: 0 for key in METRIC_KEYS}
    # only true negatives: TP+FP = 0 and TP+FN = 0, so precision, recall, F1 are 0
    negatives = data_race_metrics(["no", "no"], ["no", "no"])
    assert (negatives["precision"], negatives["recall"], negatives["f1"]) == (0.0, 0.0, 0.0)
    assert (negatives["accuracy"], negatives["specificity"], negatives["support_rate"]) == (
        1.0, 1.0, 1.0)
    assert data_race_metrics([], []) == {key: 0 for key in METRIC_KEYS}


def test_task_metrics_use_the_examples_labels() -> None:
    task = DataRaceC()
    examples = [task.from_record({"instruction": "q", "input": "", "output": o}, i)
                for i, o in enumerate(["yes", "no"])]
    got = task.metrics(examples, ["yes", "yes"])  # TP 1, FP 1
    assert (got["tp"], got["fp"], got["precision"], got["recall"]) == (1, 1, 0.5, 1.0)
    with pytest.raises(ValueError, match="2 labels but 1 predictions"):
        task.metrics(examples, ["yes"])


def test_skill_metrics_tell_telling_apart_from_a_bias() -> None:
    task = DataRaceC()
    examples = [task.from_record({"instruction": f"q{i}", "input": "", "output": o}, i)
                for i, o in enumerate(["yes", "no", "yes", "no"])]
    rows = [e for e in examples for _ in range(3)]  # three samples each
    answers = ["yes", "yes", "no", "no", "no", "no", "no", "no", "no", "yes", "no", "no"]
    got = task.metrics(rows, answers)
    # p(yes): 2/3, 0 (no), 0 (yes), 1/3 (no); pairs (pos, neg): win, win, tie, loss: 2.5 / 4
    assert got["yes_auc"] == pytest.approx(0.625)
    # rows: TP 2, FN 4, TN 5, FP 1: recall 1/3, specificity 5/6
    assert got["balanced_accuracy"] == pytest.approx((1 / 3 + 5 / 6) / 2)
    assert got["majority_share"] == 0.5
    always_no = task.metrics(rows, ["no"] * len(rows))
    assert (always_no["yes_auc"], always_no["balanced_accuracy"]) == (0.5, 0.5)
    assert always_no["accuracy"] == 0.5  # a constant answer is as good as the majority here
    only_yes = task.metrics(examples[:1], ["yes"])
    assert only_yes["yes_auc"] is None and only_yes["majority_share"] == 1.0
