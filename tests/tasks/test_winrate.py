"""WinRate: the arithmetic (a scripted judge double), the auto judge per task, the LLM judge's
mechanics on a tiny model built here (its verdicts are arbitrary)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from hargo_hpc.tasks.base import DataError, Example, Task
from hargo_hpc.tasks.data_race import DataRaceC
from hargo_hpc.tasks.qa import MlperfQA, PlpQA
from hargo_hpc.tasks.winrate import (
    AutoJudge,
    LLMJudge,
    Pair,
    Verdict,
    WinRate,
    combine,
    make_judge,
    win_rate,
)

CORPUS = [
    "Given the code snippet, is there a data race? Answer yes or no.",
    "What is the number of processors? 896. The better answer is A or B.",
    "The BigCloneBench dataset is designed for evaluating clone detection in Java.",
    "### Question: ### Reference answer: ### Answer A: ### Answer B: Reply with one letter.",
] * 4


def build_tiny_lm(directory: Path, chat_template: str | None = None, positions: int = 256) -> Path:
    """A byte-level BPE tokenizer and a 2-layer Llama with random weights, saved to `directory`
    (docs: ml-stack.md's recipe)."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(CORPUS, trainers.BpeTrainer(
        vocab_size=400, special_tokens=["<pad>", "<eos>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, pad_token="<pad>", eos_token="<eos>")
    if chat_template:
        tokenizer.chat_template = chat_template
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                         max_position_embeddings=positions, pad_token_id=0, eos_token_id=1)
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def tiny_lm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_lm(tmp_path_factory.mktemp("tiny-lm"))


class JudgeDouble:
    """Returns scripted verdicts, one list per call, and records the pairs it was shown."""

    def __init__(self, *scripts: list[Verdict], symmetric: bool = False) -> None:
        self.scripts = list(scripts)
        self.symmetric = symmetric
        self.calls: list[list[Pair]] = []

    def judge(self, pairs: Sequence[Pair]) -> list[Verdict]:
        self.calls.append(list(pairs))
        return self.scripts[len(self.calls) - 1]


def _examples(task: Task, outputs: list[str]) -> list[Example]:
    return [task.from_record({"instruction": f"q{i}", "input": "", "output": o}, i)
            for i, o in enumerate(outputs)]


def test_both_orders_inconsistent_pairs_and_ties() -> None:
    examples = _examples(MlperfQA(), ["r"] * 6)
    a = [f"a{i}" for i in range(6)]
    b = [f"b{i}" for i in range(6)]
    judge = JudgeDouble(["A", "B", "A", "tie", "A", "B"],   # a first
                        ["B", "A", "A", "B", "tie", "B"])   # b first
    result = win_rate(examples, a, b, judge)
    # win (A then B), loss (B then A), tie (A, A: position bias), tie, tie, tie (B, B)
    assert result.outcomes == ("win", "loss", "tie", "tie", "tie", "tie")
    assert (result.wins, result.losses, result.ties, result.n) == (1, 1, 4, 6)
    assert result.rate == pytest.approx((1 + 4 / 2) / 6)  # 0.5
    first, second = judge.calls
    assert [(p.first, p.second) for p in first] == list(zip(a, b, strict=True))
    assert [(p.first, p.second) for p in second] == list(zip(b, a, strict=True))  # swapped
    assert [p.example for p in second] == examples


def test_win_rate_arithmetic_with_order_swaps() -> None:
    examples = _examples(MlperfQA(), ["r"] * 4)
    judge = JudgeDouble(["A", "A", "A", "B"], ["B", "B", "A", "A"])
    result = win_rate(examples, ["x"] * 4, ["y"] * 4, judge)
    assert result.outcomes == ("win", "win", "tie", "loss")
    assert result.rate == pytest.approx((2 + 1 / 2) / 4)  # 0.625
    assert result.as_dict() == {"n": 4, "wins": 2, "losses": 1, "ties": 1, "win_rate": 0.625}


def test_a_symmetric_judge_is_asked_once_and_mirrored() -> None:
    examples = _examples(MlperfQA(), ["r"] * 3)
    judge = JudgeDouble(["A", "B", "tie"], symmetric=True)
    result = win_rate(examples, ["x"] * 3, ["y"] * 3, judge)
    assert len(judge.calls) == 1
    assert result.outcomes == ("win", "loss", "tie")
    assert result.rate == pytest.approx(1.5 / 3)


def test_combine_and_no_pairs() -> None:
    assert [combine(f, b) for f, b in [("A", "B"), ("B", "A"), ("A", "tie"), ("tie", "tie")]] == [
        "win", "loss", "tie", "tie"]
    assert WinRate(()).rate == 0.0
    with pytest.raises(ValueError, match="2 examples, 1 answers A"):
        win_rate(_examples(MlperfQA(), ["r", "s"]), ["x"], ["y", "z"], JudgeDouble())


def test_auto_judge_on_data_race_correct_beats_wrong_and_unparsable() -> None:
    examples = _examples(DataRaceC(), ["yes"] * 4)
    a = ["yes", "no", "maybe", "Yes\n### Instruction: no"]
    b = ["no", "No.", "yes", "yes"]
    # scores: A 1, 0, 0, 1; B 0, 0 (unparsable ties wrong), 1, 1
    result = win_rate(examples, a, b, AutoJudge(DataRaceC()))
    assert result.outcomes == ("win", "tie", "loss", "tie")
    assert result.rate == pytest.approx((1 + 2 / 2) / 4)


def test_auto_judge_on_mlperf_uses_token_f1_and_the_margin() -> None:
    examples = _examples(MlperfQA(), ["NVIDIA NeMo Megatron Release 23.04", "896"])
    a = ["NVIDIA NeMo Megatron", "896"]            # F1 .75, 1
    b = ["NVIDIA NeMo Megatron Release", "896."]  # F1 2*.8/1.8 = .889, 1
    assert win_rate(examples, a, b, AutoJudge(MlperfQA())).outcomes == ("loss", "tie")
    # a margin of 0.2 > .889 - .75 makes the first pair a tie too
    assert win_rate(examples, a, b, AutoJudge(MlperfQA(), 0.2)).outcomes == ("tie", "tie")


def test_auto_judge_on_plp_uses_the_similarity() -> None:
    examples = _examples(PlpQA(), ["The BigCloneBench dataset is designed for evaluating clone "
                                   "detection techniques in Java."])
    a = ["BigCloneBench is a benchmark for detecting cloned Java code."]
    b = ["The weather in Paris was sunny."]
    assert win_rate(examples, a, b, make_judge("auto", PlpQA())).outcomes == ("win",)


def test_make_judge_refuses_bad_specs(tmp_path: Path) -> None:
    assert isinstance(make_judge("auto", MlperfQA(), 0.1), AutoJudge)
    for spec in ("llm:", "gpt", ""):
        with pytest.raises(ValueError, match="unknown judge"):
            make_judge(spec, MlperfQA())
    with pytest.raises(DataError, match="is not a directory"):
        make_judge(f"llm:{tmp_path / 'missing'}", MlperfQA())
    with pytest.raises(ValueError, match="margin must be >= 0"):
        AutoJudge(MlperfQA(), -0.1)

    class NoScore(Task):
        name = "noscore"

        def from_record(self, record: Any, index: int) -> None:
            return None

        def extract(self, completion: str) -> str:
            return completion

        def metrics(self, examples: Any, predictions: Any) -> dict[str, Any]:
            return {}

    with pytest.raises(ValueError, match="no per-answer score for task 'noscore'"):
        AutoJudge(NoScore())


def test_llm_judge_asks_both_orders_and_is_deterministic(tiny_lm: Path) -> None:
    examples = _examples(MlperfQA(), ["896", "NVIDIA NeMo", "8"])
    a, b = ["896", "a system", "eight"], ["nine", "NVIDIA NeMo Megatron", "8"]
    judge = LLMJudge(tiny_lm, device="cpu")
    seen: list[str] = []
    original = judge.letter_logprobs

    def spy(prompt: str, letters: tuple[str, str]) -> tuple[float, float]:
        seen.append(prompt)
        assert letters == (" A", " B")  # no chat template: a space, then the letter
        return original(prompt, letters)

    judge.letter_logprobs = spy  # type: ignore[method-assign]
    first = win_rate(examples, a, b, judge)
    assert len(seen) == 6  # 3 pairs x 2 orders
    for i in range(3):
        assert f"### Answer A:\n{a[i]}\n\n### Answer B:\n{b[i]}\n\n" in seen[i]
        assert f"### Answer A:\n{b[i]}\n\n### Answer B:\n{a[i]}\n\n" in seen[3 + i]
        assert f"### Reference answer:\n{examples[i].output}\n\n" in seen[i]
    assert seen[0].endswith("Reply with one letter, A or B.\n\nThe better answer is")
    assert 0.0 <= first.rate <= 1.0 and first.n == 3
    again = win_rate(examples, a, b, judge)
    assert again.outcomes == first.outcomes
    assert original(seen[0], (" A", " B")) == original(seen[0], (" A", " B"))


def test_llm_judge_position_bias_is_a_tie(tiny_lm: Path) -> None:
    judge = LLMJudge(tiny_lm, device="cpu")
    judge.letter_logprobs = lambda prompt, letters: (0.0, -1.0)  # type: ignore[method-assign]
    result = win_rate(_examples(MlperfQA(), ["r", "s"]), ["x", "y"], ["z", "w"], judge)
    assert result.outcomes == ("tie", "tie")  # always "A": the two orders disagree
    assert result.rate == 0.5


def test_llm_judge_with_a_chat_template_and_a_long_question(tmp_path: Path) -> None:
    template = ("{% for m in messages %}<|user|>{{ m['content'] }}{% endfor %}"
                "{% if add_generation_prompt %}<|assistant|>{% endif %}")
    judge = LLMJudge(build_tiny_lm(tmp_path, template, positions=128), device="cpu")
    example = DataRaceC().from_record(
        {"instruction": "Given the code snippet: " + "a[i] = a[i+1];\n" * 300, "output": "yes"}, 0)
    text, letters = judge.prompt(Pair(example, "yes", "no"))
    assert text.startswith("<|user|>You are judging") and text.endswith("<|assistant|>")
    assert letters == ("A", "B")
    _, model = judge._load()
    lengths: list[int] = []
    model.register_forward_pre_hook(
        lambda module, args, kwargs: lengths.append(kwargs["input_ids"].shape[1]),
        with_kwargs=True)
    lp_a, lp_b = judge.letter_logprobs(text, letters)
    assert lp_a < 0 and lp_b < 0
    assert lengths == [128, 128]  # the prompt cut from the left to the model's 128 positions
    assert win_rate([example], ["yes"], ["no"], judge).n == 1
