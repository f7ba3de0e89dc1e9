"""The checks before a run's first step (`train.setup`) that need no model."""

from __future__ import annotations

import pytest

from hargo_hpc.tasks.base import Example
from hargo_hpc.train.run import Data, TrainError
from hargo_hpc.train.setup import check_references


def example(task: str, index: int, output: str) -> Example:
    return Example(task, f"{task}:{index}", "question", "", output)


def test_every_prompt_with_an_answer_or_a_corpus_passes() -> None:
    check_references(Data({}, {"plp_qa": [example("plp_qa", 0, "an answer")],
                               "gemm": [example("gemm", 0, "")]}))  # GEMM: its corpus


def test_one_prompt_without_an_answer_is_refused_before_training() -> None:
    train = {"plp_qa": [example("plp_qa", 0, "an answer"), example("plp_qa", 1, ""),
                        example("plp_qa", 2, "")]}
    with pytest.raises(TrainError) as err:
        check_references(Data({}, train))
    assert str(err.value) == ("algorithm sft trains on reference answers; task plp_qa has no "
                              "SFT corpus and 2 of its 3 training examples have no answer "
                              "(first: plp_qa:1)")


def test_fp32_on_a_gpu_is_refused_unless_meant() -> None:
    from hargo_hpc.train.setup import fp32_on_a_gpu

    said = fp32_on_a_gpu("fp32", 8, allowed=False)
    assert said is not None and "\n" not in said and 'training.precision = "bf16"' in said
    assert fp32_on_a_gpu("fp32", 8, allowed=True) is None
    assert fp32_on_a_gpu("fp32", 0, allowed=False) is None  # the CPU: fp32 is the default
    assert fp32_on_a_gpu("bf16", 8, allowed=False) is None
