"""Data race detection (HPC-GPT's task 2): is there a data race in this OpenMP code? yes/no.

One class, `DataRace`, parameterised by the language (`DataRaceC` for C/C++,
`DataRaceFortran`). The reward parses yes/no from the answer (`parse_yes_no`); the metrics are
HPC-GPT's (Ding et al. 2023; `data_race_metrics`). Reasons and formulas: docs/tasks.md.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Literal

from hargo_hpc.tasks.base import Example, Task, check_pairs
from hargo_hpc.tasks.qa import extract_answer

LABELS = ("yes", "no")
_WORD = re.compile(r"\b(yes|no)\b", re.IGNORECASE)
SKILL_KEYS = ("balanced_accuracy", "majority_share", "yes_auc")
METRIC_KEYS = ("tp", "fp", "tn", "fn", "precision", "recall", "accuracy", "specificity", "f1",
               "support_rate", "adjusted_f1")


def parse_yes_no(answer: str, mode: Literal["strict", "lenient"] = "strict") -> str | None:
    """'yes', 'no', or None (unparsable) for an extracted answer.

    strict: the whole answer, trimmed and lower-cased, is exactly `yes` or `no`: the rule
    HPC-GPT's metrics count, so a strict reward trains exactly the format the support rate
    rewards (`No.` is unparsable). lenient: the first standalone word `yes` or `no` in any case
    (`Yes, there is a data race` -> yes; `not`, `nope`, `know` are no such word), unless the
    answer also holds the other word: `yes no`, `yes/no`, `no ... yes` is a hedge, unparsable
    (it would otherwise be paid for whichever word it puts first).
    """
    text = answer.strip().lower()
    if mode == "strict":
        return text if text in LABELS else None
    found = _WORD.findall(text)
    return found[0] if found and len(set(found)) == 1 else None


def _safe(num: float, den: float) -> float:
    return num / den if den else 0.0


def data_race_metrics(labels: Sequence[str], predictions: Sequence[object]) -> dict[str, Any]:
    """HPC-GPT's data-race metrics over raw predictions (extracted first), `yes` positive.

    Only predictions that are exactly yes/no after trimming and lower-casing (the strict
    parse) are counted in TP/FP/TN/FN; `labels` are the references ('yes'/'no').
    precision = TP/(TP+FP), recall = TP/(TP+FN), accuracy = (TP+TN)/parsed (over the parsed
    predictions only), specificity = TN/(TN+FP), F1 = 2PR/(P+R), support_rate = parsed/all,
    adjusted_f1 = support_rate * F1; each is 0 where its denominator is 0.
    """
    if len(labels) != len(predictions):
        raise ValueError(f"{len(labels)} labels but {len(predictions)} predictions")
    tp = fp = tn = fn = 0
    for label, prediction in zip(labels, predictions, strict=True):
        if label not in LABELS:
            raise ValueError(f"reference label {label!r} is not yes/no")
        parsed = parse_yes_no(extract_answer(prediction), "strict")
        if parsed is None:
            continue
        if parsed == "yes":
            tp, fp = tp + (label == "yes"), fp + (label == "no")
        else:
            tn, fn = tn + (label == "no"), fn + (label == "yes")
    parsed_count = tp + fp + tn + fn
    precision, recall = _safe(tp, tp + fp), _safe(tp, tp + fn)
    f1 = _safe(2 * precision * recall, precision + recall)
    support = _safe(parsed_count, len(predictions))
    return {
        "tp": tp, "fp": fp, "tn": tn, "fn": fn,
        "precision": precision,
        "recall": recall,
        "accuracy": _safe(tp + tn, parsed_count),
        "specificity": _safe(tn, tn + fp),
        "f1": f1,
        "support_rate": support,
        "adjusted_f1": support * f1,
    }


def skill_metrics(examples: Sequence[Example], predictions: Sequence[object],
                  base: dict[str, Any] | None = None) -> dict[str, Any]:
    """What tells telling races apart from a bias towards one answer (issue W): balanced
    accuracy = (recall + specificity) / 2 (0.5 for any constant answer); majority_share =
    the share of the commoner label among the examples (the accuracy of always giving it);
    yes_auc = the area under the ROC curve of p(yes), each example's share of samples
    answering exactly `yes` (strict parse), against its label: the Mann-Whitney statistic
    (Σ ranks of the positives − P(P + 1)/2) / (P·N) with average ranks for ties (Hanley &
    McNeil 1982; with one sample per example it is the balanced accuracy of those answers);
    None without both labels. Rows of one example (its samples) share its id. `base`: the
    same rows' `data_race_metrics` when the caller has them (else computed here)."""
    from scipy.stats import rankdata

    labels: dict[str, str] = {}
    yes: dict[str, list[bool]] = {}
    for example, prediction in zip(examples, predictions, strict=True):
        labels[example.id] = example.label
        said = parse_yes_no(extract_answer(prediction), "strict") == "yes"
        yes.setdefault(example.id, []).append(said)
    counts = [sum(1 for v in labels.values() if v == label) for label in LABELS]
    if base is None:
        base = data_race_metrics([e.label for e in examples], predictions)
    out: dict[str, Any] = {
        "balanced_accuracy": (base["recall"] + base["specificity"]) / 2,
        "majority_share": max(counts) / len(labels) if labels else 0.0,
        "yes_auc": None,
    }
    if all(counts):
        ids = list(labels)
        ranks = rankdata([sum(yes[i]) / len(yes[i]) for i in ids])
        positives = [r for r, i in zip(ranks, ids, strict=True) if labels[i] == "yes"]
        p, n = counts[0], counts[1]
        out["yes_auc"] = float((sum(positives) - p * (p + 1) / 2) / (p * n))
    return out


