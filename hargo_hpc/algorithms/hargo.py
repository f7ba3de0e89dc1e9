"""HARGO: Heterogeneity-Aware Reward-Guided Optimization (arXiv 2607.28301), as chosen here.

`hargo_weights` (and `hargo_weights_of_rows` for plain lists) turns a batch's rewards, groups
and reference log-probs into per-response importance weights for `policy_loss`; `hargo_signals`
returns every intermediate. Each step's formula is in the docstring of the function computing
it (the switchable statistics: `hargo_stats.py`). What the paper gives, what this project
chose and why, and the formulas in order: docs/algorithms.md, "HARGO".
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
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
from hargo_hpc.algorithms.hargo_labels import label_control_weights
from hargo_hpc.algorithms.hargo_params import HargoParams
from hargo_hpc.algorithms.hargo_stats import (
    CONFIDENCE_FUNCTIONS,
    SCALE_FREE_STATS,
    scale_free_discrimination,
    standardised,
)

# ---------------------------------------------------------------- the signals


@dataclass(frozen=True)
class HargoSignals:
    """Every intermediate of HARGO, per response [B] (for logging, tests and the benchmark)."""

    advantages: Tensor  # A_i, the base advantage
    contrast: Tensor  # the group statistic of the response's group: σ_g (std_batch) or s_g
    discrimination: Tensor  # D_g (1 when switched off)
    confidence: Tensor  # c_i under `confidence_stat` (nats, per token for the means)
    surprise: Tensor  # −sign(A_i) · u_i
    confidence_factor: Tensor  # C_i (1 when switched off)
    modulated_advantages: Tensor  # Ã_i = A_i D_g C_i
    weights: Tensor  # w_i, mean 1, in [1/W, W]
    contrast_ref: float  # σ̄ used (std_batch); 1.0, the fixed reference, otherwise


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
    """D_g = clip((σ_g / σ̄)^p, 1/b, b), `discrimination_stat = "std_batch"` (the first
    reading): how widely the group's rewards spread, relative to the batch. Unchanged when
    *every* reward of the batch is scaled by k, but not when one group's or one task's rewards
    are rescaled: then σ_g / σ̄ compares the reward units of different tasks, and depends on
    the batch mix through σ̄ (docs/algorithms.md, the review). Label-free; a zero-variance group
    gets the floor 1/b (with p > 0)."""
    return ((contrast / contrast_ref) ** power).clamp(1.0 / bound, bound)


def confidence_signal(
    ref_logprobs: Tensor, mask: Tensor, stat: str = "token_mean", threshold: float = 0.9
) -> tuple[Tensor, Tensor]:
    """(c_i, has_tokens) under the `confidence_stat` `stat` (hargo_stats.CONFIDENCE_FUNCTIONS;
    formulas there). The default `token_mean` is c_i = Σ_t m_it log π_ref,it / Σ_t m_it; 0 for
    a response with no completion token."""
    return CONFIDENCE_FUNCTIONS[stat](ref_logprobs, mask, threshold)


def relative_confidence(
    confidence: Tensor, has_tokens: Tensor, groups: Groups, standardise: bool = False
) -> Tensor:
    """u_i = c_i − mean_{j∈g, j has tokens} c_j: confidence relative to the response's group
    (removes the task- and prompt-level offset, as ProGRPO/ARM's c(q) − c(o_i|q)); 0 for a
    response without tokens. With `standardise`, u_i / sd_g(c) (hargo_stats.standardised: 0
    where sd_g(c) ≤ 1e-6 nats), so each group's confidences spread alike whatever their unit."""
    valid = has_tokens.to(confidence.dtype)
    count = groups.sum(valid).clamp(min=1.0)
    mean = groups.sum(confidence * valid) / count
    relative = torch.where(has_tokens, confidence - mean[groups.inverse],
                           torch.zeros_like(confidence))
    return standardised(relative, has_tokens, groups) if standardise else relative


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

    Since each signal's max / min is at most √W, max r / min r ≤ W; the mean lies between
    min r and max r, so every w lies in [1/W, W], max/min ≤ W, and mean w = 1 exactly:
    bounded without iterative clip-and-renormalise."""
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
    call), used when `contrast_momentum` > 0 (std_batch only). Label-free: `label_control`
    is ignored here (`hargo_weights` applies it).
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
        bound = params.max_weight ** 0.25  # each signal's max / min ≤ b² = √W
        ones = torch.ones_like(rewards)
        # 2. discrimination, per group, from the group's own rewards
        if params.discrimination_stat == "std_batch":
            contrast = group_contrast(rewards, groups)
            contrast_ref, _ = reference_contrast(
                contrast, running_contrast, params.contrast_momentum
            )
            contrast_ref = max(contrast_ref, params.eps)
            signal = discrimination_signal(
                contrast, contrast_ref, params.discrimination_power, bound
            )
        else:
            contrast = SCALE_FREE_STATS[params.discrimination_stat](rewards, groups)
            contrast_ref = 1.0
            signal = scale_free_discrimination(contrast, params.discrimination_power, bound)
        disc = signal[groups.inverse] if params.discrimination else ones
        # 3. confidence, per response
        conf, has_tokens = confidence_signal(ref_logprobs.to(rewards.dtype), mask,
                                             params.confidence_stat,
                                             params.confidence_threshold)
        relative = relative_confidence(conf, has_tokens, groups, params.confidence_standardise)
        surprise = -advantage_sign(advantages) * relative
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


def confidence_clip_fraction(signals: HargoSignals, params: HargoParams) -> float:
    """Fraction of the responses with A_i ≠ 0 whose C_i sits at its clip W^±¼ (0.0 if none):
    near 1, C is only a sign; lower β (`confidence_scale`) to keep its size."""
    live = signals.advantages != 0
    if not params.confidence or not bool(live.any()):
        return 0.0
    log_bound = math.log(params.max_weight) / 4
    at_clip = signals.confidence_factor.log().abs() >= log_bound * (1 - 1e-9)
    return float((at_clip & live).sum()) / float(live.sum())


def hargo_weights(
    rewards: Tensor,
    group_index: Tensor,
    ref_logprobs: Tensor,
    mask: Tensor,
    *,
    labels: Sequence[str] | None = None,
    label_means: Mapping[str, float] | None = None,
    **options: Any,
) -> tuple[Tensor, dict[str, Any]]:
    """HARGO's per-response importance weights [B] (detached; positive, mean 1, in [1/W, W])
    and stats (floats, plus `label_means` under the label control). Use them as
    `policy_loss(..., advantages=A, weights=w)` with the same base advantages A: then
    w_i A_i ∝ Ã_i, the confidence-modulated advantage.

    Options: the HargoParams fields, plus `advantages` and `running_contrast` (see
    `hargo_signals`). Stats include `contrast_ref`, to pass back as `running_contrast`.

    `labels` and `label_means` are read ONLY when `label_control` is true (the ablation
    control; hargo_labels.label_control_weights): then `labels` (one task label per row) is
    required, the label-free weights are replaced by the per-label running means, and
    stats["label_means"] (a dict) is the state to pass back as `label_means` next step. With
    `label_control` false, labels are ignored: HARGO stays label-free.
    """
    signals = hargo_signals(rewards, group_index, ref_logprobs, mask, **options)
    params = HargoParams.from_dict({k: v for k, v in options.items()
                                    if k not in ("advantages", "running_contrast")})
    w = signals.weights
    control: dict[str, Any] = {}
    if params.label_control:
        if labels is None:
            raise ValueError("algorithm.hargo.label_control needs the task label of every row: "
                             "pass labels= to hargo_weights")
        if len(labels) != w.numel():
            raise ValueError(f"labels must have {w.numel()} entries (one per response of "
                             f"rewards), got {len(labels)}")
        w, means = label_control_weights(labels, w, label_means, params.label_momentum)
        control = {"label_means": means}
    if w.numel() == 0:
        return w, {"weight_min": 1.0, "weight_max": 1.0, "weight_std": 0.0,
                   "contrast_ref": signals.contrast_ref, **control}
    stats: dict[str, Any] = {
        "weight_min": float(w.min()),
        "weight_max": float(w.max()),
        "weight_std": float(w.std()) if w.numel() > 1 else 0.0,
        "contrast_ref": signals.contrast_ref,
        "zero_contrast_fraction": float((signals.contrast == 0).float().mean()),
        "discrimination_mean": float(signals.discrimination.mean()),
        "confidence_mean": float(signals.confidence.mean()),
        "confidence_factor_mean": float(signals.confidence_factor.mean()),
        "confidence_clip_fraction": confidence_clip_fraction(signals, params),
        "adv_abs_mean": float(signals.advantages.abs().mean()),
        "modulated_adv_abs_mean": float(signals.modulated_advantages.abs().mean()),
        **control,
    }
    return w, stats


def hargo_weights_of_rows(
    rewards: Sequence[float],
    group_index: Sequence[int],
    ref_logprobs: Sequence[Sequence[float]],
    *,
    labels: Sequence[str] | None = None,
    label_means: Mapping[str, float] | None = None,
    **options: Any,
) -> dict[str, Any]:
    """`hargo_weights` on plain Python rows, for callers without tensors (scripts reading a
    rollouts JSONL, the benchmarks): `ref_logprobs[i]` is the list of reference log-probs of
    response i's completion tokens (ragged; padded and masked here), in float64.

    Returns {"advantages", "contrast", "discrimination", "confidence", "confidence_factor",
    "weights": lists [B], "stats": hargo_weights' stats}; `weights` includes the label
    control when `label_control` is on, the rest is label-free.
    """
    batch = len(rewards)
    width = max((len(row) for row in ref_logprobs), default=0)
    ref = torch.zeros(batch, width, dtype=torch.float64)
    mask = torch.zeros(batch, width, dtype=torch.bool)
    for i, row in enumerate(ref_logprobs):
        ref[i, :len(row)] = torch.tensor(row, dtype=torch.float64)
        mask[i, :len(row)] = True
    r = torch.tensor(list(rewards), dtype=torch.float64)
    g = torch.tensor(list(group_index), dtype=torch.long)
    extra = options.pop("advantages", None)
    if extra is not None:
        options["advantages"] = torch.tensor(list(extra), dtype=torch.float64)
    signals = hargo_signals(r, g, ref, mask, **options)
    options["advantages"] = signals.advantages
    weights, stats = hargo_weights(r, g, ref, mask, labels=labels, label_means=label_means,
                                   **options)
    return {
        "advantages": signals.advantages.tolist(),
        "contrast": signals.contrast.tolist(),
        "discrimination": signals.discrimination.tolist(),
        "confidence": signals.confidence.tolist(),
        "confidence_factor": signals.confidence_factor.tolist(),
        "weights": weights.tolist(),
        "stats": stats,
    }
