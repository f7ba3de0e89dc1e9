"""The updates of an RL step, one per kind of loss a preset names (`ResolvedAlgorithm.loss`).

`update_for(loss)(context, batch)` runs `num_iterations` passes over the step's rollout batch
and returns the step's update statistics: `policy_update` for any policy loss (ppo, pg, or a
registered one), `dpo_update` for DPO pairs, `sft_preset_update` for the `sft` preset. `plan`
cuts a pass into optimizer steps of `accum` micro-batches. The denominators, the summed-loss
convention and the multi-rank rules: docs/training.md, "The update and its denominators" and
"Several ranks".
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from hargo_hpc.algorithms.losses import policy_loss
from hargo_hpc.algorithms.preference import dpo_loss, dpo_pairs
from hargo_hpc.algorithms.presets import ResolvedAlgorithm
from hargo_hpc.tasks.base import Example
from hargo_hpc.train import metrics as m
from hargo_hpc.train.backend import distributed
from hargo_hpc.train.model.logprobs import token_logprobs, token_logprobs_and_entropy
from hargo_hpc.train.sft import (
    SftBatch,
    build_sft_batch,
    preset_item,
    sft_update,
    split,
)


@dataclass
class UpdateContext:
    """What every update needs besides the batch."""

    engine: Any
    algorithm: ResolvedAlgorithm
    num_iterations: int
    opt_steps: int  # optimizer steps per pass
    accum: int  # micro-batches per optimizer step
    temperature: float  # the sampling temperature: log-probs are taken at it
    max_new_tokens: int
    tokenizer: Any
    prompt_format: str
    user_text: Callable[[Example], str]
    budgets: Mapping[str, int]  # each task's generation budget in tokens (config.token_budgets)


@dataclass
class UpdateBatch:
    """The rollout batch as the update sees it: rows not in the loss have `loss_mask` 0."""

    input_ids: Tensor
    attention_mask: Tensor
    completion_start: int
    loss_mask: Tensor  # [N, T] bool
    keep: Tensor  # [N] bool: rows in the loss
    rewards: Tensor
    groups: Tensor
    advantages: Tensor
    weights: Tensor | None
    old: Tensor | None
    ref: Tensor | None
    examples: list[Example]  # the step's prompts (one per group)
    is_weights: Tensor | None = None  # [N, T] another sampling engine's correction (vLLM)


@dataclass(frozen=True)
class MicroBatch:
    """A micro-batch's rows of an UpdateBatch, cut after their longest completion."""

    input_ids: Tensor
    attention_mask: Tensor
    loss_mask: Tensor
    advantages: Tensor
    weights: Tensor | None
    old: Tensor | None
    ref: Tensor | None
    is_weights: Tensor | None = None


def completion_lengths(batch: UpdateBatch, index: Tensor | None = None) -> Tensor:
    """Each row's completion length in tokens (its real tokens after `completion_start`): of
    every row, or of the rows `index` picks."""
    mask = batch.attention_mask if index is None else batch.attention_mask[index]
    return mask[:, batch.completion_start:].sum(dim=-1)


def micro_batch(batch: UpdateBatch, rows: Sequence[int]) -> MicroBatch:
    """Rows `rows` of `batch`, every per-token tensor cut after the rows' longest completion:
    the columns beyond it are padding in each of these rows (a causal model's logits of the
    real tokens do not depend on them, and the loss has no token there), so a pass costs what
    its own rows need, a micro-batch of yes/no answers not a kernel's width. Exact."""
    index = torch.tensor(list(rows), dtype=torch.long, device=batch.input_ids.device)
    start = batch.completion_start
    longest = int(completion_lengths(batch, index).max().item()) if rows else 0
    width = max(1, longest)

    def tokens(t: Tensor | None) -> Tensor | None:
        if t is None:
            return None
        picked = t[index]
        return picked[:, :width] if picked.dim() == 2 else picked

    return MicroBatch(
        input_ids=batch.input_ids[index, :start + width],
        attention_mask=batch.attention_mask[index, :start + width],
        loss_mask=batch.loss_mask[index, :width], advantages=tokens(batch.advantages),
        weights=tokens(batch.weights), old=tokens(batch.old), ref=tokens(batch.ref),
        is_weights=tokens(batch.is_weights))


def plan(items: Sequence[Any], opt_steps: int, accum: int) -> list[list[list[Any]]]:
    """Optimizer steps → micro-batches → items: consecutive, as even as possible."""
    return [split(chunk, accum) for chunk in split(items, opt_steps)]


