"""Advantage estimators: hand-computed values, invariances, edge cases."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from hargo_hpc.algorithms import ESTIMATORS, compute_advantages

from .strategies import grouped_rewards

EPS = 1e-6
# group 7 = {1, 0, 0, 1}: mean 0.5, unbiased std sqrt((4 · 0.25) / 3) = sqrt(1/3)
# group 3 = {2, 4, 6}:    mean 4,   unbiased std sqrt((4 + 0 + 4) / 2) = 2
REWARDS = torch.tensor([1.0, 2.0, 0.0, 4.0, 0.0, 6.0, 1.0], dtype=torch.float64)
GROUPS = torch.tensor([7, 3, 7, 3, 7, 3, 7])
CENTRED = [0.5, -2.0, -0.5, 0.0, -0.5, 2.0, 0.5]  # R − mean_g R
S7 = math.sqrt(1 / 3)


def adv(name: str, **options: object) -> list[float]:
    return compute_advantages(name, REWARDS, GROUPS, **options).tolist()


def test_grpo_group_std() -> None:
    expected = [0.5 / (S7 + EPS), -2 / (2 + EPS), -0.5 / (S7 + EPS), 0.0,
                -0.5 / (S7 + EPS), 2 / (2 + EPS), 0.5 / (S7 + EPS)]
    assert adv("grpo") == pytest.approx(expected, abs=1e-9)


def test_grpo_batch_std_and_none() -> None:
    # batch mean 14/7 = 2; squares 1+0+4+4+4+16+1 = 30; unbiased var 30/6 = 5
    batch_std = math.sqrt(5)
    assert adv("grpo", scale="batch") == pytest.approx(
        [c / (batch_std + EPS) for c in CENTRED], abs=1e-9
    )
    assert adv("grpo", scale="none") == pytest.approx(CENTRED, abs=1e-12)
    with pytest.raises(ValueError, match="scale"):
        adv("grpo", scale="bogus")


def test_dr_grpo() -> None:
    assert adv("dr_grpo") == pytest.approx(CENTRED, abs=1e-12)


def test_rloo() -> None:
    # group 7: R=1 -> 1 − mean{0,0,1} = 2/3; R=0 -> 0 − mean{1,0,1} = −2/3
    # group 3: 2 − mean{4,6} = −3; 4 − mean{2,6} = 0; 6 − mean{2,4} = 3
    assert adv("rloo") == pytest.approx([2 / 3, -3, -2 / 3, 0, -2 / 3, 3, 2 / 3], abs=1e-12)


def test_reinforce_pp() -> None:
    # (R − 2) / sqrt(5), groups ignored
    expected = [(r - 2) / (math.sqrt(5) + EPS) for r in [1, 2, 0, 4, 0, 6, 1]]
    assert adv("reinforce_pp") == pytest.approx(expected, abs=1e-9)


def test_reinforce_pp_baseline() -> None:
    # centred values have mean 0; squares .25+4+.25+0+.25+4+.25 = 9; var 9/6 = 1.5
    expected = [c / (math.sqrt(1.5) + EPS) for c in CENTRED]
    assert adv("reinforce_pp_baseline") == pytest.approx(expected, abs=1e-9)


def test_gpg_alpha_and_threshold() -> None:
    rewards = torch.cat([REWARDS, torch.tensor([3.0, 3.0], dtype=torch.float64)])
    groups = torch.cat([GROUPS, torch.tensor([11, 11])])
    # B = 9, M = 2 (group 11 has zero variance): α = 9 / 7
    got = compute_advantages("gpg", rewards, groups).tolist()
    assert got == pytest.approx([9 / 7 * c for c in CENTRED] + [0.0, 0.0], abs=1e-12)
    # threshold 1: group 7 (std 0.577) is invalid too, M = 6, α = 9 / 3 = 3
    got = compute_advantages("gpg", rewards, groups, std_threshold=1.0).tolist()
    assert got == pytest.approx([0, -6, 0, 0, 0, 6, 0, 0, 0], abs=1e-12)
    # scale by std: α (R − mean) / (std + ε)
    got = compute_advantages("gpg", rewards, groups, scale_by_std=True).tolist()
    assert got[1] == pytest.approx(9 / 7 * -2 / (2 + EPS))


def test_gpg_all_invalid_gives_zero() -> None:
    got = compute_advantages("gpg", torch.tensor([1.0, 1.0]), torch.tensor([0, 0]))
    assert got.tolist() == [0.0, 0.0]


@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_group_of_size_one(name: str) -> None:
    got = compute_advantages(name, torch.tensor([5.0]), torch.tensor([0]))
    assert got.tolist() == [0.0]


@pytest.mark.parametrize("name", ["grpo", "dr_grpo", "rloo", "gpg"])
def test_singleton_group_next_to_others(name: str) -> None:
    got = compute_advantages(name, torch.tensor([1.0, 0.0, 7.0]), torch.tensor([0, 0, 1]))
    assert got[2] == 0.0 and got[0] > 0 > got[1]


def test_empty_batch() -> None:
    got = compute_advantages("grpo", torch.zeros(0), torch.zeros(0, dtype=torch.long))
    assert got.shape == (0,)


def test_integer_rewards_accepted() -> None:
    got = compute_advantages("dr_grpo", torch.tensor([1, 0]), torch.tensor([0, 0]))
    assert got.tolist() == [0.5, -0.5]


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_nonfinite_rewards_error(bad: float) -> None:
    with pytest.raises(ValueError, match="rewards contains NaN or inf"):
        compute_advantages("grpo", torch.tensor([1.0, bad]), torch.tensor([0, 0]))


def test_shape_errors_name_the_tensor() -> None:
    with pytest.raises(ValueError, match="group_index"):
        compute_advantages("grpo", torch.tensor([1.0, 0.0]), torch.tensor([0, 0, 0]))
    with pytest.raises(ValueError, match="rewards must be 1-D"):
        compute_advantages("grpo", torch.ones(2, 2), torch.tensor([0, 0]))
    with pytest.raises(ValueError, match="group_index must be an integer"):
        compute_advantages("grpo", torch.tensor([1.0, 0.0]), torch.tensor([0.0, 0.0]))


def test_unknown_estimator_lists_valid() -> None:
    with pytest.raises(ValueError,
                       match=r"unknown advantage estimator 'nope' \(registered: .*grpo"):
        compute_advantages("nope", torch.tensor([1.0]), torch.tensor([0]))


def test_no_gradient() -> None:
    rewards = torch.tensor([1.0, 0.0], requires_grad=True)
    assert not compute_advantages("grpo", rewards, torch.tensor([0, 0])).requires_grad


# ---------------------------------------------------------------- properties

GROUP_RELATIVE = ["grpo", "dr_grpo", "rloo", "gpg", "reinforce_pp_baseline"]
FAST = settings(max_examples=40, deadline=None)


@FAST
@given(batch=grouped_rewards(), shift=st.integers(-8, 8).map(lambda k: k / 4),
       name=st.sampled_from(GROUP_RELATIVE), pick=st.integers(0, 100))
def test_invariant_to_shifting_a_group(
    batch: tuple[torch.Tensor, torch.Tensor], shift: float, name: str, pick: int
) -> None:
    rewards, groups = batch
    target = groups.unique()[pick % groups.unique().numel()]
    shifted = torch.where(groups == target, rewards + shift, rewards)
    before = compute_advantages(name, rewards, groups)
    after = compute_advantages(name, shifted, groups)
    torch.testing.assert_close(after, before, atol=1e-6, rtol=0)


@FAST
@given(batch=grouped_rewards(), name=st.sampled_from(sorted(ESTIMATORS)))
def test_zero_variance_groups_give_zero(
    batch: tuple[torch.Tensor, torch.Tensor], name: str
) -> None:
    rewards, groups = batch
    target = groups[0]
    flat = torch.where(groups == target, torch.full_like(rewards, 0.75), rewards)
    got = compute_advantages(name, flat, groups)
    if name == "reinforce_pp":
        return  # batch-global: no group baseline, the group's advantage need not be 0
    assert torch.all(got[groups == target].abs() < 1e-9)


@FAST
@given(batch=grouped_rewards(), name=st.sampled_from(sorted(ESTIMATORS)), data=st.data())
def test_permuting_responses_permutes_advantages(
    batch: tuple[torch.Tensor, torch.Tensor], name: str, data: st.DataObject
) -> None:
    rewards, groups = batch
    order = torch.tensor(data.draw(st.permutations(list(range(rewards.numel())))))
    base = compute_advantages(name, rewards, groups)
    permuted = compute_advantages(name, rewards[order], groups[order])
    torch.testing.assert_close(permuted, base[order], atol=1e-9, rtol=1e-9)


@FAST
@given(batch=grouped_rewards())
def test_grpo_group_advantages_have_zero_mean(batch: tuple[torch.Tensor, torch.Tensor]) -> None:
    rewards, groups = batch
    got = compute_advantages("grpo", rewards, groups)
    for g in groups.unique():
        assert abs(float(got[groups == g].sum())) < 1e-6


def test_gpg_max_alpha_caps_the_rescaling() -> None:
    # groups: [1, 0] (valid, centred ±0.5) and [1, 1], [0, 0], [2, 2] (zero variance):
    # B = 8, M = 6, α = 8 / 2 = 4; capped at 2 → advantages ±1.0 on the valid group.
    rewards = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 2.0, 2.0])
    group_index = torch.tensor([0, 0, 1, 1, 2, 2, 3, 3])
    free = compute_advantages("gpg", rewards, group_index)
    capped = compute_advantages("gpg", rewards, group_index, max_alpha=2.0)
    assert free[:2].tolist() == [2.0, -2.0]  # 4 × ±0.5
    assert capped[:2].tolist() == [1.0, -1.0]  # 2 × ±0.5
    assert capped[2:].abs().sum() == 0
