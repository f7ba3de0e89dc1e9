"""The question-answering tasks: MLPerf QA (short facts) and PLP QA (one sentence).

Also the answer extraction every text task shares (`extract_answer`): the data-race task
imports it from here. Rewards and metrics, with their formulas and reasons: docs/tasks.md.

MLPerf QA is scored like SQuAD (Rajpurkar et al. 2016, the official v1.1 evaluation script):
normalised exact match and token F1, times a brevity factor; PLP QA by the cosine similarity of
sentence embeddings (`hargo_hpc.tasks.similarity`, which loads its model on first use).
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from hargo_hpc.tasks.base import Example, Task, check_pairs
from hargo_hpc.tasks.shape import degenerate, first_sentence, ordered_f1, rescaled
from hargo_hpc.tasks.similarity import as_text, similarity_scores

MAX_ANSWER_CHARS = 4096  # an extracted answer is cut to this many characters
SCORE_MEMORY = 50_000  # (answer, reference) similarity scores a task instance keeps
OVER_CHARS = 40  # the metric's length threshold: HARGO's "65.9 % of answers exceed 40 characters"
LEAD_TOKENS = 4  # the reward reads an MLPerf answer's first |reference| + 4 tokens ("it is ...")
_SECTION = re.compile(r"^[ \t]*###(?=\s|$)", re.MULTILINE)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = frozenset(string.punctuation)

Scorer = Callable[[Sequence[str], Sequence[str]], list[float]]  # (answers, references) -> scores


def extract_answer(completion: object) -> str:
    """The answer in a completion: the text before the first line that starts with `###`
    (a new Alpaca section: a base model that keeps going writes `### Instruction:` again),
    stripped, at most MAX_ANSWER_CHARS characters. Never raises; idempotent."""
    text = completion if isinstance(completion, str) else as_text(completion)
    marker = _SECTION.search(text)
    if marker is not None:
        text = text[: marker.start()]
    return as_text(text.strip()[:MAX_ANSWER_CHARS].rstrip())


def normalize_answer(text: str) -> str:
    """SQuAD v1.1's normalisation: lower-case, drop ASCII punctuation (`string.punctuation`),
    drop the articles a/an/the, collapse whitespace."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(answer: str, reference: str) -> float:
    """1.0 when normalize(answer) == normalize(reference), else 0.0 (SQuAD v1.1)."""
    return float(normalize_answer(answer) == normalize_answer(reference))