def plan_by_length(batch: UpdateBatch, opt_steps: int, accum: int) -> list[list[list[int]]]:
    """`plan` of the batch's rows, each optimizer step's rows ordered longest completion first
    before they are split into micro-batches, so rows of like length share one and `micro_batch`
    cuts each to its own width. The optimizer steps keep their rows, and a step's loss has the
    step's denominators whatever its micro-batches (`Engine.backward`): only the order of the
    floating-point sums changes."""
    lengths = completion_lengths(batch).tolist()
    steps = split(list(range(len(lengths))), opt_steps)
    return [split(sorted(rows, key=lambda i: -lengths[i]), accum) for rows in steps]


@contextlib.contextmanager
def training_mode(engine: Any) -> Iterator[None]:
    engine.train()
    try:
        yield
    finally:
        engine.eval()


def merged(stats: m.WeightedMean) -> m.WeightedMean:
    """`stats` of every rank merged (Σ_r Σ w·x / Σ_r Σ w); one process: `stats` itself."""
    if distributed.world_size() == 1:
        return stats
    out = m.WeightedMean()
    for total, weight in distributed.gather_objects((stats.total, stats.weight)):
        for key, value in total.items():
            out.total[key] = out.total.get(key, 0.0) + value
            out.weight[key] = out.weight.get(key, 0.0) + weight[key]
    return out


def _finish(engine: Any, grad_norms: list[float], losses: list[float]) -> dict[str, Any]:
    return {"loss": sum(losses) / len(losses) if losses else None,
            "grad_norm": sum(grad_norms) / len(grad_norms) if grad_norms else None}


def _spread(mean: float | None, mean_sq: float | None) -> float | None:
    """Token-weighted std of the importance ratio, sqrt(E[r²] − E[r]²) (0 when round-off makes
    it negative)."""
    if mean is None or mean_sq is None:
        return None
    return max(0.0, mean_sq - mean * mean) ** 0.5


def _step_engine(engine: Any, grad_norms: list[float]) -> None:
    if engine.step() and engine.grad_norm is not None:
        grad_norms.append(engine.grad_norm)


def policy_update(run: UpdateContext, batch: UpdateBatch) -> dict[str, Any]:
    """PPO-clip or plain policy gradient (`policy_loss` with the preset's kwargs); the
    denominators are the optimizer step's kept tokens and kept rows."""
    engine, alg = run.engine, run.algorithm
    kwargs = alg.policy_loss_kwargs(run.max_new_tokens)
    stats, entropy = m.WeightedMean(), m.WeightedMean()
    grad_norms: list[float] = []
    losses: list[float] = []
    pg_losses: list[float] = []
    with training_mode(engine):
        for iteration in range(run.num_iterations):
            for step_rows in plan_by_length(batch, run.opt_steps, run.accum):
                flat = [i for micro in step_rows for i in micro]
                num_tokens = distributed.sum_across_ranks(float(batch.loss_mask[flat].sum()))
                num_seqs = int(distributed.sum_across_ranks(float(batch.keep[flat].sum())))
                step_loss = step_pg = 0.0
                for micro in step_rows:
                    mb = micro_batch(batch, micro)
                    forward = (engine, mb.input_ids, mb.attention_mask, batch.completion_start,
                               len(micro))
                    if iteration == 0:  # the entropy is logged for the first pass only
                        lp, ent = token_logprobs_and_entropy(
                            *forward, temperature=run.temperature, grad=True)
                    else:
                        lp = token_logprobs(*forward, temperature=run.temperature, grad=True)
                    part = mb.loss_mask
                    loss, s = policy_loss(lp, mb.old, mb.advantages, part, ref_logprobs=mb.ref,
                                          weights=mb.weights, is_weights=mb.is_weights,
                                          num_tokens=num_tokens,
                                          num_seqs=num_seqs, **kwargs)
                    tokens = float(part.sum())
                    step_pg += s.pop("pg_loss")
                    stats.add(s, tokens)
                    if iteration == 0:
                        entropy.add({"entropy": m.masked_mean(ent.detach(), part.float())},
                                    tokens)
                    step_loss += engine.backward(loss)
                    _step_engine(engine, grad_norms)
                losses.append(distributed.sum_across_ranks(step_loss))
                pg_losses.append(distributed.sum_across_ranks(step_pg))
    stats, entropy = merged(stats), merged(entropy)
    low, high = stats.get("clip_frac_low"), stats.get("clip_frac_high")
    out = _finish(engine, grad_norms, losses)
    out.update({
        "pg_loss": sum(pg_losses) / len(pg_losses) if pg_losses else None,
        "kl": stats.get("kl"),
        "entropy": entropy.get("entropy"), "approx_kl": stats.get("approx_kl"),
        "ratio_mean": stats.get("ratio_mean"),
        "ratio_std": _spread(stats.get("ratio_mean"), stats.get("ratio_sq_mean")),
        "clip_ratio/low_mean": low, "clip_ratio/high_mean": high,
        "clip_ratio/region_mean": None if low is None or high is None else low + high,
        "clip_ratio/dual": stats.get("dual_clip_frac"),
    })
    return out


