"""WinRate of system A against system B on the same questions, with a pluggable judge.

HARGO reports WinRate without defining it; this module's definition (docs/tasks.md): each pair
of answers is judged in both orders (A shown first, then B shown first), a system wins a pair
only when both orders prefer it, anything else (a tie, or the two orders disagreeing: position
bias) is a tie, and WinRate = (wins + ties / 2) / n.

Judges: `AutoJudge` (reference-grounded: the answer the task's own score rates higher wins,
within a margin a tie; it sees no order, so it is asked once) and `LLMJudge` (a local causal LM
compares the next-token log-probabilities of "A" and "B"; torch and transformers are imported
on first use).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from hargo_hpc.tasks.base import DataError, Example, Task
from hargo_hpc.tasks.qa import extract_answer
from hargo_hpc.tasks.similarity import as_text

Verdict = Literal["A", "B", "tie"]
Outcome = Literal["win", "loss", "tie"]
DEFAULT_MARGIN = 0.02

JUDGE_PROMPT = (
    "You are judging two answers to the same question about high-performance computing. "
    "The reference answer is correct. Decide which of the two answers agrees better with the "
    "reference: same facts, same yes/no, no extra claims.\n\n"
    "### Question:\n{question}\n\n"
    "### Reference answer:\n{reference}\n\n"
    "### Answer A:\n{answer_a}\n\n"
    "### Answer B:\n{answer_b}\n\n"
    "Which answer is better? Reply with one letter, A or B."
)
PLAIN_SUFFIX = "\n\nThe better answer is"  # then " A" or " B" (a model without a chat template)
QUESTION_CHARS, TEXT_CHARS = 4000, 1000  # caps of the question and of each answer/reference


@dataclass(frozen=True)
class Pair:
    """One question and two answers, in the order a judge is shown them (first = A)."""

    example: Example
    first: str
    second: str


class Judge(Protocol):
    """Verdicts for pairs as shown; `symmetric` judges ignore the order and are asked once."""

    symmetric: bool

    def judge(self, pairs: Sequence[Pair]) -> list[Verdict]: ...


@dataclass(frozen=True)
class WinRate:
    """The outcomes of system A's answers against system B's, from A's side."""

    outcomes: tuple[Outcome, ...]
    wins: int = field(init=False)
    losses: int = field(init=False)
    ties: int = field(init=False)

    def __post_init__(self) -> None:
        for name, outcome in (("wins", "win"), ("losses", "loss"), ("ties", "tie")):
            object.__setattr__(self, name, self.outcomes.count(outcome))

    @property
    def n(self) -> int:
        return len(self.outcomes)

    @property
    def rate(self) -> float:
        """(wins + ties / 2) / n; 0 for no pairs."""
        return (self.wins + self.ties / 2) / self.n if self.n else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"n": self.n, "wins": self.wins, "losses": self.losses, "ties": self.ties,
                "win_rate": self.rate}


def combine(forward: Verdict, backward: Verdict) -> Outcome:
    """A's outcome from the verdict with A's answer shown first (`forward`) and with it shown
    second (`backward`): a win when both prefer A's answer (A, then B), a loss when both
    prefer B's (B, then A), else a tie (a tie in either order, or the orders disagree)."""
    if forward == "A" and backward == "B":
        return "win"
    if forward == "B" and backward == "A":
        return "loss"
    return "tie"


def win_rate(
    examples: Sequence[Example],
    answers_a: Sequence[object],
    answers_b: Sequence[object],
    judge: Judge,
) -> WinRate:
    """WinRate of answers A against answers B (raw predictions; each is extracted with
    `qa.extract_answer` first), every pair judged in both orders (once for a symmetric judge,
    whose second verdict is the first mirrored)."""
    if not len(examples) == len(answers_a) == len(answers_b):
        raise ValueError(f"{len(examples)} examples, {len(answers_a)} answers A, "
                         f"{len(answers_b)} answers B")
    a = [extract_answer(x) for x in answers_a]
    b = [extract_answer(x) for x in answers_b]
    forward = judge.judge([Pair(e, x, y) for e, x, y in zip(examples, a, b, strict=True)])
    if judge.symmetric:
        mirror: dict[Verdict, Verdict] = {"A": "B", "B": "A", "tie": "tie"}
        backward = [mirror[v] for v in forward]
    else:
        backward = judge.judge([Pair(e, y, x) for e, x, y in zip(examples, a, b, strict=True)])
    if len(forward) != len(examples) or len(backward) != len(examples):
        raise ValueError("the judge returned a different number of verdicts than pairs")
    return WinRate(tuple(map(combine, forward, backward)))


