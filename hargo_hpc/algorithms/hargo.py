"""HARGO: Heterogeneity-Aware Reward-Guided Optimization (arXiv 2607.28301), as chosen here.

Only the abstract of the paper is public. It gives the structure: per-response importance
weights computed from a *confidence-modulated advantage*, which combines a *discrimination
signal* from the group-level reward contrast with a *confidence signal* from the reference
model's log-probabilities; the advantage is modulated *before* the weights are computed; no
task-type labels are used. The formulas below are this project's choices (docs/algorithms.md
gives the reasoning for each). Read top to bottom:

1. base advantage      A_i = GRPO advantage (or another estimator)                  [B]
2. discrimination      D_g = clip( (σ_g / σ̄)^p, W^−¼, W^¼ ),  σ̄ = geometric mean of the
                       nonzero group stds σ_g of the batch                          per group
3. confidence          c_i = mean_t log π_ref(y_it),  u_i = c_i − mean_{j∈g} c_j
                       C_i = clip( exp(−β · sign(A_i) · u_i), W^−¼, W^¼ )           per response
4. modulated advantage Ã_i = A_i · D_g · C_i
5. weights             w_i = (Ã_i / A_i) / mean_j (Ã_j / A_j) = D_g C_i / mean_j D_g(j) C_j,
                       positive, mean 1 over the batch, in [1/W, W], no gradient

Switching both signals off gives w ≡ 1, so the weighted loss is exactly GRPO's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from hargo_hpc.algorithms._checks import (
    as_group_index,
    as_mask,
    as_rewards,
    check_batch,
    check_finite,
)
from hargo_hpc.algorithms.advantages import compute_advantages
from hargo_hpc.algorithms.groups import Groups
from hargo_hpc.algorithms.hargo_params import HargoParams

# ---------------------------------------------------------------- the signals


@dataclass(frozen=True)
class HargoSignals:
    """Every intermediate of HARGO, per response [B] (for logging, tests and the benchmark)."""

    advantages: Tensor  # A_i, the base advantage
    contrast: Tensor  # σ_g of the response's group
    discrimination: Tensor  # D_g (1 when switched off)
    confidence: Tensor  # c_i, length-normalised reference log-prob (nats / token)
    surprise: Tensor  # −sign(A_i) · u_i
    confidence_factor: Tensor  # C_i (1 when switched off)
    modulated_advantages: Tensor  # Ã_i = A_i D_g C_i
    weights: Tensor  # w_i, mean 1, in [1/W, W]
    contrast_ref: float  # σ̄ used


def group_contrast(rewards: Tensor, groups: Groups) -> Tensor:
    """Reward contrast σ_g of each group [num]: the (unbiased) std of its rewards, 0 for a group
    of size 1. The same statistic GRPO divides by, so D_g undoes part of that division."""
    return groups.std(rewards)


def reference_contrast(
    contrast: Tensor, previous: float | None = None, momentum: float = 0.0
) -> tuple[float, float]:
    """(σ̄ to use, σ̄ of this batch): σ̄_batch = exp(mean log σ_g) over groups with σ_g > 0, the
    geometric mean, so D is centred in log space on a batch that mixes reward scales (1.0 if
    no group has contrast); with a running value, σ̄ = m · previous + (1 − m) · σ̄_batch."""
    live = contrast[contrast > 0]
    batch = float(live.log().mean().exp()) if live.numel() else 1.0
    if previous is None or momentum == 0.0:
        return batch, batch
    return momentum * previous + (1.0 - momentum) * batch, batch


def discrimination_signal(
    contrast: Tensor, contrast_ref: float, power: float, bound: float
) -> Tensor:
    """D_g = clip((σ_g / σ̄)^p, 1/b, b): how sharply the group's rewards separate its
    responses, relative to the batch. Scale-free (rewards × k leaves it unchanged) and
    label-free; a zero-variance group gets the floor 1/b (with p > 0)."""
    return ((contrast / contrast_ref) ** power).clamp(1.0 / bound, bound)


def confidence_signal(ref_logprobs: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """(c_i, has_tokens): c_i = Σ_t m_it log π_ref,it / Σ_t m_it, the reference model's mean
    per-token log-prob of response i (length-normalised, so a 2-token `yes` and a 40-token
    sentence are on one scale); 0 for a response with no completion token."""
    mask_f = mask.to(ref_logprobs.dtype)
    tokens = mask_f.sum(dim=-1)
    total = torch.where(mask, ref_logprobs, torch.zeros_like(ref_logprobs)).sum(dim=-1)
    return total / tokens.clamp(min=1.0), tokens > 0


def relative_confidence(confidence: Tensor, has_tokens: Tensor, groups: Groups) -> Tensor:
    """u_i = c_i − mean_{j∈g, j has tokens} c_j: confidence relative to the response's group
    (removes the task- and prompt-level offset, as ProGRPO/ARM's c(q) − c(o_i|q)); 0 for a
    response without tokens."""
    valid = has_tokens.to(confidence.dtype)
    count = groups.sum(valid).clamp(min=1.0)
    mean = groups.sum(confidence * valid) / count
    return torch.where(has_tokens, confidence - mean[groups.inverse], torch.zeros_like(confidence))


def advantage_sign(advantages: Tensor, tol: float = 1e-6) -> Tensor:
    """sign(A_i), with 0 for |A_i| ≤ tol · max_j |A_j|: a response at its group's mean has
    A = 0 only up to round-off, and its sign must not flip C_i (scale-free in A)."""
    dead = tol * float(advantages.abs().max()) if advantages.numel() else 0.0
    return torch.where(advantages.abs() > dead, torch.sign(advantages),
                       torch.zeros_like(advantages))


def confidence_factor(surprise: Tensor, scale: float, bound: float) -> Tensor:
    """C_i = clip(exp(β · s_i), 1/b, b) with the surprise s_i = −sign(A_i) · u_i: above 1 when
    the reference disagrees with the reward (a rewarded response it found unlikely, a
    penalised one it found likely), below 1 when it already agrees."""
    return torch.exp(scale * surprise).clamp(1.0 / bound, bound)


def normalized_weights(factor: Tensor) -> Tensor:
    """w_i = r_i / mean_j r_j for the modulation factor r_i = Ã_i / A_i = D_g C_i.

    Since every r lies in [W^−½, W^½], every w lies in [1/W, W], max/min ≤ W, and mean w = 1
    exactly: bounded without iterative clip-and-renormalise."""
    return factor / factor.mean()


# ---------------------------------------------------------------- putting it together


def hargo_signals(
    rewards: Tensor,
    group_index: Tensor,
    ref_logprobs: Tensor,
    mask: Tensor,
    *,
    advantages: Tensor | None = None,
    running_contrast: float | None = None,
    **options: Any,
) -> HargoSignals:
    """All of HARGO's quantities for one batch; `options` are HargoParams fields.

    `advantages` (optional) are the base advantages if already computed (else the
    `estimator`'s); `running_contrast` is σ̄ of earlier steps (`contrast_ref` of the last
    call), used when `contrast_momentum` > 0.
    """
    params = HargoParams.from_dict(options)
    rewards = as_rewards(rewards).detach()
    batch = rewards.shape[0]
    index = as_group_index(group_index, batch)
    mask = as_mask(mask, ref_logprobs, "ref_logprobs")
    if ref_logprobs.shape[0] != batch:
        raise ValueError(
            f"ref_logprobs must have {batch} rows (one per response of rewards), got shape "
            f"{tuple(ref_logprobs.shape)}"
        )
    check_finite(ref_logprobs, "ref_logprobs", mask)
    ref_logprobs = ref_logprobs.detach()
    if advantages is None:
        advantages = compute_advantages(params.estimator, rewards, index)
    else:
        check_batch(advantages, "advantages", batch, "rewards")
        check_finite(advantages, "advantages")
    advantages = advantages.detach().to(rewards.dtype)

    with torch.no_grad():
        if batch == 0:
            empty = rewards.clone()
            return HargoSignals(empty, empty, empty, empty, empty, empty, empty, empty, 1.0)
        groups = Groups.of(index)
        bound = params.max_weight ** 0.25  # each signal in [W^−¼, W^¼]
        ones = torch.ones_like(rewards)
        # 2. discrimination, per group
        contrast = group_contrast(rewards, groups)
        contrast_ref, _ = reference_contrast(
            contrast, running_contrast, params.contrast_momentum
        )
        contrast_ref = max(contrast_ref, params.eps)
        disc = ones
        if params.discrimination:
            disc = discrimination_signal(
                contrast, contrast_ref, params.discrimination_power, bound
            )[groups.inverse]
        # 3. confidence, per response
        conf, has_tokens = confidence_signal(ref_logprobs.to(rewards.dtype), mask)
        surprise = -advantage_sign(advantages) * relative_confidence(conf, has_tokens, groups)
        conf_factor = ones
        if params.confidence:
            conf_factor = confidence_factor(surprise, params.confidence_scale, bound)
        # 4. the confidence-modulated advantage
        modulated = advantages * disc * conf_factor
        # 5. the weights: w_i ∝ Ã_i / A_i = D_g C_i (defined also where A_i = 0), mean 1
        weights = normalized_weights(disc * conf_factor)
    return HargoSignals(
        advantages=advantages,
        contrast=contrast[groups.inverse],
        discrimination=disc,
        confidence=conf,
        surprise=surprise,
        confidence_factor=conf_factor,
        modulated_advantages=modulated,
        weights=weights,
        contrast_ref=contrast_ref,
    )


def hargo_weights(
    rewards: Tensor,
    group_index: Tensor,
    ref_logprobs: Tensor,
    mask: Tensor,
    **options: Any,
) -> tuple[Tensor, dict[str, float]]:
    """HARGO's per-response importance weights [B] (detached; positive, mean 1, in [1/W, W])
    and float stats. Use them as `policy_loss(..., advantages=A, weights=w)` with the same base
    advantages A: then w_i A_i ∝ Ã_i, the confidence-modulated advantage.

    Options: the HargoParams fields, plus `advantages` and `running_contrast` (see
    `hargo_signals`). Stats include `contrast_ref`, to pass back as `running_contrast`.
    """
    signals = hargo_signals(rewards, group_index, ref_logprobs, mask, **options)
    w = signals.weights
    if w.numel() == 0:
        return w, {"weight_min": 1.0, "weight_max": 1.0, "weight_std": 0.0,
                   "contrast_ref": signals.contrast_ref}
    stats = {
        "weight_min": float(w.min()),
        "weight_max": float(w.max()),
        "weight_std": float(w.std()) if w.numel() > 1 else 0.0,
        "contrast_ref": signals.contrast_ref,
        "zero_contrast_fraction": float((signals.contrast == 0).float().mean()),
        "discrimination_mean": float(signals.discrimination.mean()),
        "confidence_mean": float(signals.confidence.mean()),
        "confidence_factor_mean": float(signals.confidence_factor.mean()),
        "adv_abs_mean": float(signals.advantages.abs().mean()),
        "modulated_adv_abs_mean": float(signals.modulated_advantages.abs().mean()),
    }
    return w, stats
