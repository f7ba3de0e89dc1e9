"""DPO (pairs from groups by reward) and SFT losses."""

from __future__ import annotations

import math

import pytest
import torch

from hargo_hpc.algorithms import dpo_loss, dpo_pairs, sft_loss

D = torch.float64


def test_pairs_best_vs_worst_ties_skipped() -> None:
    # group 0: best idx 1 (0.9), worst idx 0 (0.2); group 1: tie -> no pair; group 2: size 1
    rewards = torch.tensor([0.2, 0.9, 0.5, 1.0, 1.0, 3.0])
    groups = torch.tensor([0, 0, 0, 1, 1, 2])
    chosen, rejected = dpo_pairs(rewards, groups)
    assert chosen.tolist() == [1] and rejected.tolist() == [0]


def test_pairs_first_of_equal_best() -> None:
    chosen, rejected = dpo_pairs(torch.tensor([0.0, 1.0, 1.0, 0.0]), torch.tensor([4, 4, 4, 4]))
    assert chosen.tolist() == [1] and rejected.tolist() == [0]


def test_dpo_value_and_gradient() -> None:
    # sequence log-probs: policy y_w = −1.0, y_l = −3.0; reference y_w = −2.0, y_l = −2.5
    # margin = β [(−1 + 2) − (−3 + 2.5)] = 0.1 · 1.5 = 0.15;  loss = −log σ(0.15)
    logprobs = torch.tensor([[-1.0, -2.0], [-0.5, -0.5], [-9.0, -9.0]], dtype=D,
                            requires_grad=True)
    ref = torch.tensor([[-1.5, -1.0], [-1.0, -1.0], [0.0, 0.0]], dtype=D)
    mask = torch.tensor([[True, True], [True, True], [True, False]])
    rewards = torch.tensor([0.0, 1.0, 0.5])  # response 2 is neither best nor worst
    value, stats = dpo_loss(logprobs, ref, mask, rewards, torch.tensor([0, 0, 0]), beta=0.1)
    assert float(value.detach()) == pytest.approx(math.log1p(math.exp(-0.15)))
    assert stats["pairs"] == 1.0 and stats["reward_accuracy"] == 1.0
    assert stats["margin"] == pytest.approx(0.15)
    (grad,) = torch.autograd.grad(value, logprobs)
    assert torch.all(grad[1] < 0) and torch.all(grad[0] > 0)  # raise y_w, lower y_l
    assert torch.all(grad[2] == 0)


def test_dpo_without_pairs_is_zero() -> None:
    logprobs = torch.zeros(2, 2, requires_grad=True)
    value, stats = dpo_loss(logprobs, torch.zeros(2, 2), torch.ones(2, 2, dtype=torch.bool),
                            torch.tensor([1.0, 1.0]), torch.tensor([0, 0]))
    assert float(value.detach()) == 0.0 and stats["pairs"] == 0.0
    value.backward()


def test_dpo_errors() -> None:
    with pytest.raises(ValueError, match="ref_logprobs"):
        dpo_loss(torch.zeros(2, 2), torch.zeros(2, 3), torch.ones(2, 2, dtype=torch.bool),
                 torch.tensor([1.0, 0.0]), torch.tensor([0, 0]))
    with pytest.raises(ValueError, match="rewards contains NaN"):
        dpo_loss(torch.zeros(2, 2), torch.zeros(2, 2), torch.ones(2, 2, dtype=torch.bool),
                 torch.tensor([math.nan, 0.0]), torch.tensor([0, 0]))


def test_sft_loss() -> None:
    logprobs = torch.tensor([[-1.0, -2.0], [-3.0, math.nan]], dtype=D)  # NaN is padding
    mask = torch.tensor([[True, True], [True, False]])
    value, stats = sft_loss(logprobs, mask)
    assert float(value) == pytest.approx((1 + 2 + 3) / 3)
    value, _ = sft_loss(logprobs, mask, agg="seq-mean-token-mean")
    assert float(value) == pytest.approx((1.5 + 3) / 2)
    value, _ = sft_loss(logprobs, mask, weights=torch.tensor([2.0, 0.0], dtype=D))
    assert float(value) == pytest.approx(2 * (1 + 2) / 3)
    assert stats["tokens"] == 3.0
