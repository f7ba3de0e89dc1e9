"""DAPO helpers: dynamic-sampling filter and overlong reward shaping."""

from __future__ import annotations

import math

import pytest
import torch

from hargo_hpc.algorithms import dynamic_sampling_filter, overlong_penalty


def test_dynamic_sampling_drops_flat_groups() -> None:
    # group 0 all 1 (dropped), group 1 mixed (kept), group 2 a single response (dropped)
    rewards = torch.tensor([1.0, 1.0, 1.0, 0.0, 1.0, 0.5])
    groups = torch.tensor([0, 0, 0, 1, 1, 2])
    keep, stats = dynamic_sampling_filter(rewards, groups)
    assert keep.tolist() == [False, False, False, True, True, False]
    assert stats["dropped_group_fraction"] == pytest.approx(2 / 3)
    assert stats["dropped_response_fraction"] == pytest.approx(4 / 6)
    assert stats["kept_groups"] == 1.0


def test_dynamic_sampling_tolerance() -> None:
    rewards = torch.tensor([0.80, 0.81, 0.2, 0.9])
    groups = torch.tensor([5, 5, 6, 6])
    keep, _ = dynamic_sampling_filter(rewards, groups, tol=0.05)
    assert keep.tolist() == [False, False, True, True]


def test_dynamic_sampling_rejects_nan() -> None:
    with pytest.raises(ValueError, match="rewards contains NaN"):
        dynamic_sampling_filter(torch.tensor([math.nan, 1.0]), torch.tensor([0, 0]))


def test_overlong_penalty_piecewise() -> None:
    # L_max = 10, L_cache = 4: free up to 6, then (6 − |y|) / 4, −1 beyond 10; factor 0.5
    got = overlong_penalty(torch.tensor([5, 6, 7, 10, 11]), max_length=10, buffer=4, factor=0.5)
    assert got.tolist() == pytest.approx([0.0, 0.0, 0.5 * -1 / 4, 0.5 * -4 / 4, -0.5])


def test_overlong_penalty_without_buffer() -> None:
    got = overlong_penalty(torch.tensor([10, 11]), max_length=10, buffer=0)
    assert got.tolist() == [0.0, -1.0]


def test_overlong_penalty_bad_arguments() -> None:
    with pytest.raises(ValueError, match="buffer"):
        overlong_penalty(torch.tensor([1]), max_length=10, buffer=11)
    with pytest.raises(ValueError, match="lengths must be 1-D"):
        overlong_penalty(torch.ones(2, 2), max_length=10, buffer=2)
