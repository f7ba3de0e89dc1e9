"""DAPO's batch helpers (Yu et al., "DAPO", arXiv 2503.14476): dynamic sampling and overlong
reward shaping. Clip-higher and the token-mean loss live in `losses.policy_loss`."""

from __future__ import annotations

import torch
from torch import Tensor

from hargo_hpc.algorithms._checks import as_group_index, as_rewards
from hargo_hpc.algorithms.groups import Groups


def dynamic_sampling_filter(
    rewards: Tensor, group_index: Tensor, *, tol: float = 0.0
) -> tuple[Tensor, dict[str, float]]:
    """Keep-mask [B] that drops every group whose rewards are all equal (max − min ≤ `tol`).

    Such a group has zero advantage under every group-relative estimator and only dilutes the
    batch. A group of size 1 counts as all-equal. Stats: dropped_group_fraction,
    dropped_response_fraction, kept_groups. (DAPO then samples more prompts until the batch is
    full; that is the trainer's job.)
    """
    rewards = as_rewards(rewards)
    index = as_group_index(group_index, rewards.shape[0])
    if rewards.numel() == 0:
        empty = {"dropped_group_fraction": 0.0, "dropped_response_fraction": 0.0,
                 "kept_groups": 0.0}
        return torch.zeros(0, dtype=torch.bool), empty
    groups = Groups.of(index)
    informative = groups.spread(rewards) > tol
    keep = informative[groups.inverse]
    stats = {
        "dropped_group_fraction": 1.0 - float(informative.float().mean()),
        "dropped_response_fraction": 1.0 - float(keep.float().mean()),
        "kept_groups": float(informative.sum()),
    }
    return keep, stats


def overlong_penalty(
    lengths: Tensor, *, max_length: int, buffer: int, factor: float = 1.0
) -> Tensor:
    """Soft overlong punishment R_len [B] (DAPO eq. 13), added to the task reward:

    R_len(y) = 0                                 if |y| ≤ L_max − L_cache
             = ((L_max − L_cache) − |y|) / L_cache   if L_max − L_cache < |y| ≤ L_max
             = −1                                if |y| > L_max
    times `factor`. L_max = `max_length`, L_cache = `buffer` (DAPO: 20480 and 4096, factor 1).
    `buffer = 0` turns the shaping off (only |y| > L_max is punished, with −factor).
    """
    if lengths.dim() != 1:
        raise ValueError(f"lengths must be 1-D [B], got shape {tuple(lengths.shape)}")
    if max_length <= 0 or not 0 <= buffer <= max_length:
        raise ValueError(
            f"need max_length > 0 and 0 <= buffer <= max_length, got {max_length}, {buffer}"
        )
    size = lengths.to(torch.float32)
    start = float(max_length - buffer)
    ramp = (start - size) / buffer if buffer else torch.zeros_like(size)
    penalty = torch.where(size <= start, torch.zeros_like(size), ramp)
    penalty = torch.where(size > max_length, torch.full_like(size, -1.0), penalty)
    return factor * penalty
