"""HARGO's switchable statistics (hargo_stats.py): hand-computed values, invariances, edges."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch

from hargo_hpc.algorithms.groups import Groups
from hargo_hpc.algorithms.hargo import hargo_signals, hargo_weights, hargo_weights_of_rows
from hargo_hpc.algorithms.hargo_stats import (
    CONFIDENCE_FUNCTIONS,
    SCALE_FREE_STATS,
    balance_statistic,
    bimodality_statistic,
    flat_groups,
    min_confidence,
    scale_free_discrimination,
    split_statistic,
    standardised,
    sum_confidence,
    token_mean_confidence,
    uncertain_mean_confidence,
)
from hargo_hpc.algorithms.names import CONFIDENCE_STATS, DISCRIMINATION_STATS

D = torch.float64
STATS = (balance_statistic, bimodality_statistic, split_statistic)
Stat = Callable[[torch.Tensor, Groups], torch.Tensor]
Conf = Callable[[torch.Tensor, torch.Tensor, float], tuple[torch.Tensor, torch.Tensor]]


def one_group(values: list[float], dtype: torch.dtype = D) -> tuple[torch.Tensor, Groups]:
    return torch.tensor(values, dtype=dtype), Groups.of(torch.zeros(len(values), dtype=torch.long))


def stat_of(fn: Stat, values: list[float], dtype: torch.dtype = D) -> float:
    rewards, groups = one_group(values, dtype)
    return float(fn(rewards, groups)[0])


def test_names_match_the_registries() -> None:
    assert set(SCALE_FREE_STATS) | {"std_batch"} == set(DISCRIMINATION_STATS)
    assert set(CONFIDENCE_FUNCTIONS) == set(CONFIDENCE_STATS)


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([0, 0, 1, 1], 1.0),  # μ = ½: 4μ(1 − μ) = 1
        ([0, 1, 1, 1], 0.75),  # μ = ¾: 4 · ¾ · ¼
        ([1, 1, 1, 1, 1, 1, 1, 0], 0.4375),  # seven of eight: 4 · 7/64
        ([0, 1, 2], 2 / 3),  # MAD 2/3, var 2/3: (4/9) / (2/3)
        ([0, 0, 0, 4], 0.75),  # MAD 1.5, var 3: 2.25 / 3 (a two-point group, μ = ¼)
        ([3.0, 5.0], 1.0),  # any two different rewards are an even split
    ],
)
def test_balance_hand_computed(values: list[float], expected: float) -> None:
    assert stat_of(balance_statistic, values) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([0, 0, 1, 1], 1.0),  # x = ¼: x / (1 − 3x) = 1
        ([0, 1, 1, 1], 3 / 7),  # x = 3/16: (3/16) / (7/16)
        ([0, 1, 2], 2 / 3),  # m2 = 2/3, m4 = 2/3: (4/9) / (2/3)
        ([0, 0, 0, 4], 3 / 7),  # the same two-point shape as [0, 1, 1, 1] mirrored
    ],
)
def test_bimodality_hand_computed(values: list[float], expected: float) -> None:
    assert stat_of(bimodality_statistic, values) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("values", "expected"),
    [([0, 0, 1, 1], 1.0), ([0, 1, 1, 1], 0.75), ([0, 1, 2], 8 / 9), ([0, 0, 0, 4], 0.75)],
)
def test_split_hand_computed(values: list[float], expected: float) -> None:
    # q = fraction above the mean: 1/2, 3/4, 1/3, 1/4
    assert stat_of(split_statistic, values) == pytest.approx(expected)


@pytest.mark.parametrize("fn", STATS)
def test_invariant_to_an_affine_rewrite(fn: Stat) -> None:
    cos = [0.71, 0.74, 0.78, 0.70, 0.72, 0.725, 0.77, 0.69]  # 3 of 8 above the mean
    base = stat_of(fn, cos)
    assert 0 < base < 1
    assert stat_of(fn, [(c - 0.5) / 0.5 for c in cos]) == pytest.approx(base, abs=1e-12)
    assert stat_of(fn, [3 * c + 7 for c in cos]) == pytest.approx(base, abs=1e-12)
    assert stat_of(fn, [1e-6 * c for c in cos]) == pytest.approx(base, abs=1e-12)


@pytest.mark.parametrize("fn", STATS)
def test_binary_rewards_rank_as_the_std(fn: Stat) -> None:
    # eight 0/1 rewards with k ones: σ_g grows with k(8 − k); so must the statistic
    values = [stat_of(fn, [1.0] * k + [0.0] * (8 - k)) for k in range(9)]
    assert values[0] == values[8] == 0.0  # flat
    assert values[1] < values[2] < values[3] < values[4] == pytest.approx(1.0)
    for k in range(1, 8):
        assert values[k] == pytest.approx(values[8 - k])


@pytest.mark.parametrize("fn", STATS)
def test_flat_groups_and_round_off(fn: Stat) -> None:
    # equal up to round-off: no statistic (which would be scale-free, so up to 1) but 0
    assert stat_of(fn, [0.74, 0.74 + 1e-12, 0.74 - 1e-12, 0.74]) == 0.0
    assert stat_of(fn, [1e-13, -1e-13, 0.0]) == 0.0
    assert stat_of(fn, [5.0, 5.0, 5.0]) == 0.0
    assert stat_of(fn, [0.3]) == 0.0  # a group of size 1
    assert stat_of(fn, [0.74, 0.74 + 2 ** -23], torch.float32) == 0.0  # two float32 ulps
    # a small but real difference is kept (above 1e-9 + 1e-9 |r|), at its full shape value
    small = stat_of(fn, [0.0, 0.0, 1e-6, 0.0])
    assert small > 0 and small == pytest.approx(stat_of(fn, [0.0, 0.0, 1.0, 0.0]))


def test_flat_groups_tolerance() -> None:
    rewards = torch.tensor([0.0, 1e-10, 2.0, 2.0 + 1e-9, 5.0, 5.1, 7.0], dtype=D)
    groups = Groups.of(torch.tensor([0, 0, 1, 1, 2, 2, 3]))
    # 1e-10 ≤ 1e-9; 1e-9 ≤ 1e-9 + 2e-9; 0.1 is a real spread; size 1
    assert flat_groups(rewards, groups).tolist() == [True, True, False, True]


def test_statistics_per_group_in_one_batch() -> None:
    rewards = torch.tensor([0, 0, 1, 1, 0, 1, 1, 1, 0.7, 0.7], dtype=D)
    groups = Groups.of(torch.tensor([5, 5, 5, 5, 2, 2, 2, 2, 9, 9]))
    # dense order follows sorted ids: group 2 = [0, 1, 1, 1], 5 = [0, 0, 1, 1], 9 = flat
    assert balance_statistic(rewards, groups).tolist() == pytest.approx([0.75, 1.0, 0.0])


def test_scale_free_discrimination() -> None:
    stat = torch.tensor([0.0, 0.25, 1.0], dtype=D)
    bound = 9 ** 0.25
    # p = ½: s^(¼): 0 -> floor 9^−½ = 1/3, 0.25 -> 0.7071, 1 -> 1
    got = scale_free_discrimination(stat, 0.5, bound).tolist()
    assert got == pytest.approx([1 / 3, 0.25 ** 0.25, 1.0])
    # p = 0: GRPO's scaling, D ≡ 1, also for the flat group
    assert scale_free_discrimination(stat, 0.0, bound).tolist() == [1.0, 1.0, 1.0]
    # p = 4: s² = 0.0625 -> floor 1/3
    assert scale_free_discrimination(stat, 4.0, bound).tolist() == pytest.approx([1 / 3] * 2 + [1])


def test_balance_gives_the_first_readings_weights_on_binary_groups() -> None:
    # groups of four 0/1 rewards with 1, 2, 3 ones: σ_g ∝ sqrt(μ(1 − μ)) and b = 4μ(1 − μ),
    # so D ∝ σ^½ for both (no clip here: σ/σ̄ ∈ [0.95, 1.1]); with confidence off the weights
    # agree: D = [0.75^¼, 1, 0.75^¼] / mean over the rows
    rewards = torch.tensor([1, 0, 0, 0, 1, 1, 0, 0, 1, 1, 1, 0], dtype=D)
    groups = torch.tensor([0] * 4 + [1] * 4 + [2] * 4)
    ref, mask = torch.zeros(12, 1, dtype=D), torch.ones(12, 1, dtype=torch.bool)
    d = 0.75 ** 0.25
    mean = (2 * d + 1) / 3
    expected = [d / mean] * 4 + [1 / mean] * 4 + [d / mean] * 4
    balance, _ = hargo_weights(rewards, groups, ref, mask, confidence=False)
    first, _ = hargo_weights(rewards, groups, ref, mask, confidence=False,
                             discrimination_stat="std_batch")
    assert balance.tolist() == pytest.approx(expected)
    assert first.tolist() == pytest.approx(expected)


# ---------------------------------------------------------------- confidence

PAD = math.nan  # padding must be ignored, even NaN
ROWS = torch.tensor([
    [-0.01, -2.0, -0.5, -0.02],  # two uncertain tokens among four
    [-0.01, -0.05, PAD, PAD],  # every token surer than 0.9
    [PAD, PAD, PAD, PAD],  # no completion token
], dtype=D)
ROW_MASK = torch.tensor([[True] * 4, [True, True, False, False], [False] * 4])


@pytest.mark.parametrize(
    ("fn", "expected"),
    [
        (token_mean_confidence, [-2.53 / 4, -0.03, 0.0]),
        (uncertain_mean_confidence, [-1.25, -0.05, 0.0]),  # fallback: the least sure token
        (sum_confidence, [-2.53, -0.06, 0.0]),
        (min_confidence, [-2.0, -0.05, 0.0]),
    ],
)
def test_confidence_statistics_hand_computed(fn: Conf, expected: list[float]) -> None:
    c, has_tokens = fn(ROWS, ROW_MASK, 0.9)
    assert c.tolist() == pytest.approx(expected)
    assert has_tokens.tolist() == [True, True, False]


def test_uncertain_mean_threshold() -> None:
    # τ = 0.5 (log = −0.693): only −2.0 is uncertain in row 0; row 1 falls back to its min
    c, _ = uncertain_mean_confidence(ROWS, ROW_MASK, 0.5)
    assert c.tolist()[:2] == pytest.approx([-2.0, -0.05])
    # the fallback sits above log τ, every uncertain mean below: the order is kept
    assert c[1] > math.log(0.5) > c[0]


def test_scaffold_tokens_leave_uncertain_mean_unchanged_and_dilute_the_token_mean() -> None:
    # a yes/no group: a right answer the reference is sure of, a wrong one it finds unlikely,
    # each a 2-token answer; then the same answers after 10 scaffold tokens at −0.01
    answers = [[-0.05, -0.01], [-0.6, -0.01]]
    scaffolded = [[-0.01] * 10 + a for a in answers]
    rewards, groups = [1.0, 0.0], [0, 0]
    # uncertain_mean: c = [−0.05 (fallback: no token below log 0.9), −0.6], both times;
    # u_0 = 0.275, C = [e^−β 0.275] * 2 with β = ½ (A signs +, −), unclipped
    for stat in ("uncertain_mean", "min", "sum"):
        plain = hargo_weights_of_rows(rewards, groups, answers, confidence_stat=stat)
        more = hargo_weights_of_rows(rewards, groups, scaffolded, confidence_stat=stat)
        assert more["confidence_factor"] == pytest.approx(plain["confidence_factor"],
                                                          abs=1e-12), stat
    plain = hargo_weights_of_rows(rewards, groups, answers)
    more = hargo_weights_of_rows(rewards, groups, scaffolded)
    assert plain["confidence"] == more["confidence"] == pytest.approx([-0.05, -0.6])
    assert plain["confidence_factor"] == pytest.approx([math.exp(-0.1375)] * 2)
    # token mean: c = [−0.03, −0.305] -> [−0.16/12, −0.71/12]: u shrinks by 2/12
    plain = hargo_weights_of_rows(rewards, groups, answers, confidence_stat="token_mean")
    more = hargo_weights_of_rows(rewards, groups, scaffolded, confidence_stat="token_mean")
    u_plain = plain["confidence"][0] - plain["confidence"][1]
    u_more = more["confidence"][0] - more["confidence"][1]
    assert u_plain == pytest.approx(0.275)
    assert u_more == pytest.approx(0.275 * 2 / 12)
    assert more["confidence_factor"] == pytest.approx([math.exp(-0.1375 / 12)] * 2)


def test_standardised() -> None:
    groups = Groups.of(torch.tensor([0, 0, 1, 1, 1, 2, 2]))
    # group 0: u = [1, −1], sd 1; group 1: u = [1, 0, −1], sd sqrt(2/3); group 2: round-off
    u = torch.tensor([1.0, -1.0, 1.0, 0.0, -1.0, 1e-12, -1e-12], dtype=D)
    has = torch.ones(7, dtype=torch.bool)
    s = math.sqrt(1.5)
    assert standardised(u, has, groups).tolist() == pytest.approx([1, -1, s, 0, -s, 0, 0])
    # a response without tokens is neither counted nor changed
    has[1] = False
    u[1] = 0.0
    assert standardised(u, has, groups).tolist()[:2] == pytest.approx([1.0, 0.0])


def test_standardise_option_in_the_signals() -> None:
    rewards = torch.tensor([1.0, 0.0, 0.0], dtype=D)
    ref = torch.tensor([[-1.0], [-2.0], [-3.0]], dtype=D)
    mask = torch.ones(3, 1, dtype=torch.bool)
    # c = [−1, −2, −3], u = [1, 0, −1], sd = sqrt(2/3): u / sd = [1.2247, 0, −1.2247]
    # A signs [+, −, −]; surprise −sign(A) u = [−1.2247, 0, −1.2247]
    sig = hargo_signals(rewards, torch.zeros(3, dtype=torch.long), ref, mask,
                        confidence_standardise=True)
    s = math.sqrt(1.5)
    assert sig.surprise.tolist() == pytest.approx([-s, 0.0, -s])


def test_rows_helper_matches_the_tensor_call() -> None:
    rewards = [1.0, 0.0, 0.6, 0.4]
    rows = [[-0.1, -0.3], [-1.0], [-1.0, -1.0], [-0.5, -0.5]]
    ref = torch.tensor([[-0.1, -0.3], [-1.0, 0.0], [-1.0, -1.0], [-0.5, -0.5]], dtype=D)
    mask = torch.tensor([[True, True], [True, False], [True, True], [True, True]])
    want, _ = hargo_weights(torch.tensor(rewards, dtype=D), torch.tensor([0, 0, 1, 1]), ref,
                            mask, discrimination_stat="bimodality")
    got = hargo_weights_of_rows(rewards, [0, 0, 1, 1], rows, discrimination_stat="bimodality")
    assert got["weights"] == pytest.approx(want.tolist())
    assert set(got) == {"advantages", "contrast", "discrimination", "confidence",
                        "confidence_factor", "weights", "stats"}
