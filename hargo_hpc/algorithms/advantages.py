"""Outcome-reward advantage estimators, each registered by name in `registry.py`.

Each estimator is a pure function `(rewards [B], groups, **options) -> advantages [B]` with
explicit groups (see `groups.py`). `compute_advantages(name, rewards, group_index, **options)`
validates the inputs, looks the estimator up and calls it. Advantages carry no gradient.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

from hargo_hpc.algorithms import registry
from hargo_hpc.algorithms._checks import as_group_index, as_rewards
from hargo_hpc.algorithms.groups import Groups


def compute_advantages(
    name: str, rewards: Tensor, group_index: Tensor, **options: object
) -> Tensor:
    """Advantages [B] of the estimator `name` (a name in `registry.ESTIMATORS`, or a
    "module:function" spec) for rewards [B].

    Raises ValueError on an unknown name, NaN/inf rewards or mismatched shapes.
    """
    estimator = registry.estimator(name)
    rewards = as_rewards(rewards).detach()
    index = as_group_index(group_index, rewards.shape[0])
    if rewards.numel() == 0:
        return rewards.clone()
    return estimator(rewards, Groups.of(index), **options)


def _batch_std(values: Tensor) -> Tensor:
    """Unbiased std over the whole batch; 0 for a batch of one."""
    return values.std() if values.numel() > 1 else torch.zeros((), dtype=values.dtype)


def grpo(
    rewards: Tensor,
    groups: Groups,
    *,
    scale: Literal["group", "batch", "none"] = "group",
    eps: float = 1e-6,
) -> Tensor:
    """GRPO (DeepSeekMath, arXiv 2402.03300): A_i = (R_i − mean_g R) / (σ + ε).

    σ = std_g R (the group's std, the paper's choice; `scale="group"`), std_B R (the batch's
    std, `scale="batch"`, as in "Tricks or Traps", arXiv 2508.08221) or 1 (`scale="none"`,
    then ε is not added: this is Dr.GRPO). A zero-variance group gives A = 0.
    """
    centred = groups.centred(rewards)
    if scale == "group":
        return centred / (groups.std(rewards)[groups.inverse] + eps)
    if scale == "batch":
        return centred / (_batch_std(rewards) + eps)
    if scale == "none":
        return centred
    raise ValueError(f"grpo: unknown scale {scale!r} (valid: group, batch, none)")


def dr_grpo(rewards: Tensor, groups: Groups) -> Tensor:
    """Dr.GRPO (Liu et al., "Understanding R1-Zero-Like Training", arXiv 2503.20783):
    A_i = R_i − mean_g R (no division by the group std)."""
    return groups.centred(rewards)


def rloo(rewards: Tensor, groups: Groups) -> Tensor:
    """RLOO (Ahmadian et al., arXiv 2402.14740; Kool et al. 2019):
    A_i = R_i − (1 / (n_g − 1)) Σ_{j∈g, j≠i} R_j  =  n_g / (n_g − 1) · (R_i − mean_g R).

    Computed in the second form, so a zero-variance group gives exactly 0. A group of size 1
    has no leave-one-out baseline: its advantage is 0.
    """
    n = groups.sizes[groups.inverse].to(rewards.dtype)
    scale = n / (n - 1).clamp(min=1)
    return torch.where(n > 1, scale * groups.centred(rewards), torch.zeros_like(rewards))


def reinforce_pp(rewards: Tensor, groups: Groups, *, eps: float = 1e-6) -> Tensor:
    """REINFORCE++ (Hu, arXiv 2501.03262): batch-global normalisation, no group baseline:
    A_i = (R_i − mean_B R) / (std_B R + ε).

    (With outcome rewards, γ = 1 and a KL penalty folded into R beforehand — see
    `losses.kl_penalized_rewards`.) Groups are validated but not used.
    """
    del groups
    return (rewards - rewards.mean()) / (_batch_std(rewards) + eps)


def reinforce_pp_baseline(rewards: Tensor, groups: Groups, *, eps: float = 1e-6) -> Tensor:
    """REINFORCE++-baseline (Hu, arXiv 2501.03262 v3+): subtract the group mean first, then
    normalise over the batch: a_i = R_i − mean_g R, A_i = (a_i − mean_B a) / (std_B a + ε)."""
    centred = groups.centred(rewards)
    return (centred - centred.mean()) / (_batch_std(centred) + eps)


def gpg(
    rewards: Tensor,
    groups: Groups,
    *,
    std_threshold: float = 0.0,
    scale_by_std: bool = False,
    max_alpha: float | None = None,
    eps: float = 1e-6,
) -> Tensor:
    """GPG (Chu et al., "GPG: A Simple and Strong Reinforcement Learning Baseline",
    arXiv 2504.02546): A_i = α · (R_i − mean_g R) / F, α = B / (B − M).

    M counts the responses of *invalid* groups: groups whose std σ_g ≤ `std_threshold` (with the
    default 0 these are exactly the zero-variance groups, including groups of size 1); invalid
    groups get A = 0. F = σ_g + ε if `scale_by_std` else 1. α rescales the batch-mean gradient
    back to the valid responses; if every group is invalid, all advantages are 0.

    `std_threshold` is this project's extension (the paper's threshold is on the valid
    fraction: its code resamples until (B − M)/B ≥ 0.5, so α ≤ 2); `max_alpha` caps α for
    trainers that do not resample (e.g. 2.0 to match that bound; None = no cap).
    """
    std = groups.std(rewards)
    valid = (std > std_threshold)[groups.inverse]
    centred = groups.centred(rewards)
    if scale_by_std:
        centred = centred / (std[groups.inverse] + eps)
    batch = rewards.numel()
    kept = int(valid.sum())
    alpha = batch / kept if kept else 1.0
    if max_alpha is not None:
        alpha = min(alpha, max_alpha)
    return torch.where(valid, alpha * centred, torch.zeros_like(centred))
