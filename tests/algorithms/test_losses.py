"""Policy losses, KL estimators and aggregation: hand-computed values, properties, errors."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from hargo_hpc.algorithms import (
    aggregate,
    kl_penalized_rewards,
    kl_penalty,
    policy_loss,
    truncated_importance_weights,
)

from .strategies import token_batch

FAST = settings(max_examples=40, deadline=None)
D = torch.float64

# Two responses: row 0 has 2 completion tokens (third is padding), row 1 has 3.
# Ratios r = π/π_old chosen by hand; A = [1, −2]; ε_low = ε_high = 0.2.
LOGPROBS = torch.tensor([[-1.0, -2.0, -7.0], [-0.5, -1.5, -1.0]], dtype=D)
MASK = torch.tensor([[True, True, False], [True, True, True]])
RATIOS = torch.tensor([[1.5, 0.7, 1.0], [1.1, 0.7, 1.3]], dtype=D)
OLD = LOGPROBS - RATIOS.log()
ADV = torch.tensor([1.0, -2.0], dtype=D)
# token losses max(−A r, −A clip(r, 0.8, 1.2)):
#   row 0 (A = 1):  r=1.5 -> max(−1.5, −1.2) = −1.2 (clip high);  r=0.7 -> max(−0.7, −0.8) = −0.7
#   row 1 (A = −2): r=1.1 -> 2.2;  r=0.7 -> max(1.4, 1.6) = 1.6 (clip low);  r=1.3 -> max(2.6, 2.4)
#                   = 2.6
ROW0 = [-1.2, -0.7]
ROW1 = [2.2, 1.6, 2.6]


def loss(**kwargs: object) -> tuple[torch.Tensor, dict[str, float]]:
    return policy_loss(LOGPROBS, OLD, ADV, MASK, **kwargs)


@pytest.mark.parametrize(
    ("agg", "expected"),
    [
        ("token-mean", (sum(ROW0) + sum(ROW1)) / 5),  # 4.5 / 5 = 0.9
        ("seq-mean-token-mean", (sum(ROW0) / 2 + sum(ROW1) / 3) / 2),  # (−0.95 + 2.1333) / 2
        ("seq-mean-token-sum", (sum(ROW0) + sum(ROW1)) / 2),  # 2.25
        ("seq-mean-token-sum-norm", (sum(ROW0) + sum(ROW1)) / (2 * 3)),  # B · T = 6
    ],
)
def test_ppo_clip_values_per_aggregation(agg: str, expected: float) -> None:
    value, stats = loss(agg=agg)
    assert float(value) == pytest.approx(expected, abs=1e-12)
    assert stats["clip_frac_low"] == pytest.approx(1 / 5)
    assert stats["clip_frac_high"] == pytest.approx(1 / 5)
    assert stats["ratio_mean"] == pytest.approx((1.5 + 0.7 + 1.1 + 0.7 + 1.3) / 5)
    assert stats["dual_clip_frac"] == 0.0


def test_sum_norm_uses_max_length() -> None:
    value, _ = loss(agg="seq-mean-token-sum-norm", max_length=10)
    assert float(value) == pytest.approx(4.5 / (2 * 10))


def test_asymmetric_clip_higher() -> None:
    # ε_high = 0.6: row 0, r=1.5 is no longer clipped -> −1.5 instead of −1.2
    value, stats = loss(clip_high=0.6)
    assert float(value) == pytest.approx((-1.5 - 0.7 + sum(ROW1)) / 5)
    assert stats["clip_frac_high"] == 0.0


def test_dual_clip() -> None:
    # one response, A = −2, ratios 4 and 1: PPO gives max(8, 2.4) = 8 and 2;
    # dual clip c = 3 caps at −A c = 6
    lp = torch.zeros(1, 2, dtype=D)
    old = lp - torch.tensor([[4.0, 1.0]], dtype=D).log()
    mask = torch.ones(1, 2, dtype=torch.bool)
    adv = torch.tensor([-2.0], dtype=D)
    plain, _ = policy_loss(lp, old, adv, mask)
    assert float(plain) == pytest.approx((8 + 2) / 2)
    dual, stats = policy_loss(lp, old, adv, mask, dual_clip=3.0)
    assert float(dual) == pytest.approx((6 + 2) / 2)
    assert stats["dual_clip_frac"] == pytest.approx(0.5)


def test_sequence_ratio_gspo() -> None:
    # s_0 = exp(mean log r) = sqrt(1.5 · 0.7); s_1 = (1.1 · 0.7 · 1.3)^(1/3)
    s0, s1 = math.sqrt(1.5 * 0.7), (1.1 * 0.7 * 1.3) ** (1 / 3)
    value, _ = loss(ratio_level="sequence", agg="seq-mean-token-mean")
    assert float(value) == pytest.approx((-1 * s0 + 2 * s1) / 2)
    # GSPO's clip 3e-4 / 4e-4: s_0 = 1.0247 > 1.0004 with A > 0 -> clipped to 1.0004;
    # s_1 = 1.00033 lies inside [0.9997, 1.0004]
    value, _ = loss(ratio_level="sequence", agg="seq-mean-token-mean", clip_low=3e-4,
                    clip_high=4e-4)
    assert float(value) == pytest.approx((-1.0004 + 2 * s1) / 2)


def test_plain_policy_gradient() -> None:
    # −A r, no clip: row 0: −(1.5 + 0.7) = −2.2; row 1: 2 (1.1 + 0.7 + 1.3) = 6.2
    value, stats = loss(loss_type="pg")
    assert float(value) == pytest.approx((-2.2 + 6.2) / 5)
    assert stats["clip_frac_low"] == stats["clip_frac_high"] == 0.0


def test_weights_multiply_each_response() -> None:
    # w = [2, 0.5]: (2 · (−1.9) + 0.5 · 6.4) / 5
    value, _ = loss(weights=torch.tensor([2.0, 0.5], dtype=D))
    assert float(value) == pytest.approx((2 * sum(ROW0) + 0.5 * sum(ROW1)) / 5)


def test_importance_weights_multiply_each_token_of_the_policy_term_only() -> None:
    # ρ = [[2, 0.5, 9], [1, 1, 3]]: the policy term's tokens scaled; the KL term is not
    rho = torch.tensor([[2.0, 0.5, 9.0], [1.0, 1.0, 3.0]], dtype=D)
    value, stats = loss(is_weights=rho)
    by_hand = (2 * ROW0[0] + 0.5 * ROW0[1] + ROW1[0] + ROW1[1] + 3 * ROW1[2]) / 5
    assert float(value) == pytest.approx(by_hand) and stats["pg_loss"] == pytest.approx(by_hand)
    ref = LOGPROBS - 0.3
    with_kl, _ = loss(is_weights=rho, ref_logprobs=ref, kl_coef=0.1)
    kl = kl_penalty(LOGPROBS, ref, "k3")
    assert float(with_kl) == pytest.approx(by_hand + 0.1 * float(kl[MASK].sum()) / 5)
    ones, _ = loss(is_weights=torch.ones_like(rho))
    assert float(ones) == pytest.approx(float(loss()[0]))


def test_truncated_importance_weights_by_hand() -> None:
    trainer = torch.tensor([[-1.0, -2.0, 0.0], [-0.5, -3.0, -1.0]], dtype=D)
    ratio = torch.tensor([[1.0, 3.0, 1.0], [0.5, 2.5, 1.0]], dtype=D)
    sampler = trainer - ratio.log()
    sampler[0, 2] = -math.inf  # padding garbage under the mask
    weights, stats = truncated_importance_weights(trainer, sampler, MASK, cap=2.0)
    expected = torch.tensor([[1.0, 2.0, 0.0], [0.5, 2.0, 1.0]], dtype=D)
    assert torch.allclose(weights, expected)
    assert stats["clipped_share"] == pytest.approx(2 / 5)
    assert stats["ratio_mean"] == pytest.approx((1 + 3 + 0.5 + 2.5 + 1) / 5)
    assert stats["abs_log_ratio_mean"] == pytest.approx(
        float(ratio.log().abs()[MASK].sum()) / 5)
    same, stats = truncated_importance_weights(trainer, trainer, MASK, cap=1.0)
    assert torch.equal(same, MASK.to(D)) and stats["clipped_share"] == 0.0
    with pytest.raises(ValueError, match="cap must be >= 1"):
        truncated_importance_weights(trainer, trainer, MASK, cap=0.5)
    with pytest.raises(ValueError, match="sampler_logprobs"):
        truncated_importance_weights(trainer, trainer[:, :2], MASK, cap=2.0)


def test_kl_estimators() -> None:
    lp = torch.tensor([-1.0], dtype=D)
    ref = torch.tensor([-2.0], dtype=D)
    # δ = log π_ref − log π = −1
    assert float(kl_penalty(lp, ref, "k1")) == pytest.approx(1.0)  # −δ
    assert float(kl_penalty(lp, ref, "k2")) == pytest.approx(0.5)  # δ² / 2
    assert float(kl_penalty(lp, ref, "k3")) == pytest.approx(math.exp(-1))  # e^δ − δ − 1
    with pytest.raises(ValueError, match="kl_estimator"):
        kl_penalty(lp, ref, "k4")  # type: ignore[arg-type]


def test_kl_term_in_loss() -> None:
    # on-policy (r = 1), A = 0: loss = β · mean k3 = 0.1 · (e^−1 + 0) / 2
    lp = torch.tensor([[-1.0, -1.0]], dtype=D)
    ref = torch.tensor([[-2.0, -1.0]], dtype=D)
    mask = torch.ones(1, 2, dtype=torch.bool)
    value, stats = policy_loss(lp, lp, torch.zeros(1, dtype=D), mask, ref_logprobs=ref,
                               kl_coef=0.1)
    assert float(value) == pytest.approx(0.1 * math.exp(-1) / 2)
    assert stats["kl"] == pytest.approx(math.exp(-1) / 2)


def test_kl_penalized_rewards() -> None:
    # k1 = log π − log π_ref: row 0: 0.5 − 0.5 = 0; row 1: −1 (padding ignored)
    lp = torch.tensor([[-1.0, -1.0], [-2.0, -math.inf]], dtype=D)
    ref = torch.tensor([[-1.5, -0.5], [-1.0, math.nan]], dtype=D)
    mask = torch.tensor([[True, True], [True, False]])
    got = kl_penalized_rewards(torch.tensor([1.0, 0.0], dtype=D), lp, ref, mask, kl_coef=0.1)
    assert got.tolist() == pytest.approx([1.0, 0.1])
    # k3 = e^δ − δ − 1 with δ = ref − lp: row 0: (e^−0.5 + 0.5 − 1) + (e^0.5 − 0.5 − 1)
    got = kl_penalized_rewards(torch.tensor([1.0, 0.0], dtype=D), lp, ref, mask, kl_coef=1.0,
                               kl_estimator="k3")
    row0 = (math.exp(-0.5) - 0.5) + (math.exp(0.5) - 1.5)
    assert got.tolist() == pytest.approx([1.0 - row0, 0.0 - (math.exp(1) - 2)])


def test_aggregate_all_masked_rows() -> None:
    values = torch.tensor([[1.0, 2.0], [5.0, math.nan]])
    mask = torch.tensor([[True, True], [False, False]])
    assert float(aggregate(values, mask, "token-mean")) == pytest.approx(1.5)
    assert float(aggregate(values, mask, "seq-mean-token-mean")) == pytest.approx(0.75)
    assert float(aggregate(values, mask, "seq-mean-token-sum")) == pytest.approx(1.5)
    with pytest.raises(ValueError, match="unknown agg"):
        aggregate(values, mask, "mean")


def test_all_masked_batch_gives_zero_loss_with_gradient() -> None:
    lp = torch.full((2, 3), -1.0, requires_grad=True)
    mask = torch.zeros(2, 3, dtype=torch.bool)
    for agg in ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"):
        value, _ = policy_loss(lp, None, torch.ones(2), mask, agg=agg)
        assert float(value.detach()) == 0.0
        (grad,) = torch.autograd.grad(value, lp)
        assert torch.all(grad == 0)


def test_padding_garbage_is_ignored() -> None:
    lp = LOGPROBS.clone()
    old = OLD.clone()
    lp[0, 2], old[0, 2] = -math.inf, math.nan
    ref = torch.zeros_like(lp)
    ref[0, 2] = math.inf
    value, _ = policy_loss(lp, old, ADV, MASK, ref_logprobs=ref, kl_coef=0.1)
    assert math.isfinite(float(value))


def test_nonfinite_inputs_error() -> None:
    lp = LOGPROBS.clone()
    lp[1, 0] = math.nan
    with pytest.raises(ValueError, match="logprobs contains NaN"):
        policy_loss(lp, OLD, ADV, MASK)
    with pytest.raises(ValueError, match="advantages contains NaN"):
        policy_loss(LOGPROBS, OLD, torch.tensor([math.inf, 0.0], dtype=D), MASK)


def test_shape_errors_name_the_tensors() -> None:
    with pytest.raises(ValueError, match="old_logprobs"):
        policy_loss(LOGPROBS, OLD[:, :2], ADV, MASK)
    with pytest.raises(ValueError, match="mask"):
        policy_loss(LOGPROBS, OLD, ADV, MASK[:, :2])
    with pytest.raises(ValueError, match="advantages must have shape"):
        policy_loss(LOGPROBS, OLD, ADV[:1], MASK)
    with pytest.raises(ValueError, match="weights must have shape"):
        policy_loss(LOGPROBS, OLD, ADV, MASK, weights=torch.ones(3))
    with pytest.raises(ValueError, match="ref_logprobs"):
        policy_loss(LOGPROBS, OLD, ADV, MASK, ref_logprobs=torch.zeros(2, 4))
    with pytest.raises(ValueError, match="needs ref_logprobs"):
        policy_loss(LOGPROBS, OLD, ADV, MASK, kl_coef=0.1)


def test_bad_options_error() -> None:
    with pytest.raises(ValueError, match="unknown policy loss 'ppo2'"):
        loss(loss_type="ppo2")
    with pytest.raises(ValueError, match="ratio_level"):
        loss(ratio_level="batch")
    with pytest.raises(ValueError, match="dual_clip"):
        loss(dual_clip=0.5)


def test_token_level_advantages_accepted() -> None:
    value, _ = policy_loss(LOGPROBS, OLD, ADV[:, None].expand(2, 3), MASK)
    assert float(value) == pytest.approx(0.9)


# ---------------------------------------------------------------- properties


@FAST
@given(batch=st.integers(1, 5), width=st.integers(1, 6), seed=st.integers(0, 10_000))
def test_on_policy_token_mean_is_minus_mean_advantage(batch: int, width: int, seed: int) -> None:
    lp, mask = token_batch(batch, width, seed)
    adv = torch.randn(batch, generator=torch.Generator().manual_seed(seed), dtype=D)
    value, stats = policy_loss(lp, lp, adv, mask, agg="token-mean")
    tokens = mask.sum()
    expected = -(adv[:, None] * mask).sum() / tokens if tokens else torch.tensor(0.0)
    assert float(value) == pytest.approx(float(expected), abs=1e-9)
    assert stats["clip_frac_low"] == stats["clip_frac_high"] == 0.0


@FAST
@given(batch=st.integers(1, 5), width=st.integers(1, 6), seed=st.integers(0, 10_000),
       agg=st.sampled_from(["token-mean", "seq-mean-token-mean", "seq-mean-token-sum",
                            "seq-mean-token-sum-norm"]),
       ratio_level=st.sampled_from(["token", "sequence"]),
       loss_type=st.sampled_from(["ppo", "pg"]))
def test_descent_direction_has_the_sign_of_the_advantage(
    batch: int, width: int, seed: int, agg: str, ratio_level: str, loss_type: str
) -> None:
    """−∂loss/∂log π_it has the sign of A_i wherever the token is not clipped (at r = 1 no
    token is clipped); masked tokens get no gradient."""
    lp, mask = token_batch(batch, width, seed)
    gen = torch.Generator().manual_seed(seed + 1)
    adv = torch.randn(batch, generator=gen, dtype=D)
    old = lp + 0.05 * torch.randn(batch, width, generator=gen, dtype=D)  # small off-policy
    lp = lp.clone().requires_grad_(True)
    value, _ = policy_loss(lp, old, adv, mask, agg=agg, ratio_level=ratio_level,
                           loss_type=loss_type, clip_low=0.5, clip_high=0.5)
    (grad,) = torch.autograd.grad(value, lp)
    descent = -grad
    live = mask & (adv[:, None] != 0)
    assert torch.all(torch.sign(descent[live]) == torch.sign(adv[:, None].expand_as(lp)[live]))
    assert torch.all(grad[~mask] == 0)


@FAST
@given(batch=st.integers(1, 5), width=st.integers(1, 6), seed=st.integers(0, 10_000))
def test_unit_weights_change_nothing(batch: int, width: int, seed: int) -> None:
    lp, mask = token_batch(batch, width, seed)
    adv = torch.randn(batch, generator=torch.Generator().manual_seed(seed), dtype=D)
    plain, _ = policy_loss(lp, lp - 0.1, adv, mask, agg="seq-mean-token-mean")
    weighted, _ = policy_loss(lp, lp - 0.1, adv, mask, agg="seq-mean-token-mean",
                              weights=torch.ones(batch, dtype=D))
    assert float(weighted) == float(plain)


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum",
                                 "seq-mean-token-sum-norm"])
def test_micro_batches_with_global_denominators_add_up_to_the_full_batch(agg: str) -> None:
    # 4 responses, lengths 1, 3, 2, 4; split into micro-batches [0, 1] and [2, 3], each
    # trimmed to its own padded width (2 would be padded to 3, 4 to 4).
    lengths = [1, 3, 2, 4]
    values = torch.arange(16, dtype=torch.float64).reshape(4, 4) / 10
    mask = torch.tensor([[t < n for t in range(4)] for n in lengths])
    full = aggregate(values, mask, agg, max_length=4)
    sizes = {"max_length": 4, "num_tokens": int(mask.sum()), "num_seqs": 4}
    first = aggregate(values[:2, :3], mask[:2, :3], agg, **sizes)
    second = aggregate(values[2:], mask[2:], agg, **sizes)
    assert torch.allclose(first + second, full)


def test_token_mean_global_denominator_by_hand() -> None:
    # micro-batch of one response with 2 tokens (0.5, 1.5) out of a batch of 8 tokens:
    # (0.5 + 1.5) / 8 = 0.25
    values = torch.tensor([[0.5, 1.5, 9.0]])
    mask = torch.tensor([[True, True, False]])
    assert float(aggregate(values, mask, "token-mean", num_tokens=8)) == 0.25
    assert float(aggregate(values, mask, "token-mean")) == 1.0  # (0.5 + 1.5) / 2