class AutoJudge:
    """Reference-grounded: the answer with the higher score against the reference under the
    task's own per-answer score (`task.answer_scores`: data race 1 correct / 0 wrong or
    unparsable, MLPerf token F1, PLP similarity) wins; |s_A - s_B| <= margin is a tie."""

    symmetric = True

    def __init__(self, task: Task, margin: float = DEFAULT_MARGIN) -> None:
        if not hasattr(task, "answer_scores"):
            raise ValueError(f"the auto judge has no per-answer score for task {task.name!r}")
        if margin < 0:
            raise ValueError(f"margin must be >= 0, got {margin}")
        self.task, self.margin = task, margin
        self.score = task.answer_scores  # type: ignore[attr-defined]

    def judge(self, pairs: Sequence[Pair]) -> list[Verdict]:
        examples = [p.example for p in pairs]
        first = self.score(examples, [p.first for p in pairs])
        second = self.score(examples, [p.second for p in pairs])
        verdicts: list[Verdict] = []
        for s_a, s_b in zip(first, second, strict=True):
            verdicts.append("A" if s_a - s_b > self.margin
                            else "B" if s_b - s_a > self.margin else "tie")
        return verdicts


class LLMJudge:
    """A local causal LM as the judge (any `from_pretrained` directory, loaded offline).

    For each pair shown, the prompt is JUDGE_PROMPT (in the tokenizer's chat template when it
    has one, the reply then starting with the letter; else followed by PLAIN_SUFFIX and the
    letter after a space). The verdict compares log p(letter A | prompt) with
    log p(letter B | prompt) (the sum over the letter's tokens when it has several): the
    larger wins, equal is a tie. Deterministic: no sampling, the model in eval mode.
    """

    symmetric = False

    def __init__(self, model_dir: str | Path, device: str | None = None) -> None:
        self.model_dir = Path(model_dir)
        if not self.model_dir.is_dir():
            raise DataError(f"judge model {str(model_dir)!r} is not a directory")
        self.device = device
        self._loaded: tuple[Any, Any] | None = None

    def _load(self) -> tuple[Any, Any]:
        if self._loaded is None:
            import torch
            from transformers import AutoModelForCausalLM, AutoTokenizer

            device = self.device or ("cuda" if torch.cuda.is_available() else "cpu")
            tokenizer = AutoTokenizer.from_pretrained(self.model_dir, local_files_only=True)
            model = AutoModelForCausalLM.from_pretrained(
                self.model_dir, local_files_only=True,
                dtype="auto" if device.startswith("cuda") else torch.float32,
            ).to(device).eval()
            self._loaded = (tokenizer, model)
        return self._loaded

    def prompt(self, pair: Pair) -> tuple[str, tuple[str, str]]:
        """The prompt text for `pair` and the two continuations it compares ('A', 'B')."""
        tokenizer, _ = self._load()
        example = pair.example
        question = f"{example.instruction}\n\n{example.input}" if example.input else (
            example.instruction)
        text = JUDGE_PROMPT.format(
            question=_cap(question, QUESTION_CHARS), reference=_cap(example.output, TEXT_CHARS),
            answer_a=_cap(pair.first, TEXT_CHARS), answer_b=_cap(pair.second, TEXT_CHARS))
        if getattr(tokenizer, "chat_template", None):
            chat = tokenizer.apply_chat_template([{"role": "user", "content": text}],
                                                 tokenize=False, add_generation_prompt=True)
            return chat, ("A", "B")
        return text + PLAIN_SUFFIX, (" A", " B")

    def letter_logprobs(self, prompt: str, letters: tuple[str, str]) -> tuple[float, float]:
        """log p(letters[0] | prompt) and log p(letters[1] | prompt), each summed over the
        letter's tokens; the prompt is cut from the left to fit the model's positions. The
        tokenizer adds its special tokens (BOS) to a plain prompt, not to a chat template's."""
        import torch

        tokenizer, model = self._load()
        chat = bool(getattr(tokenizer, "chat_template", None))  # a template writes its own BOS
        prompt_ids = tokenizer(prompt, add_special_tokens=not chat)["input_ids"]
        conts = [tokenizer(x, add_special_tokens=False)["input_ids"] for x in letters]
        limit = getattr(model.config, "max_position_embeddings", None) or 2048
        keep = max(1, limit - max(len(c) for c in conts))
        prompt_ids = prompt_ids[-keep:]
        results = []
        with torch.no_grad():
            for cont in conts:
                ids = torch.tensor([prompt_ids + cont], device=model.device)
                logits = model(input_ids=ids).logits[0, len(prompt_ids) - 1: -1].float()
                logp = torch.log_softmax(logits, dim=-1)
                picked = logp.gather(1, torch.tensor(cont, device=logp.device)[:, None])
                results.append(float(picked.sum()))
        return results[0], results[1]

    def judge(self, pairs: Sequence[Pair]) -> list[Verdict]:
        verdicts: list[Verdict] = []
        for pair in pairs:
            text, letters = self.prompt(pair)
            lp_a, lp_b = self.letter_logprobs(text, letters)
            verdicts.append("A" if lp_a > lp_b else "B" if lp_b > lp_a else "tie")
        return verdicts


def make_judge(spec: str, task: Task, margin: float = DEFAULT_MARGIN) -> Judge:
    """The judge named by `spec`: 'auto' or 'llm:MODEL_DIR'; ValueError for anything else."""
    if spec == "auto":
        return AutoJudge(task, margin)
    if spec.startswith("llm:") and spec[4:]:
        return LLMJudge(spec[4:])
    raise ValueError(f"unknown judge {spec!r}; use auto or llm:MODEL_DIR")


def _cap(text: str, chars: int) -> str:
    return as_text(text)[:chars]
