"""What a text answer looks like, apart from what it says: repetition, word order, hedging.

The text rewards use these checks so that an RL policy cannot raise its reward by repeating
itself, padding, hedging, echoing the question or stringing the right words together in any
order (issue W; docs/rewards.md, "Answers, not shapes"). Pure functions, no model.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

_WORD = re.compile(r"\w+")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")

# seq-rep thresholds, above which an answer repeats itself (`degenerate`): about twice the
# largest value over HPC-GPT's 603 PLP references of 24 characters or more (2026-12-05: words
# 2-grams p99 0.062, max 0.103; characters 8-grams p99 0.122, max 0.153), so no reference of
# the task is degenerate and "Code Code CodeCodeCode..." (words 0.40, characters 0.77) is.
REPEATED_WORD_PAIRS = 0.25
REPEATED_CHAR_8GRAMS = 0.35
MIN_CHARS = 24  # shorter answers are too short to repeat themselves measurably


def words(text: str) -> list[str]:
    """The lower-cased word tokens (runs of letters, digits and underscores)."""
    return _WORD.findall(text.lower())


def first_sentence(text: str) -> str:
    """`text` up to its first sentence end (., ! or ? followed by space and a capital letter):
    a one-sentence task reads only that, so sentences appended to an answer cannot raise its
    score."""
    return _SENTENCE_END.split(text.strip(), maxsplit=1)[0]


def ngrams(tokens: Sequence[str], n: int) -> list[tuple[str, ...]]:
    return [tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1)]


def seq_rep(tokens: Sequence[str], n: int) -> float:
    """seq-rep-n = 1 − |distinct n-grams| / |n-grams| (Welleck et al. 2020, "Neural text
    generation with unlikelihood training", §5): the share of n-grams that repeat an earlier
    one; 0 with fewer than n tokens."""
    grams = ngrams(tokens, n)
    return 1.0 - len(set(grams)) / len(grams) if grams else 0.0


def degenerate(text: str) -> bool:
    """True when `text` repeats itself: seq-rep-2 over its words above REPEATED_WORD_PAIRS, or
    seq-rep-8 over its characters above REPEATED_CHAR_8GRAMS (which catches a word repeated
    without spaces, "CodeCodeCode"); never for text under MIN_CHARS characters."""
    if len(text) < MIN_CHARS:
        return False
    return (seq_rep(words(text), 2) > REPEATED_WORD_PAIRS
            or seq_rep(list(text), 8) > REPEATED_CHAR_8GRAMS)


def overlap_f1(answer: Sequence[str], reference: Sequence[str]) -> float:
    """F1 of two multisets of items: c = |answer ∩ reference| (multiset), P = c / |answer|,
    R = c / |reference|, F1 = 2PR / (P + R); 0 when c = 0 or either is empty."""
    common = sum((Counter(answer) & Counter(reference)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(answer), common / len(reference)
    return 2 * precision * recall / (precision + recall)


def ordered_f1(answer: Sequence[str], reference: Sequence[str]) -> float:
    """The mean of the unigram and the bigram overlap F1 (ROUGE-1 and ROUGE-2 as F-scores,
    Lin 2004), so the reference's words in another order score about half; the unigram F1
    alone for a one-token reference or answer (no bigram to compare)."""
    unigram = overlap_f1(answer, reference)
    if len(answer) < 2 or len(reference) < 2:
        return unigram
    return (unigram + overlap_f1(ngrams(answer, 2), ngrams(reference, 2))) / 2


def rescaled(score: float, baseline: float) -> float:
    """A score above what the question alone earns: clamp((s − b) / (1 − b), 0, 1) with b the
    question's own score against the reference, clamped to [0, 0.95] (BERTScore's baseline
    rescaling, Zhang et al. 2020, §3, with the question as the baseline). Echoing the question
    earns 0; an answer that restates it and adds the right fact keeps most of its score."""
    b = min(max(baseline, 0.0), 0.95)
    return min(max((score - b) / (1.0 - b), 0.0), 1.0)