def token_f1(answer: str, reference: str) -> float:
    """SQuAD v1.1's token F1 over normalised, whitespace-split tokens:
    c = |tokens(answer) ∩ tokens(reference)| (multiset), P = c / |answer|, R = c / |reference|,
    F1 = 2PR / (P + R); 0 when c = 0; 1 when both normalise to nothing (then they match)."""
    pred, ref = normalize_answer(answer).split(), normalize_answer(reference).split()
    if not pred or not ref:
        return float(pred == ref)
    common = sum((Counter(pred) & Counter(ref)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(ref)
    return 2 * precision * recall / (precision + recall)


def answer_score(answer: str, reference: str, question: str) -> float:
    """MLPerf's reward score before the brevity factor: what the answer says at the
    reference's scale, beyond what the question already says.

    With tokens the SQuAD-normalised words (`normalize_answer`), the answer is cut to its
    first |reference| + LEAD_TOKENS tokens (so length beyond the reference's scale can match
    nothing more), scored by `shape.ordered_f1` (unigram and bigram F1: the reference's words
    in another order score about half) and rescaled against the question's own score
    (`shape.rescaled`: echoing the question earns 0). As SQuAD, two answers that normalise to
    nothing match (1), and an empty answer to a non-empty reference scores 0."""
    ref = normalize_answer(reference).split()
    said = normalize_answer(answer).split()
    if not ref or not said:
        return float(ref == said)
    cut = said[:len(ref) + LEAD_TOKENS]
    return rescaled(ordered_f1(cut, ref), ordered_f1(normalize_answer(question).split(), ref))


def brevity_factor(length: int, reference_length: int, chars: int, weight: float) -> float:
    """The factor a verbose answer's score is multiplied by.

    With the limit L = max(chars, reference_length) and w = weight:
    1 for length <= L, else 1 - w * min(1, (length - L) / L): a linear ramp from 1 at L down to
    1 - w at 2L and beyond (continuous, monotone, bounded). The reference's own length is in
    L so that repeating a long reference never pays; HARGO's abstract names verbosity as the
    SFT model's failure on MLPerf (65.9 % of its answers exceed 40 characters).
    """
    limit = max(chars, reference_length)
    if length <= limit:
        return 1.0
    return 1.0 - weight * min(1.0, (length - limit) / limit)


def mlperf_metrics(references: Sequence[str], predictions: Sequence[object]) -> dict[str, Any]:
    """MLPerf QA's metrics over raw predictions (extracted first): means of exact match and
    token F1, the mean answer length in characters beside the references' mean length, and
    the share of answers over 40 characters. All 0 for no predictions."""
    check_pairs(references, predictions, "references", "predictions")
    answers = [extract_answer(p) for p in predictions]
    n = len(answers)
    if n == 0:
        return {"n": 0, "exact_match": 0.0, "f1": 0.0, "mean_chars": 0.0,
                "reference_chars": 0.0, "share_over_40": 0.0}
    return {
        "n": n,
        "exact_match": sum(map(exact_match, answers, references)) / n,
        "f1": sum(map(token_f1, answers, references)) / n,
        "mean_chars": sum(len(a) for a in answers) / n,
        "reference_chars": sum(len(r) for r in references) / n,
        "share_over_40": sum(len(a) > OVER_CHARS for a in answers) / n,
    }


def plp_metrics(
    references: Sequence[str], predictions: Sequence[object], similarity: Scorer | None = None
) -> dict[str, Any]:
    """PLP QA's metrics over raw predictions (extracted first): the mean cosine similarity to
    the reference (`similarity.similarity_scores` unless another scorer is given; the reward
    pays only what an answer adds beyond the question, `_QATask.similarity_reward`), the
    share of answers that repeat themselves (`shape.degenerate`) and the mean answer length
    in characters. 0 for no predictions."""
    check_pairs(references, predictions, "references", "predictions")
    answers = [extract_answer(p) for p in predictions]
    if not answers:
        return {"n": 0, "similarity": 0.0, "degenerate_share": 0.0, "mean_chars": 0.0}
    scores = (similarity or _default_similarity)(answers, list(references))
    n = len(answers)
    return {"n": n, "similarity": sum(scores) / n,
            "degenerate_share": sum(map(degenerate, answers)) / n,
            "mean_chars": sum(map(len, answers)) / n}


def _default_similarity(answers: Sequence[str], references: Sequence[str]) -> list[float]:
    return similarity_scores(answers, references)


class _QATask(Task):
    """A task whose reference is free text: examples keep any non-empty output."""

    def from_record(self, record: Mapping[str, Any], index: int) -> Example | None:
        output = str(record.get("output") or "").strip()
        if not output:
            return None
        return Example(
            task=self.name,
            id=f"{self.name}:{index}",
            instruction=str(record.get("instruction") or ""),
            input=str(record.get("input") or ""),
            output=output,
        )

    def extract(self, completion: str) -> str:
        return extract_answer(completion)

    def _similarity(self, answers: Sequence[str], references: Sequence[str]) -> list[float]:
        """`similarity_scores`, each distinct (answer, reference) pair embedded once per task
        instance: an evaluation's bootstrap rescores the same pairs a thousand times. The
        memory is dropped past SCORE_MEMORY pairs (a long training run never repeats many)."""
        memory: dict[tuple[str, str], float] = self.__dict__.setdefault("_scores", {})
        pairs = list(zip(answers, references, strict=True))
        missing = list(dict.fromkeys(p for p in pairs if p not in memory))
        if missing:
            if len(memory) + len(missing) > SCORE_MEMORY:
                memory.clear()
            scores = similarity_scores([a for a, _ in missing], [r for _, r in missing],
                                       self.rewards.similarity_model)
            memory.update(zip(missing, scores, strict=True))
        return [memory[p] for p in pairs]

    def similarity_reward(self, examples: Sequence[Example], answers: Sequence[str]) -> list[float]:
        """The embedding similarity an answer adds beyond the question: 0 for an answer that
        repeats itself (`shape.degenerate`), else `shape.rescaled(cos(s, reference),
        cos(question, reference))` with s the answer's first sentence (`shape.first_sentence`:
        the tasks ask for one), so echoing the question earns 0 and neither repetition nor
        sentences appended earn anything. `rewards.similarity_baseline = "none"` drops the
        question's part (b = 0): the plain cosine, for ablations. Each (answer, question,
        reference) is scored once per task instance (or taken from `remember_rewards`)."""
        memory: dict[tuple[str, str, str], float] = self.__dict__.setdefault("_rewards", {})
        keys = [(a, self.user_text(e), e.output) for a, e in zip(answers, examples, strict=True)]
        missing = list(dict.fromkeys(k for k in keys if k not in memory))
        if missing:
            if len(memory) + len(missing) > SCORE_MEMORY:
                memory.clear()
            references = [r for _, _, r in missing]
            scores = self._similarity([first_sentence(a) for a, _, _ in missing], references)
            baselines = (self._similarity([q for _, q, _ in missing], references)
                         if self.rewards.similarity_baseline == "question"
                         else [0.0] * len(missing))
            for key, score, baseline in zip(missing, scores, baselines, strict=True):
                memory[key] = 0.0 if degenerate(key[0]) else rescaled(score, baseline)
        return [memory[k] for k in keys]


class MlperfQA(_QATask):
    """MLPerf Training v3.0 results QA: short facts (median reference 46 characters)."""

    name = "mlperf_qa"
    headline = ("exact_match", "f1", "share_over_40")
    form = ("share_over_40", "mean_chars")  # a short factual answer
    lower_better = ("share_over_40",)
    undirected = ("mean_chars", "reference_chars")
    max_new_tokens = 48  # ~190 characters: the brevity term has taken its most by 2 x 40
    stop = ("\n###",)
    eval_examples = 100
    files = ("task1_ml_perf.json",)
    sample = "mlperf_qa.json"

    def reward(self, examples: Sequence[Example], completions: Sequence[str]) -> list[float]:
        """r = m(answer, reference) * brevity_factor(len(answer), len(reference), L, w), with m
        by `rewards.qa_metric`: `answer_score` (f1: the ordered token F1 at the reference's
        scale, beyond the question's own), the exact match, or the embedding similarity
        beyond the question's own (`_QATask.similarity_reward`); L = rewards.brevity_chars,
        w = rewards.brevity_weight. In [0, 1]."""
        check_pairs(examples, completions, "references", "predictions")
        answers = [extract_answer(c) for c in completions]
        references = [e.output for e in examples]
        metric = self.rewards.qa_metric
        if metric == "similarity":
            scores = self.similarity_reward(examples, answers)
        elif metric == "exact":
            scores = list(map(exact_match, answers, references))
        else:
            scores = [answer_score(a, e.output, self.user_text(e))
                      for a, e in zip(answers, examples, strict=True)]
        chars, weight = self.rewards.brevity_chars, self.rewards.brevity_weight
        return [
            s * brevity_factor(len(a), len(ref), chars, weight)
            for s, a, ref in zip(scores, answers, references, strict=True)
        ]

    def answer_scores(self, examples: Sequence[Example], answers: Sequence[str]) -> list[float]:
        """Token F1 of each answer against its reference (the auto WinRate judge's score)."""
        check_pairs(examples, answers, "references", "predictions")
        return [token_f1(extract_answer(a), e.output)
                for e, a in zip(examples, answers, strict=True)]

    def metrics(self, examples: Sequence[Example], predictions: Sequence[str]) -> dict[str, Any]:
        return mlperf_metrics([e.output for e in examples], predictions)


class PlpQA(_QATask):
    """Programming-language-processing QA: one-sentence answers (median 152 characters)."""

    name = "plp_qa"
    headline = ("similarity", "degenerate_share", "mean_chars")
    form = ("mean_chars",)  # about one sentence
    lower_better = ("degenerate_share",)
    undirected = ("mean_chars",)
    max_new_tokens = 96  # one sentence (median reference 152 characters, ~35 tokens)
    stop = ("\n###",)
    eval_examples = 100
    files = ("task1_plp.json",)
    sample = "plp_qa.json"

    def reward(self, examples: Sequence[Example], completions: Sequence[str]) -> list[float]:
        """r = `similarity_reward`: the sentence-embedding similarity to the reference
        (`similarity.similarity_scores`) beyond the question's own, 0 for an answer that
        repeats itself; an empty answer gets 0. In [0, 1]."""
        check_pairs(examples, completions, "references", "predictions")
        return self.similarity_reward(examples, [extract_answer(c) for c in completions])

    def remember_rewards(self, examples: Sequence[Example], completions: Sequence[str],
                         rewards: Sequence[float]) -> None:
        """Keep rewards computed before (an evaluation's predictions file) for their
        (answer, question, reference): the reward is `similarity_reward`, so completions it
        has seen need no embedding model for it."""
        memory: dict[tuple[str, str, str], float] = self.__dict__.setdefault("_rewards", {})
        for example, completion, reward in zip(examples, completions, rewards, strict=True):
            memory[(extract_answer(completion), self.user_text(example), example.output)] = (
                float(reward))

    def answer_scores(self, examples: Sequence[Example], answers: Sequence[str]) -> list[float]:
        """The reward's similarity of each answer (the auto WinRate judge's score)."""
        return self.reward(examples, answers)

    def metrics(self, examples: Sequence[Example], predictions: Sequence[str]) -> dict[str, Any]:
        return plp_metrics([e.output for e in examples], predictions, self._similarity)