def dpo_update(run: UpdateContext, batch: UpdateBatch) -> dict[str, Any]:
    """DPO on one pair per group (best vs worst reward among the rows in the loss); each
    micro-batch holds whole pairs, its mean loss scaled by its share of the optimizer step's
    pairs."""
    engine = run.engine
    assert batch.ref is not None
    idx = batch.keep.nonzero().squeeze(-1)
    chosen, rejected = dpo_pairs(batch.rewards[idx], batch.groups[idx])
    pairs = list(zip(idx[chosen].tolist(), idx[rejected].tolist(), strict=True))
    stats = m.WeightedMean()
    grad_norms: list[float] = []
    losses: list[float] = []
    with training_mode(engine):
        for _ in range(run.num_iterations):
            for step_pairs in plan(pairs, run.opt_steps, run.accum):
                total = distributed.sum_across_ranks(sum(len(micro) for micro in step_pairs))
                step_loss = 0.0
                for micro in step_pairs:
                    rows = [i for pair in micro for i in pair] or [0]
                    index = torch.tensor(rows, device=batch.input_ids.device)
                    lp = token_logprobs(engine, batch.input_ids[index],
                                        batch.attention_mask[index], batch.completion_start,
                                        len(rows), temperature=run.temperature,
                                        grad=True)
                    if micro:
                        k = len(micro)
                        loss, s = dpo_loss(
                            lp, batch.ref[index], batch.loss_mask[index],
                            torch.tensor([1.0, 0.0] * k, device=lp.device),
                            torch.arange(k, device=lp.device).repeat_interleave(2),
                            beta=run.algorithm.dpo_beta)
                        loss = loss * (k / total)
                        stats.add(s, float(k))
                    else:  # no pair here: a zero loss keeps the engine's micro-batch count
                        loss = lp.sum() * 0.0
                    step_loss += engine.backward(loss)
                    _step_engine(engine, grad_norms)
                losses.append(distributed.sum_across_ranks(step_loss))
    stats = merged(stats)
    out = _finish(engine, grad_norms, losses)
    out.update({"dpo/pairs": distributed.sum_across_ranks(len(pairs)),
                "dpo/reward_accuracy": stats.get("reward_accuracy"),
                "dpo/margin": stats.get("margin"), "dpo/chosen_reward": stats.get("chosen_reward"),
                "dpo/rejected_reward": stats.get("rejected_reward")})
    return out


def sft_preset_update(run: UpdateContext, batch: UpdateBatch) -> dict[str, Any]:
    """The `sft` preset: supervised steps on the reference answers of the step's prompts (a
    GEMM prompt: one of its corpus kernels that fit its budget, `sft.preset_item`; each target
    cut at its task's budget, as a sampled completion is); the rollout is still sampled
    and rewarded, for metrics comparable with the RL methods."""
    engine = run.engine
    items = [preset_item(e, run.user_text(e), tokenizer=run.tokenizer,
                         max_tokens=run.budgets[e.task]) for e in batch.examples]
    full = build_sft_batch(items, run.tokenizer, run.prompt_format,
                           max_target_tokens=run.budgets, device=batch.input_ids.device)
    grad_norms: list[float] = []
    losses: list[float] = []
    nll = m.WeightedMean()
    tokens = 0.0
    with training_mode(engine):
        for _ in range(run.num_iterations):
            for chunk in split(list(range(len(items))), run.opt_steps):
                index = torch.tensor(chunk or [0], device=full.input_ids.device)
                part = SftBatch(full.input_ids[index], full.attention_mask[index],
                                full.completion_start)
                s = sft_update(engine, part, accum=run.accum, agg=run.algorithm.agg)
                if engine.grad_norm is not None:
                    grad_norms.append(engine.grad_norm)
                losses.append(s["loss"])
                nll.add({"nll": s["nll"]}, s["tokens"])
                tokens = s["tokens"]
    out = _finish(engine, grad_norms, losses)
    out.update({"sft/nll": nll.get("nll"), "sft/tokens": tokens})
    return out


Update = Callable[[UpdateContext, UpdateBatch], dict[str, Any]]
OWN_UPDATES: Mapping[str, Update] = {"dpo": dpo_update, "sft": sft_preset_update}


def update_for(loss: str) -> Update:
    """The update of the method's `loss`: DPO's and SFT's own, else the policy-gradient
    update with that policy loss (ppo, pg, or any registered one)."""
    return OWN_UPDATES.get(loss, policy_update)
