"""Every share and mean of a task with its interval; paired changes; examples resampled
whole (all of a problem's samples together)."""

from __future__ import annotations

import numpy as np
import pytest

from hargo_hpc.eval.compare import interval_keys, intervals, paired, unit_rows
from hargo_hpc.tasks.data_race import data_race_metrics


def test_interval_keys_are_the_shares_and_means_not_the_counts() -> None:
    values = {"tp": 3, "precision": 0.5, "ok_share": None, "flag": True, "statuses": {},
              "f1": 0.25}
    assert interval_keys(values) == ["precision", "f1"]


def test_unit_rows_keep_an_examples_samples_together() -> None:
    assert unit_rows([2, 0, 2], 3) == [6, 7, 8, 0, 1, 2, 6, 7, 8]
    assert unit_rows(np.array([1]), 1) == [1]


def test_each_resample_is_computed_once_for_every_key() -> None:
    """The data-race metrics of 40 (label, answer) pairs: 1000 resamples, 7 keys, one
    metrics call per distinct resample (plus the full set and BCa's 40 leave-one-out
    sets)."""
    labels = ["yes", "no"] * 20
    answers = ["yes"] * 30 + ["maybe"] * 10
    calls = []

    def of(idx: np.ndarray) -> dict[str, object]:
        calls.append(1)
        return data_race_metrics([labels[i] for i in idx], [answers[i] for i in idx])

    keys = interval_keys(of(np.arange(40)))
    found = intervals(of, 40, keys, seed=0)
    assert set(found) == set(keys) and len(keys) == 7
    assert len(calls) <= 1 + 1 + 1000 + 40  # the keys', the value on all, resamples, jackknife
    support = found["support_rate"]
    assert support.value == 0.75 and support.low < 0.75 < support.high


def test_a_change_on_every_example_is_certain_and_none_is_zero() -> None:
    """after is right on every other example where before is right on none: the paired
    change of accuracy is +0.5, its interval well above 0 (the share of 50 has a standard
    error of 0.07); a system against itself changes by exactly 0."""
    before = np.array([0.0] * 50)
    after = np.array([1.0, 0.0] * 25)
    of_before = lambda idx: {"accuracy": float(before[idx].mean())}  # noqa: E731
    of_after = lambda idx: {"accuracy": float(after[idx].mean())}  # noqa: E731
    change = paired(of_before, of_after, 50, ["accuracy"], seed=3)["accuracy"]
    assert change.value == pytest.approx(0.5) and change.excludes_zero()
    same = paired(of_after, of_after, 50, ["accuracy"])["accuracy"]
    assert (same.value, same.low, same.high) == (0.0, 0.0, 0.0)
