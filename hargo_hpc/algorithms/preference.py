"""Losses that need no advantage: DPO on pairs picked from a group by reward, and SFT."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from hargo_hpc.algorithms._checks import (
    as_group_index,
    as_mask,
    as_rewards,
    check_batch,
    check_finite,
    check_same_shape,
)
from hargo_hpc.algorithms.groups import Groups
from hargo_hpc.algorithms.losses import aggregate


def dpo_pairs(rewards: Tensor, group_index: Tensor) -> tuple[Tensor, Tensor]:
    """(chosen, rejected) response indices, one pair per group: the best against the worst
    response by reward. Groups whose best and worst rewards are equal (ties, including groups
    of size 1) give no pair. Among equal best (worst) rewards the first in the batch is taken.
    """
    rewards = as_rewards(rewards)
    index = as_group_index(group_index, rewards.shape[0])
    if rewards.numel() == 0:
        empty = torch.zeros(0, dtype=torch.long)
        return empty, empty.clone()
    groups = Groups.of(index)
    best, worst = groups.max(rewards), groups.min(rewards)
    position = torch.arange(rewards.numel(), device=rewards.device)
    big = torch.full_like(position, rewards.numel())
    none = torch.full((groups.num,), rewards.numel(), device=rewards.device)

    def first(where: Tensor) -> Tensor:  # [num]: the first position in each group where true
        return none.scatter_reduce(0, groups.inverse, torch.where(where, position, big), "amin")

    first_best = first(rewards == best[groups.inverse])
    first_worst = first(rewards == worst[groups.inverse])
    has_pair = best > worst
    return first_best[has_pair], first_worst[has_pair]


def dpo_loss(
    logprobs: Tensor,
    ref_logprobs: Tensor,
    mask: Tensor,
    rewards: Tensor,
    group_index: Tensor,
    *,
    beta: float = 0.1,
) -> tuple[Tensor, dict[str, float]]:
    """DPO (Rafailov et al., arXiv 2305.18290) on pairs from `dpo_pairs`:

    loss = mean_pairs −log σ( β [ (log π(y_w) − log π_ref(y_w)) − (log π(y_l) − log π_ref(y_l)) ] )

    with sequence log-probs log π(y) = Σ_t m_t log π_t over the completion tokens. A batch
    without any pair gives loss 0 (graph kept, zero gradient). Stats: pairs, reward_accuracy
    (share of pairs with positive margin), margin (mean β·[...]), chosen_reward,
    rejected_reward (mean implicit rewards β (log π − log π_ref)).
    """
    mask = as_mask(mask, logprobs, "logprobs")
    check_same_shape(("logprobs", logprobs), ("ref_logprobs", ref_logprobs))
    rewards = as_rewards(rewards)
    check_batch(rewards, "rewards", logprobs.shape[0], "logprobs")
    check_finite(logprobs, "logprobs", mask)
    check_finite(ref_logprobs, "ref_logprobs", mask)
    chosen, rejected = dpo_pairs(rewards, group_index)
    zero = torch.zeros_like(logprobs)
    seq = torch.where(mask, logprobs, zero).sum(dim=-1)
    ref_seq = torch.where(mask, ref_logprobs.detach(), zero.detach()).sum(dim=-1)
    implicit = beta * (seq - ref_seq)
    if chosen.numel() == 0:
        loss = seq.sum() * 0.0
        return loss, {"loss": 0.0, "pairs": 0.0, "reward_accuracy": 0.0, "margin": 0.0,
                      "chosen_reward": 0.0, "rejected_reward": 0.0}
    margin = implicit[chosen] - implicit[rejected]
    loss = F.softplus(-margin).mean()  # −log σ(x) = softplus(−x)
    stats = {
        "loss": float(loss.detach()),
        "pairs": float(chosen.numel()),
        "reward_accuracy": float((margin.detach() > 0).float().mean()),
        "margin": float(margin.detach().mean()),
        "chosen_reward": float(implicit[chosen].detach().mean()),
        "rejected_reward": float(implicit[rejected].detach().mean()),
    }
    return loss, stats


def sft_loss(
    logprobs: Tensor,
    mask: Tensor,
    *,
    agg: str = "token-mean",
    weights: Tensor | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """Supervised fine-tuning: negative log-likelihood of the target tokens,
    loss = aggregate(−log π_it · w_i, m, agg) (token-mean: −Σ m log π / Σ m).

    Stats: loss, nll (token-mean NLL, whatever `agg`), tokens.
    """
    mask = as_mask(mask, logprobs, "logprobs")
    check_finite(logprobs, "logprobs", mask)
    nll = -torch.where(mask, logprobs, torch.zeros_like(logprobs))
    weighted = nll
    if weights is not None:
        check_batch(weights, "weights", logprobs.shape[0], "logprobs")
        check_finite(weights, "weights")
        weighted = nll * weights.detach().to(nll.dtype)[:, None]
    loss = aggregate(weighted, mask, agg)
    stats = {
        "loss": float(loss.detach()),
        "nll": float(aggregate(nll.detach(), mask, "token-mean")),
        "tokens": float(mask.sum()),
    }
    return loss, stats
