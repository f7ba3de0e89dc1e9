"""Bootstrap intervals of evaluation metrics, against hand-computed figures."""

from __future__ import annotations

import math

import numpy as np
import pytest

from hargo_hpc.eval.intervals import (
    Interval,
    bootstrap,
    mean_metric,
    paired_difference,
    winrate_metric,
)


def test_a_share_gets_the_normal_approximation_width() -> None:
    """100 of 200 right: the share's standard error is sqrt(0.5 * 0.5 / 200) = 0.0354, so a
    95 % interval is about 0.5 ± 1.96 * 0.0354 = [0.431, 0.569]. The percentile bootstrap's
    ends are the 2.5 % and 97.5 % quantiles of 1000 resampled shares, whose Monte-Carlo error is
    sqrt(0.025 * 0.975 / 1000) / density = 0.0049 / (0.058 / 0.0354) ≈ 0.003 (normal density
    at 1.96 sd: 0.058 / sd), and the bootstrap distribution of a share of 200 is discrete in
    steps of 0.005: within 0.015 of each end is five of those errors."""
    got = bootstrap(mean_metric([1.0, 0.0] * 100), 200, seed=1)
    assert got.value == 0.5 and got.n == 200
    half = 1.96 * math.sqrt(0.25 / 200)
    assert got.low == pytest.approx(0.5 - half, abs=0.015)
    assert got.high == pytest.approx(0.5 + half, abs=0.015)
    assert bootstrap(mean_metric([1.0, 0.0] * 100), 200, seed=1) == got  # seeded


def test_paired_differences_cancel_what_the_examples_share() -> None:
    """Two systems whose per-example scores differ by exactly 0.1 on every example: the paired
    difference is 0.1 on every resample (a zero-width interval), while the unpaired spread of
    either system alone is wide."""
    rng = np.random.default_rng(0)
    base = rng.uniform(0, 1, 150)
    before, after = mean_metric(base), mean_metric(base + 0.1)
    diff = paired_difference(before, after, 150, seed=2)
    assert diff.value == pytest.approx(0.1)
    assert diff.low == pytest.approx(0.1) and diff.high == pytest.approx(0.1)
    assert diff.excludes_zero()
    alone = bootstrap(after, 150, seed=2)
    assert alone.high - alone.low > 0.08  # uniform scores: sd 0.29, 2 * 1.96 * 0.29 / sqrt(150)


def test_identical_systems_differ_by_exactly_zero() -> None:
    same = mean_metric([0.3, 0.9, 0.4])
    diff = paired_difference(same, same, 3)
    assert (diff.value, diff.low, diff.high) == (0.0, 0.0, 0.0) and not diff.excludes_zero()


def test_a_non_mean_metric_resamples_examples() -> None:
    """F1 of yes-detection over (label, prediction) pairs is not a mean of per-example values:
    the metric is recomputed on each resample of the pairs."""
    labels = np.array([1] * 50 + [0] * 50)
    predicted = np.array([1] * 40 + [0] * 10 + [1] * 10 + [0] * 40)

    def f1(idx: np.ndarray) -> float:
        tp = int(((labels[idx] == 1) & (predicted[idx] == 1)).sum())
        fp = int(((labels[idx] == 0) & (predicted[idx] == 1)).sum())
        fn = int(((labels[idx] == 1) & (predicted[idx] == 0)).sum())
        return 2 * tp / (2 * tp + fp + fn) if tp else 0.0

    got = bootstrap(f1, 100, seed=3)
    assert got.value == pytest.approx(0.8)  # tp 40, fp 10, fn 10: 80 / 100
    assert got.low < 0.8 < got.high and got.high - got.low < 0.25


def test_winrate_outcomes() -> None:
    ties = bootstrap(winrate_metric(["tie"] * 40), 40)
    assert (ties.value, ties.low, ties.high) == (0.5, 0.5, 0.5)
    wins = bootstrap(winrate_metric(["win"] * 30 + ["tie"] * 10), 40)
    assert wins.value == pytest.approx(0.875) and wins.low > 0.5  # 30 + 5 of 40


def test_text_and_json() -> None:
    interval = Interval(0.575, 0.43, 0.71, 40)
    assert interval.text() == "0.575 [0.430, 0.710] (n=40)"
    assert Interval.from_json(interval.to_json()) == interval
    empty = bootstrap(mean_metric([]), 0)
    assert empty.n == 0 and math.isnan(empty.low)
