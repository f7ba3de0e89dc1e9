"""The trainer's reward shaping (`phases.shape_rewards`): DAPO's overlong term per row, each
row against its own task's generation limit; hand-computed values."""

from __future__ import annotations

import pytest
import torch

from hargo_hpc.algorithms.presets import PRESETS
from hargo_hpc.train.phases import shape_rewards
from hargo_hpc.train.rollout.rewards import RewardBatch


def batch(rewards: list[float]) -> RewardBatch:
    return RewardBatch(rewards=rewards, scored=[True] * len(rewards),
                       records=[None] * len(rewards), wait_s=0.0)


def test_dapo_punishes_each_row_against_its_own_tasks_limit():
    # yes/no rows under an 8-token budget, kernels under 320: L_cache = int(0.2 L_max) = 1
    # and 64, so the penalty starts after 7 and 256 tokens
    lengths = torch.tensor([5, 8, 200, 300])
    shaped = shape_rewards(PRESETS["dapo"], batch([1.0, 0.0, 10.0, 5.0]), lengths,
                           [8, 8, 320, 320], torch.device("cpu"))
    # 8 tokens: (7 - 8) / 1 = -1; 300 tokens: (256 - 300) / 64 = -0.6875
    assert shaped.overlong.tolist() == pytest.approx([0.0, -1.0, 0.0, -0.6875])
    assert shaped.shaped.tolist() == pytest.approx([1.0, -1.0, 10.0, 4.3125])
    assert shaped.task.tolist() == [1.0, 0.0, 10.0, 5.0]


def test_without_a_buffer_the_rewards_are_the_tasks():
    lengths = torch.tensor([8, 320])
    shaped = shape_rewards(PRESETS["grpo"], batch([0.5, -40.0]), lengths, [8, 320],
                           torch.device("cpu"))
    assert shaped.overlong.tolist() == [0.0, 0.0]
    assert shaped.shaped.tolist() == [0.5, -40.0]
