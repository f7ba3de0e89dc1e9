"""HARGO's switchable statistics: what D_g and C_i are computed from.

Registered under the names of `names.py`: the scale-free `discrimination_stat`s `balance`,
`bimodality`, `split` (per group, from its rewards; D_g: `scale_free_discrimination`;
`std_batch` stays in `hargo.py`) and the `confidence_stat`s `token_mean`, `uncertain_mean`,
`sum`, `min` (per response, from its reference log-probs). Each function's docstring has its
formula; the review behind them and the choice of the defaults: docs/algorithms.md, "HARGO".
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from hargo_hpc.algorithms.groups import Groups

FLAT_ABS = 1e-9
"""Absolute part of the reward resolution below which a group counts as flat."""
FLAT_REL = 1e-9
"""Relative part (float64); at lower precision 16 · machine epsilon of the dtype."""
CONFIDENCE_SD_FLOOR = 1e-6
"""sd_g(c) at or below this (nats) counts as zero when standardising u."""


# ---------------------------------------------------------------- discrimination, per group


def flat_groups(rewards: Tensor, groups: Groups) -> Tensor:
    """[num] bool: the group's rewards are equal up to the reward resolution,

        max_g r − min_g r ≤ 1e-9 + ρ · max_{i∈g} |r_i|,   ρ = max(1e-9, 16 ε_dtype),

    and every group of size 1. A scale-free statistic would blow round-off (a similarity
    computed twice, 0.74 and 0.74 + 1e-12) up to a full-size contrast; a flat group gets s = 0
    and so the floor of D, as a group of equal rewards does. Scale invariance therefore holds
    for groups whose spread is above this resolution (for any reward scale above ~1e-9)."""
    rel = max(FLAT_REL, 16.0 * torch.finfo(rewards.dtype).eps)
    spread = groups.spread(rewards)
    magnitude = groups.max(rewards.abs())
    return (spread <= FLAT_ABS + rel * magnitude) | (groups.sizes < 2)


def _scaled_deviations(rewards: Tensor, groups: Groups) -> tuple[Tensor, Tensor]:
    """(z [B], live [num]): z_i = (r_i − r̄_g) / max_{j∈g} |r_j − r̄_g|, the centred rewards
    of each live (not flat) group brought to [−1, 1] (so 4th powers neither under- nor
    overflow; every statistic below is a ratio of moments, unchanged by this scaling), 0 in a
    flat group."""
    live = ~flat_groups(rewards, groups)
    centred = groups.centred(rewards)
    scale = groups.max(centred.abs())
    scale = torch.where(live & (scale > 0), scale, torch.ones_like(scale))
    z = centred / scale[groups.inverse]
    return torch.where(live[groups.inverse], z, torch.zeros_like(z)), live


def _at_the_mean(rewards: Tensor, groups: Groups) -> Tensor:
    """[num] the rounding bound of z (`_scaled_deviations`): an r_i equal to r̄_g may come out
    a little above or below it, since r̄_g is a rounded sum of n_g terms,

        |δz| ≤ 4 n_g ε · max_{i∈g} |r_i| / max_{i∈g} |r_i − r̄_g|,

    so `split` counts only z_i above this as above the mean (without it, an affine rewrite of
    the rewards could move a reward that sits on the mean across it: [0, 0, 1.25, 1.75, 2, 1]
    has mean 1, its tenth a mean of 0.1 + 1.4e-17)."""
    eps = torch.finfo(rewards.dtype).eps
    deviation = groups.max(groups.centred(rewards).abs())
    bound = 4.0 * groups.sizes.to(rewards.dtype) * eps * groups.max(rewards.abs())
    return bound / torch.where(deviation > 0, deviation, torch.ones_like(deviation))


def balance_statistic(rewards: Tensor, groups: Groups) -> Tensor:
    """[num] b_g = ( mean_{i∈g} |r_i − r̄_g| / sd_g )²  with the population sd
    sd_g = sqrt(mean_{i∈g} (r_i − r̄_g)²); 0 for a flat group.

    The review's candidate. Mean absolute deviation over sd: by Jensen b ≤ 1, with 1 exactly
    for a group whose rewards take two values in equal numbers. On 0/1 rewards with a
    fraction μ of ones, mean|r − μ| = 2μ(1 − μ) and sd = sqrt(μ(1 − μ)), so b = 4μ(1 − μ):
    [0, 0, 1, 1] → 1, [0, 1, 1, 1] → 0.75, seven of eight right → 0.4375; b^½ = σ_pop / σ_max
    is the group's std relative to the largest a 0/1 group can have, hence today's ranking and,
    at equal group sizes, today's ratios (σ_g^p) between binary groups. On continuous rewards
    b ≈ 2/π = 0.64 for normal noise, 0.75 for uniform; the minimum for n responses is one
    outlier against n − 1 equal ones, 4(n − 1)/n² (as seven of eight right)."""
    z, live = _scaled_deviations(rewards, groups)
    mad = groups.mean(z.abs())
    var = groups.mean(z * z)
    ok = live & (var > 0)
    stat = mad * mad / torch.where(ok, var, torch.ones_like(var))
    return torch.where(ok, stat, torch.zeros_like(stat)).clamp(0.0, 1.0)


def bimodality_statistic(rewards: Tensor, groups: Groups) -> Tensor:
    """[num] k_g = m2² / m4 = 1 / kurtosis, m_k = mean_{i∈g} (r_i − r̄_g)^k; 0 for a flat group.

    Pearson: kurtosis ≥ 1, with equality only for a symmetric two-point group, so k ∈ (0, 1]
    and k = 1 exactly for an even split. On 0/1 rewards m2 = x, m4 = x(1 − 3x) with
    x = μ(1 − μ), so k = x / (1 − 3x), increasing in x ≤ ¼: [0, 0, 1, 1] → 1, [0, 1, 1, 1] → 3/7,
    seven of eight right → 0.163. On continuous rewards k ≈ 1/3 for normal noise (a sample of 8:
    about 0.4), 5/9 for uniform: it separates two clusters from noise more sharply than
    `balance`, but a fourth moment of eight rewards is a noisier estimate."""
    z, live = _scaled_deviations(rewards, groups)
    m2 = groups.mean(z * z)
    m4 = groups.mean(z ** 4)
    ok = live & (m4 > 0)
    stat = m2 * m2 / torch.where(ok, m4, torch.ones_like(m4))
    return torch.where(ok, stat, torch.zeros_like(stat)).clamp(0.0, 1.0)


def split_statistic(rewards: Tensor, groups: Groups) -> Tensor:
    """[num] s_g = 4 q_g (1 − q_g), q_g = (1/n_g) #{i ∈ g : r_i > r̄_g}; 0 for a flat group.

    The balance of the group's split at its mean: invariant even to any increasing rewrite of
    the rewards. On 0/1 rewards q = μ, so s = 4μ(1 − μ), equal to `balance` there; on
    continuous noise about half the group lies above its mean, so s ≈ 1, the maximum: it cannot
    tell noise from a clean split (kept as an ablation row)."""
    z, live = _scaled_deviations(rewards, groups)
    above = groups.mean((z > _at_the_mean(rewards, groups)[groups.inverse]).to(rewards.dtype))
    stat = 4.0 * above * (1.0 - above)
    return torch.where(live, stat, torch.zeros_like(stat)).clamp(0.0, 1.0)


SCALE_FREE_STATS: dict[str, Callable[[Tensor, Groups], Tensor]] = {
    "balance": balance_statistic,
    "bimodality": bimodality_statistic,
    "split": split_statistic,
}
"""The scale-free `discrimination_stat` values; `std_batch` (in hargo.py) completes the list."""


def scale_free_discrimination(stat: Tensor, power: float, bound: float) -> Tensor:
    """D_g = clip( s_g^(p/2), 1/b², 1 ) for a statistic s_g ∈ [0, 1], b = W^¼.

    p/2 because s is a squared contrast (for `balance` on 0/1 rewards s = (σ_pop/σ_max)²), so
    that on 0/1 rewards D_g ∝ σ_g^p as with `std_batch`'s (σ_g / σ̄)^p. The range [W^−½, 1] has
    the same ratio √W as std_batch's [W^−¼, W^¼]; the fixed reference 1 (the most
    discriminating shape, an even split) replaces the batch's σ̄, so D_g depends on group g
    alone. A flat group (s = 0) gets the floor W^−½ for p > 0; p = 0 gives D ≡ 1 (0⁰ = 1)."""
    return (stat ** (power / 2.0)).clamp(1.0 / (bound * bound), 1.0)


# ---------------------------------------------------------------- confidence, per response


def token_mean_confidence(
    ref_logprobs: Tensor, mask: Tensor, threshold: float = 0.9
) -> tuple[Tensor, Tensor]:
    """(c_i, has_tokens): c_i = Σ_t m_it log π_ref,it / Σ_t m_it, the mean per-token log-prob
    (the first reading; length-normalised, so a 2-token `yes` and a 40-token sentence are on
    one scale, but k confident formatting tokens dilute an n-token answer's c by n / (n + k));
    0 for a response with no completion token. `threshold` is unused."""
    mask_f = mask.to(ref_logprobs.dtype)
    tokens = mask_f.sum(dim=-1)
    total = torch.where(mask, ref_logprobs, torch.zeros_like(ref_logprobs)).sum(dim=-1)
    return total / tokens.clamp(min=1.0), tokens > 0


def uncertain_mean_confidence(
    ref_logprobs: Tensor, mask: Tensor, threshold: float = 0.9
) -> tuple[Tensor, Tensor]:
    """(c_i, has_tokens): the mean log-prob over the tokens the reference is not sure of,

        U_i = {t : m_it, log π_ref,it < log τ},   c_i = mean_{t∈U_i} log π_ref,it   if U_i ≠ ∅,
        c_i = min_{t: m_it} log π_ref,it   otherwise (every token has π_ref ≥ τ),

    with τ = `confidence_threshold` (0.9: log τ = −0.105 nats). Tokens the reference predicts
    with probability ≥ τ (scaffolding such as "The answer is:", closing punctuation, EOS) carry
    no information about whether the reference agrees with the answer, and adding or removing
    them leaves c unchanged. The fallback keeps the order: a response without uncertain tokens
    has c ≥ log τ, above every response that has one (c < log τ); it is its least certain
    token, so extra tokens surer than that token leave it unchanged too. 0 for a response with
    no completion token."""
    log_tau = math.log(threshold)
    uncertain = mask & (ref_logprobs < log_tau)
    count = uncertain.to(ref_logprobs.dtype).sum(dim=-1)
    total = torch.where(uncertain, ref_logprobs, torch.zeros_like(ref_logprobs)).sum(dim=-1)
    least, has_tokens = min_confidence(ref_logprobs, mask)
    return torch.where(count > 0, total / count.clamp(min=1.0), least), has_tokens


def sum_confidence(
    ref_logprobs: Tensor, mask: Tensor, threshold: float = 0.9
) -> tuple[Tensor, Tensor]:
    """(c_i, has_tokens): c_i = Σ_t m_it log π_ref,it, the sequence log-prob (ablation row).

    Exactly unchanged in u by scaffold tokens every response of a group shares (they shift
    every c_i of the group alike), but not length-normalised: answers of 10–60 tokens differ
    by tens of nats, so C_i sits at its clip for most long answers. 0 without tokens."""
    total = torch.where(mask, ref_logprobs, torch.zeros_like(ref_logprobs)).sum(dim=-1)
    return total, mask.any(dim=-1)


def min_confidence(
    ref_logprobs: Tensor, mask: Tensor, threshold: float = 0.9
) -> tuple[Tensor, Tensor]:
    """(c_i, has_tokens): c_i = min_{t: m_it} log π_ref,it, the reference's least likely token
    of the response (ablation row: blind to everything but one token); 0 without tokens."""
    filled = torch.where(mask, ref_logprobs, torch.full_like(ref_logprobs, math.inf))
    least = filled.min(dim=-1).values if ref_logprobs.shape[-1] else filled.sum(dim=-1)
    has_tokens = mask.any(dim=-1)
    return torch.where(has_tokens, least, torch.zeros_like(least)), has_tokens


CONFIDENCE_FUNCTIONS: dict[str, Callable[[Tensor, Tensor, float], tuple[Tensor, Tensor]]] = {
    "uncertain_mean": uncertain_mean_confidence,
    "token_mean": token_mean_confidence,
    "sum": sum_confidence,
    "min": min_confidence,
}
"""`confidence_stat` name → (ref_logprobs [B, T], mask [B, T], τ) -> (c [B], has_tokens [B])."""


def standardised(relative: Tensor, has_tokens: Tensor, groups: Groups) -> Tensor:
    """u_i / sd_g, sd_g = sqrt(mean_{j∈g, has tokens} u_j²) (population sd of c over the
    group's responses with tokens, as u is already centred); 0 where sd_g ≤ 1e-6 nats (equal
    confidences up to round-off must not become ±1)."""
    valid = has_tokens.to(relative.dtype)
    count = groups.sum(valid).clamp(min=1.0)
    sd = (groups.sum(relative * relative * valid) / count).sqrt()[groups.inverse]
    ok = sd > CONFIDENCE_SD_FLOOR
    return torch.where(ok, relative / torch.where(ok, sd, torch.ones_like(sd)),
                       torch.zeros_like(relative))
