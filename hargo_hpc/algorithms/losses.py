"""Policy losses: the per-token terms (PPO-clip, plain policy gradient; each registered in
`registry.py`), the loss around them (token or sequence ratio, KL to the reference, weights),
and loss aggregation.

Per-token tensors are [B, T] with `mask` marking completion tokens; per-response tensors are
[B]. `policy_loss` returns a scalar loss (with gradient through `logprobs` only) and a dict of
float statistics for logging.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

import torch
from torch import Tensor

from hargo_hpc.algorithms import registry
from hargo_hpc.algorithms._checks import (
    as_mask,
    as_rewards,
    check_batch,
    check_finite,
    check_same_shape,
)
from hargo_hpc.algorithms.names import AGG_MODES, KL_ESTIMATORS, RATIO_LEVELS

_LOG_CLAMP = 20.0  # log-ratios are clamped to ±20 before exp, so a wild token cannot overflow


# ---------------------------------------------------------------- KL to the reference


def kl_penalty(
    logprobs: Tensor, ref_logprobs: Tensor, estimator: Literal["k1", "k2", "k3"] = "k3"
) -> Tensor:
    """Per-token estimate of KL(π ‖ π_ref) from samples of π (Schulman, "Approximating KL
    divergence", 2020), with δ = log π_ref − log π:

    k1 = −δ            (unbiased, high variance, can be negative)
    k2 = ½ δ²          (biased, low variance)
    k3 = e^δ − δ − 1   (unbiased, low variance, ≥ 0; GRPO's choice)

    δ is clamped to ±20 for k3 so the exponential stays finite.
    """
    delta = ref_logprobs - logprobs
    if estimator == "k1":
        return -delta
    if estimator == "k2":
        return 0.5 * delta * delta
    if estimator == "k3":
        delta = delta.clamp(-_LOG_CLAMP, _LOG_CLAMP)
        return torch.exp(delta) - delta - 1.0
    raise ValueError(f"unknown kl_estimator {estimator!r} (valid: {', '.join(KL_ESTIMATORS)})")


def kl_penalized_rewards(
    rewards: Tensor,
    logprobs: Tensor,
    ref_logprobs: Tensor,
    mask: Tensor,
    *,
    kl_coef: float,
    kl_estimator: Literal["k1", "k2", "k3"] = "k1",
) -> Tensor:
    """KL folded into the reward (REINFORCE++, arXiv 2501.03262; RLOO in TRL):
    R'_i = R_i − β Σ_t m_it · KL_it. No gradient flows through the result.

    (REINFORCE++ spreads the penalty over tokens and sums it into returns; with outcome rewards,
    γ = 1 and one advantage per response, the return at the first token is this R'.)
    """
    rewards = as_rewards(rewards)
    mask = as_mask(mask, logprobs, "logprobs")
    check_same_shape(("logprobs", logprobs), ("ref_logprobs", ref_logprobs))
    check_batch(rewards, "rewards", logprobs.shape[0], "logprobs")
    check_finite(logprobs, "logprobs", mask)
    check_finite(ref_logprobs, "ref_logprobs", mask)
    zero = torch.zeros_like(logprobs).detach()
    lp = torch.where(mask, logprobs.detach(), zero)
    ref = torch.where(mask, ref_logprobs.detach(), zero)
    kl = torch.where(mask, kl_penalty(lp, ref, kl_estimator), zero)
    return rewards.detach() - kl_coef * kl.sum(dim=-1).to(rewards.dtype)


# ---------------------------------------------------------------- aggregation


def aggregate(
    values: Tensor,
    mask: Tensor,
    agg: str = "token-mean",
    *,
    max_length: int | None = None,
    num_tokens: float | None = None,
    num_seqs: int | None = None,
) -> Tensor:
    """Reduce per-token values L_it [B, T] to a scalar over the completion mask m_it.

    token-mean               Σ_it m L / Σ_it m                       (DAPO, arXiv 2503.14476)
    seq-mean-token-mean      (1/B) Σ_i [Σ_t m L / Σ_t m]             (GRPO, arXiv 2402.03300)
    seq-mean-token-sum       (1/B) Σ_i Σ_t m L                       (REINFORCE on sequences)
    seq-mean-token-sum-norm  (1/B) Σ_i Σ_t m L / L_max               (Dr.GRPO, arXiv 2503.20783)

    L_max = `max_length` (the generation limit; default T, the padded width). This is TRL's
    `dr_grpo` normaliser B·L_max; verl divides by T only (a factor B larger). Responses with no
    completion token contribute 0 to sums, and their per-response mean is taken as 0; an
    all-masked batch gives 0 (with gradient graph kept).

    Micro-batching: by default the denominators (Σ m for token-mean, B for the seq-* modes)
    are this call's. A trainer that splits one rollout batch into micro-batches passes the
    whole batch's `num_tokens` (Σ m over every micro-batch) and `num_seqs` (its B); the
    micro-batch losses then add up to the full-batch loss exactly (DAPO's token-mean is over
    the whole batch; verl's global_batch_size / batch_num_tokens do the same).
    """
    mask_f = mask.to(values.dtype)
    masked = torch.where(mask.bool(), values, torch.zeros_like(values))
    batch = values.shape[0] if num_seqs is None else num_seqs
    if agg == "token-mean":
        if num_tokens is not None:
            return masked.sum() / max(float(num_tokens), 1.0)
        return masked.sum() / mask_f.sum().clamp(min=1.0)
    if batch <= 0:
        return masked.sum()
    if agg == "seq-mean-token-mean":
        return (masked.sum(dim=-1) / mask_f.sum(dim=-1).clamp(min=1.0)).sum() / batch
    if agg == "seq-mean-token-sum":
        return masked.sum(dim=-1).sum() / batch
    if agg == "seq-mean-token-sum-norm":
        length = values.shape[-1] if max_length is None else max_length
        if length <= 0:
            raise ValueError(f"max_length must be positive, got {length}")
        return masked.sum() / (batch * length)
    raise ValueError(f"unknown agg {agg!r} (valid: {', '.join(AGG_MODES)})")


def _masked_mean(values: Tensor, mask: Tensor) -> float:
    count = int(mask.sum())
    return float((values * mask).sum() / count) if count else 0.0


# ---------------------------------------------------------------- per-token policy losses


class TokenLoss(NamedTuple):
    """A policy loss's per-token terms L_it [B, T] and where it clipped (bool [B, T] each:
    below 1 − ε_low with A < 0, above 1 + ε_high with A > 0, under the dual clip)."""

    loss: Tensor
    clipped_low: Tensor
    clipped_high: Tensor
    dual_clipped: Tensor


def clipped_surrogate(advantages: Tensor, ratio: Tensor, *, clip_low: float, clip_high: float,
                      dual_clip: float | None) -> TokenLoss:
    """PPO's clipped surrogate (arXiv 1707.06347), asymmetric (DAPO clip-higher, arXiv
    2503.14476):  L_it = max( −A r_it, −A clip(r_it, 1 − ε_low, 1 + ε_high) ).
    Dual clip (Ye et al., arXiv 1912.09729), for A < 0 only: L_it = min(L_it, −c A), c > 1."""
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    loss = torch.maximum(unclipped, clipped)
    ratio_d = ratio.detach()
    low = (advantages < 0) & (ratio_d < 1.0 - clip_low)
    high = (advantages > 0) & (ratio_d > 1.0 + clip_high)
    dual = torch.zeros_like(low)
    if dual_clip is not None:
        bound = -advantages * dual_clip
        dual = (advantages < 0) & (loss.detach() > bound)
        loss = torch.where(advantages < 0, torch.minimum(loss, bound), loss)
    return TokenLoss(loss, low, high, dual)


def plain_policy_gradient(advantages: Tensor, ratio: Tensor, **_: object) -> TokenLoss:
    """Plain policy gradient (GPG, arXiv 2504.02546; REINFORCE): L_it = −A r_it, no clip; its
    gradient is −A ∇log π_it at r = 1."""
    none = torch.zeros_like(ratio, dtype=torch.bool)
    return TokenLoss(-advantages * ratio, none, none, none)


# ---------------------------------------------------------------- the policy loss


def policy_loss(
    logprobs: Tensor,
    old_logprobs: Tensor | None,
    advantages: Tensor,
    mask: Tensor,
    *,
    ref_logprobs: Tensor | None = None,
    weights: Tensor | None = None,
    is_weights: Tensor | None = None,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    ratio_level: Literal["token", "sequence"] = "token",
    kl_coef: float = 0.0,
    kl_estimator: Literal["k1", "k2", "k3"] = "k3",
    agg: str = "token-mean",
    loss_type: str = "ppo",
    dual_clip: float | None = None,
    max_length: int | None = None,
    num_tokens: float | None = None,
    num_seqs: int | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """The policy loss `loss_type` + KL, aggregated; returns (scalar loss, float stats).

    Ratio, token level (PPO, arXiv 1707.06347):   r_it = exp(log π_it − log π_old,it)
    Ratio, sequence level (GSPO, arXiv 2507.18071):
        s_i = exp( (1/|y_i|) Σ_t m_it (log π_it − log π_old,it) ), used for every token of i.
    Per-token term L_it: the registered policy loss `loss_type` (`registry.POLICY_LOSSES`:
    `ppo` = `clipped_surrogate`, `pg` = `plain_policy_gradient`, or a "module:function" of
    your own with their signature).
    KL to the reference (GRPO): L_it += β · k(log π_it, log π_ref,it) with k in k1/k2/k3.
    Importance weights of another sampling engine (`is_weights`, [B, T], from
    `truncated_importance_weights`): the policy term L_it ← ρ_it L_it before the KL is added.
    Per-response weights w_i (HARGO): L_it ← w_i L_it, then `aggregate(L, m, agg)`;
    `max_length`, `num_tokens` and `num_seqs` go to `aggregate` (the generation limit for
    Dr.GRPO's constant normaliser; the whole batch's denominators under micro-batching).

    `advantages` is [B] (one per response) or [B, T]; `old_logprobs=None` means on-policy
    (log π_old = log π, detached). Stats: loss, pg_loss, clip_frac_low (A<0 and r < 1−ε_low),
    clip_frac_high (A>0 and r > 1+ε_high), dual_clip_frac, approx_kl (k3 of π_old vs π),
    ratio_mean, kl (to the reference, when given), adv_mean; token means over the mask.
    """
    mask = as_mask(mask, logprobs, "logprobs")
    batch = logprobs.shape[0]
    if old_logprobs is None:
        old_logprobs = logprobs.detach()
    check_same_shape(
        ("logprobs", logprobs), ("old_logprobs", old_logprobs), ("ref_logprobs", ref_logprobs)
    )
    if advantages.dim() == 1:
        check_batch(advantages, "advantages", batch, "logprobs")
        adv = advantages.detach()[:, None].expand_as(logprobs)
    else:
        check_same_shape(("logprobs", logprobs), ("advantages", advantages))
        adv = advantages.detach()
    check_finite(adv, "advantages", mask)
    check_finite(logprobs, "logprobs", mask)
    check_finite(old_logprobs, "old_logprobs", mask)
    if ref_logprobs is not None:
        check_finite(ref_logprobs, "ref_logprobs", mask)
    if weights is not None:
        check_batch(weights, "weights", batch, "logprobs")
        check_finite(weights, "weights")
    if is_weights is not None:
        check_same_shape(("logprobs", logprobs), ("is_weights", is_weights))
        check_finite(is_weights, "is_weights", mask)
    token_terms = registry.policy_loss(loss_type)
    if ratio_level not in RATIO_LEVELS:
        raise ValueError(f"unknown ratio_level {ratio_level!r} (valid: token, sequence)")
    if agg not in AGG_MODES:
        raise ValueError(f"unknown agg {agg!r} (valid: {', '.join(AGG_MODES)})")
    if kl_coef and ref_logprobs is None:
        raise ValueError("kl_coef > 0 needs ref_logprobs")
    if dual_clip is not None and dual_clip <= 1.0:
        raise ValueError(f"dual_clip must be > 1, got {dual_clip}")

    # masked positions may hold padding garbage (even -inf): zero them before any arithmetic
    zero = torch.zeros_like(logprobs)
    logprobs = torch.where(mask, logprobs, zero)
    old_logprobs = torch.where(mask, old_logprobs.detach(), zero.detach())
    adv = torch.where(mask, adv, zero.detach())
    if ref_logprobs is not None:
        ref_logprobs = torch.where(mask, ref_logprobs.detach(), zero.detach())
    mask_f = mask.to(logprobs.dtype)
    log_ratio = logprobs - old_logprobs
    if ratio_level == "sequence":
        lengths = mask_f.sum(dim=-1, keepdim=True).clamp(min=1.0)
        seq_log_ratio = (log_ratio * mask_f).sum(dim=-1, keepdim=True) / lengths
        log_ratio = seq_log_ratio.expand_as(logprobs)
    ratio = torch.exp(log_ratio.clamp(-_LOG_CLAMP, _LOG_CLAMP))

    token_loss, low, high, dual = token_terms(adv, ratio, clip_low=clip_low,
                                              clip_high=clip_high, dual_clip=dual_clip)

    if is_weights is not None:
        token_loss = token_loss * torch.where(mask, is_weights.detach(), zero.detach())
    pg_token_loss = token_loss
    kl = None
    if ref_logprobs is not None:
        kl = kl_penalty(logprobs, ref_logprobs, kl_estimator)
        if kl_coef:
            token_loss = token_loss + kl_coef * kl
    if weights is not None:
        w = weights.detach().to(logprobs.dtype)[:, None]
        token_loss = token_loss * w
        pg_token_loss = pg_token_loss * w
    sizes = {"max_length": max_length, "num_tokens": num_tokens, "num_seqs": num_seqs}
    loss = aggregate(token_loss, mask, agg, **sizes)

    with torch.no_grad():
        old_kl = kl_penalty(logprobs.detach(), old_logprobs, "k3")
        stats = {
            "loss": float(loss.detach()),
            "pg_loss": float(aggregate(pg_token_loss.detach(), mask, agg, **sizes)),
            "clip_frac_low": _masked_mean(low.to(mask_f.dtype), mask_f),
            "clip_frac_high": _masked_mean(high.to(mask_f.dtype), mask_f),
            "dual_clip_frac": _masked_mean(dual.to(mask_f.dtype), mask_f),
            "approx_kl": _masked_mean(old_kl, mask_f),
            "ratio_mean": _masked_mean(ratio.detach(), mask_f),
            "ratio_sq_mean": _masked_mean(ratio.detach() ** 2, mask_f),
            "adv_mean": _masked_mean(adv, mask_f),
        }
        if kl is not None:
            stats["kl"] = _masked_mean(kl.detach(), mask_f)
    return loss, stats


def truncated_importance_weights(trainer_logprobs: Tensor, sampler_logprobs: Tensor,
                                 mask: Tensor, cap: float) -> tuple[Tensor, dict[str, float]]:
    """Per-token weights that correct for sampling with another engine than the trainer's:

        ρ_it = min( exp(log π_trainer,it − log π_sampler,it), C )

    truncated importance sampling (Ionides, "Truncated importance sampling", JCGS 2008; for
    a vLLM sampler beside an FSDP/DeepSpeed trainer: Yao et al., "Your Efficient RL Framework
    Secretly Brings You Off-Policy RL Training", 2025). π_trainer is the trainer's log-prob
    of the sampled token under the weights the sampler had (the old policy), π_sampler the
    sampler's own; their ratio is 1 but for numerics (kernels, precision, batch shape). 0
    where `mask` is 0. Stats over the masked tokens: ratio_mean (before truncation),
    clipped_share (tokens with ratio > C), and abs_log_ratio_mean."""
    if cap < 1:
        raise ValueError(f"the importance-sampling cap must be >= 1, got {cap}")
    mask = as_mask(mask, trainer_logprobs, "trainer_logprobs")
    check_same_shape(("trainer_logprobs", trainer_logprobs),
                     ("sampler_logprobs", sampler_logprobs))
    check_finite(trainer_logprobs, "trainer_logprobs", mask)
    check_finite(sampler_logprobs, "sampler_logprobs", mask)
    with torch.no_grad():
        zero = torch.zeros_like(trainer_logprobs)
        log_ratio = torch.where(mask, trainer_logprobs - sampler_logprobs.to(zero), zero)
        ratio = torch.exp(log_ratio.clamp(-_LOG_CLAMP, _LOG_CLAMP))
        weights = torch.where(mask, ratio.clamp(max=cap), zero)
        mask_f = mask.to(zero.dtype)
        stats = {"ratio_mean": _masked_mean(ratio, mask_f),
                 "clipped_share": _masked_mean((ratio > cap).to(zero.dtype), mask_f),
                 "abs_log_ratio_mean": _masked_mean(log_ratio.abs(), mask_f)}
    return weights, stats
