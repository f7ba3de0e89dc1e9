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


def test_pooling_over_seeds_counts_the_run_to_run_spread() -> None:
    """Three seeds whose changes are exact on every example (no example noise) but differ from
    seed to seed: +0.1, +0.2, +0.3. Each seed's own interval has zero width and excludes 0;
    the pooled interval must span the seeds' spread (a resample of the seeds can be all +0.1
    or all +0.3), and its point is the mean, 0.2."""
    from hargo_hpc.eval.intervals import over_seeds

    changes = [(mean_metric([c] * 50), 50) for c in (0.1, 0.2, 0.3)]
    found = over_seeds(changes, seed=3)
    assert [round(i.value, 6) for i in found.per_seed] == [0.1, 0.2, 0.3]
    assert all(i.high - i.low < 1e-12 for i in found.per_seed)
    assert found.pooled is not None and found.pooled.value == pytest.approx(0.2)
    assert found.pooled.low < 0.15 and found.pooled.high > 0.25  # the seeds' spread shows
    assert found.pooled.low >= 0.1 - 1e-12 and found.pooled.high <= 0.3 + 1e-12
    assert found.verdict() == "better"
    # a rise of a share of failures is worse; of a length, only up
    assert (found.verdict("lower"), found.verdict("none")) == ("worse", "up")
    # t interval by hand: mean 0.2, sd 0.1, t(2, 0.975) = 4.303: 0.2 ± 0.248
    assert found.t is not None
    assert found.t.low == pytest.approx(0.2 - 4.3027 * 0.1 / math.sqrt(3), abs=1e-3)


def test_seeds_that_disagree_in_sign_make_no_pooled_claim() -> None:
    """Seed 0 +0.2, seed 1 −0.2, seed 2 +0.05, each decisive over its own examples: pooled over
    the seeds the interval holds 0 ("no change shown"), the per-seed intervals stay decisive."""
    from hargo_hpc.eval.intervals import over_seeds

    changes = [(mean_metric([c] * 40), 40) for c in (0.2, -0.2, 0.05)]
    found = over_seeds(changes)
    assert all(i.excludes_zero() for i in found.per_seed)
    assert found.pooled is not None and not found.pooled.excludes_zero()
    assert found.verdict() == "no change shown"


def test_too_few_seeds_are_stated_per_seed() -> None:
    from hargo_hpc.eval.intervals import over_seeds

    found = over_seeds([(mean_metric([0.3, 0.1] * 20), 40), (mean_metric([0.1, -0.1] * 20), 40)])
    assert found.pooled is None and found.seeds == 2
    assert found.verdict() == "better in 1 of 2 seeds (too few to pool)"
    assert found.verdict("lower") == "worse in 1 of 2 seeds (too few to pool)"
    assert found.to_json()["pooled"] is None


def test_pooling_also_resamples_each_seeds_examples() -> None:
    """Three identical seeds (no run-to-run spread) whose examples are noisy: the pooled
    interval is not zero-width, it carries the examples' noise."""
    from hargo_hpc.eval.intervals import over_seeds

    noisy = mean_metric(list(np.random.default_rng(0).normal(0, 1, 60)))
    found = over_seeds([(noisy, 60)] * 3)
    assert found.pooled is not None and found.pooled.high - found.pooled.low > 0.2


def test_bca_where_it_is_defined_and_percentile_where_it_is_not() -> None:
    """A skewed metric (the mean of 12 log-normal draws, like GEMM's 12 shapes): the interval
    is scipy's BCa one, which leans towards the long tail more than the percentile interval
    does; a metric equal on every leave-one-out set has no acceleration (BCa undefined) and
    falls back to percentiles: here a zero-width interval, never NaN."""
    from scipy import stats

    values = np.random.default_rng(7).lognormal(0.0, 1.0, 12)
    got = bootstrap(mean_metric(list(values)), 12, seed=3)
    for method in ("BCa", "percentile"):
        want = stats.bootstrap((np.arange(12),), lambda idx: float(values[idx].mean()),
                               vectorized=False, n_resamples=1000, method=method,
                               random_state=np.random.default_rng(3)).confidence_interval
        if method == "BCa":
            assert (got.low, got.high) == pytest.approx((want.low, want.high))
            bca_high = want.high
        else:
            assert bca_high > want.high  # BCa reaches further into the right tail
    flat = bootstrap(mean_metric([0.5] * 12), 12)
    assert (flat.value, flat.low, flat.high) == (0.5, 0.5, 0.5)