class DataRace(Task):
    """Data race detection in one language; the reference is `yes` or `no`."""

    headline = ("f1", "adjusted_f1", "accuracy", "support_rate")
    form = ("support_rate",)  # the answer parses as yes or no
    max_new_tokens = 8  # "yes" or "no" and the end of the turn
    stop = ("\n###",)  # an Alpaca model going on to a new section
    eval_examples = 200

    language: ClassVar[str]

    def from_record(self, record: Mapping[str, Any], index: int) -> Example | None:
        """The example of a record whose output is yes/no after strip + lower (its label and
        output are that word); None for any other output (HPC-GPT's C/C++ split has 21 such
        records, answers with code appended)."""
        label = str(record.get("output") or "").strip().lower()
        if label not in LABELS:
            return None
        return Example(
            task=self.name,
            id=f"{self.name}:{index}",
            instruction=str(record.get("instruction") or ""),
            input=str(record.get("input") or ""),
            output=label,
            label=label,
        )

    def extract(self, completion: str) -> str:
        return extract_answer(completion)

    def reward(self, examples: Sequence[Example], completions: Sequence[str]) -> list[float]:
        """1 for the correct label, 0 for the wrong one, rewards.unparsable_reward when no
        yes/no parses (rewards.data_race_parse: strict or lenient)."""
        check_pairs(examples, completions, "examples", "completions")
        mode, unparsable = self.rewards.data_race_parse, self.rewards.unparsable_reward
        rewards = []
        for example, completion in zip(examples, completions, strict=True):
            parsed = parse_yes_no(extract_answer(completion), mode)
            rewards.append(unparsable if parsed is None else float(parsed == example.label))
        return rewards

    def answer_scores(self, examples: Sequence[Example], answers: Sequence[str]) -> list[float]:
        """1 when the answer is exactly the label (the metrics' parse), else 0: the auto
        WinRate judge's score (correct beats wrong and unparsable, which tie)."""
        check_pairs(examples, answers, "examples", "answers")
        return [float(parse_yes_no(extract_answer(a), "strict") == e.label)
                for e, a in zip(examples, answers, strict=True)]

    def metrics(self, examples: Sequence[Example], predictions: Sequence[str]) -> dict[str, Any]:
        """HPC-GPT's metrics (`data_race_metrics`), then `skill_metrics`."""
        base = data_race_metrics([e.label for e in examples], predictions)
        return {**base, **skill_metrics(examples, predictions, base)}


class DataRaceC(DataRace):
    """HPC-GPT's C/C++ split (DataRaceBench kernels)."""

    name = "data_race_c"
    files = ("task2_c_c++.json",)
    sample = "data_race_c.json"
    language = "C/C++"


class DataRaceFortran(DataRace):
    """HPC-GPT's Fortran split."""

    name = "data_race_fortran"
    files = ("task2_fortran.json",)
    sample = "data_race_fortran.json"
    language = "Fortran"
