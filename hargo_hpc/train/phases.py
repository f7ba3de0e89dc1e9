"""The phases of an RL step after generation, one function each (`train.step.finish_step` calls
them in order under verl's timers). Each takes what the phases before it returned:

    reward        collect_rewards   the step's RewardBatch (rank 0 waits, the others receive it;
                                    SQD sees it), then shape_rewards: DAPO's overlong shaping
    ref           reference_logprobs; sampler_correction (another engine's samples: vLLM)
    adv           compute_advantages: KL folded into the reward, the rows in the loss (scored,
                                    DAPO's dynamic sampling), the estimator's advantages, the
                                    weighting's weights (HARGO)
    update_actor  update_actor      the preset's update (`updates.update_for(loss)`)

Rewards, lengths and groups (and, for a weighting, the reference log-probs) are every rank's
rows (`StepRows`, gathered), so every rank computes the same whole-batch advantages and
weights, and keeps its own rows (`own`) for the update.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from hargo_hpc.algorithms.advantages import compute_advantages as estimate
from hargo_hpc.algorithms.dapo import dynamic_sampling_filter, overlong_penalty
from hargo_hpc.algorithms.losses import kl_penalized_rewards, truncated_importance_weights
from hargo_hpc.algorithms.presets import ResolvedAlgorithm
from hargo_hpc.algorithms.weighting import Weighting
from hargo_hpc.tasks.base import Example
from hargo_hpc.train.backend import distributed
from hargo_hpc.train.model.logprobs import token_logprobs
from hargo_hpc.train.rollout.generate import Generations
from hargo_hpc.train.rollout.generated import Rollout
from hargo_hpc.train.run import LoopState, RunContext, StepInterrupted
from hargo_hpc.train.updates import UpdateBatch, update_for

if TYPE_CHECKING:
    from hargo_hpc.train.rollout.rewards import RewardBatch


@dataclass(frozen=True)
class StepRows:
    """A step's rows as the phases see them: `rows`, `lengths`, `groups`, `truncated` are
    every rank's (row order), `mask` and `own` this rank's."""

    rows: list[Example]  # the example of every row
    own: slice  # this rank's rows among them
    mask: Tensor  # [n, T] bool: this rank's completion tokens
    lengths: Tensor  # [N] completion lengths
    groups: Tensor  # [N] group (prompt) index
    truncated: Tensor  # [N] bool: hit max_new_tokens


def step_rows(rollout: Rollout) -> StepRows:
    """The rollout's rows, this rank's gathered with the others' (`all_rows`)."""
    gen = rollout.gen
    world, rank = distributed.world_size(), distributed.rank()
    share = len(rollout.everything) // world
    G = len(rollout.stages) // max(len(rollout.everything), 1)
    return StepRows(rows=rollout.rows(), own=slice(rank * share * G, (rank + 1) * share * G),
                    mask=gen.completion_mask.bool(), lengths=all_rows(gen.completion_lengths),
                    groups=all_rows(gen.group_index + rank * share),
                    truncated=all_rows(gen.truncated))


def all_rows(rows: Tensor) -> Tensor:
    """Every rank's rows of `rows` ([n] or [n, T]) in rank order, on every rank; [n, T] ones
    padded with zeros (False) to the widest T. One process: `rows` itself."""
    if distributed.world_size() == 1:
        return rows
    parts = distributed.gather_objects(rows.detach().cpu())
    if rows.dim() == 2:
        width = max(part.shape[1] for part in parts)
        padded = []
        for part in parts:
            wide = part.new_zeros((part.shape[0], width))
            wide[:, :part.shape[1]] = part
            padded.append(wide)
        parts = padded
    return torch.cat(parts).to(rows.device)


# ---------------------------------------------------------------- reward


def submit_rewards(ctx: RunContext, state: LoopState, rollout: Rollout) -> Any:
    """Rank 0 submits every completion of the step (text rewards in process, GEMM requests to
    the handoff, each with its prompt's SQD stage's forbidden techniques); None elsewhere."""
    if not distributed.is_main():
        return None
    assert ctx.router is not None
    forbidden = ([None if s is None else s.forbid for s in rollout.stages]
                 if state.sqd is not None else None)
    return ctx.router.submit(rollout.step, rollout.rows(), rollout.texts, forbidden=forbidden)


def collect_rewards(ctx: RunContext, state: LoopState, rollout: Rollout) -> RewardBatch:
    """The RewardBatch of the whole step: rank 0 waits for it and the others receive it; under
    SQD the results go to SQD (`SqdRun.observe`, which may set a penalty) on every rank. A stop
    request during the wait (`RewardRouter.should_stop`) raises StepInterrupted on every rank,
    before anything of the step is kept."""
    from hargo_hpc.train.rollout.rewards import WaitInterrupted

    batch: RewardBatch | str | None = None
    if distributed.is_main() and ctx.router is not None:
        try:
            batch = ctx.router.collect(rollout.pending)
        except WaitInterrupted as err:
            batch = f"interrupted: {err}"
    batch = distributed.broadcast_object(batch)
    if isinstance(batch, str):
        raise StepInterrupted(batch)
    if state.sqd is not None:
        state.sqd.observe(rollout.step, rollout.rows(), rollout.texts, rollout.stages, batch)
    return batch


@dataclass(frozen=True)
class Rewards:
    """The step's rewards [N]: `task` as the tasks gave them, `shaped` = task + `overlong`."""

    batch: RewardBatch
    task: Tensor
    scored: Tensor  # bool: False rows are dropped from the loss
    overlong: Tensor  # R_len, 0 without overlong shaping
    shaped: Tensor


def shape_rewards(algorithm: ResolvedAlgorithm, batch: RewardBatch, lengths: Tensor,
                  limits: Sequence[int], device: torch.device) -> Rewards:
    """R_i = r_i + R_len(|y_i|), DAPO's overlong shaping (`dapo.overlong_penalty`: 0 up to
    L_max − L_cache, then falling linearly to −factor at L_max) when the preset has a buffer
    L_cache = `overlong_buffer_tokens(L_max)` > 0; else R_i = r_i. L_max is row i's own
    generation limit `limits[i]` (its task's budget: a yes/no answer is overlong long before
    a kernel is), and L_cache follows from it."""
    task = torch.tensor(batch.rewards, dtype=torch.float32, device=device)
    scored = torch.tensor(batch.scored, dtype=torch.bool, device=device)
    overlong = torch.zeros_like(task)
    shaping = False
    for limit in sorted(set(limits)):
        buffer = algorithm.overlong_buffer_tokens(limit)
        if buffer > 0:
            shaping = True
            rows = torch.tensor([i for i, own in enumerate(limits) if own == limit],
                                device=lengths.device)
            overlong[rows.to(device)] = overlong_penalty(
                lengths[rows], max_length=limit, buffer=buffer,
                factor=algorithm.overlong_penalty).to(task)
    shaped = task + overlong if shaping else task.clone()
    return Rewards(batch, task, scored, overlong, shaped)


# ---------------------------------------------------------------- ref


def reference_logprobs(ctx: RunContext, gen: Generations) -> Tensor | None:
    """The reference model's token log-probs of this rank's rows; None without a reference.
    A reference kept elsewhere than the rows (model.reference_device = "cpu" beside a GPU
    policy) gets them copied to its device, and its log-probs come back to the rows'."""
    if ctx.reference is None:
        return None
    where = next(ctx.reference.parameters()).device
    if where == gen.input_ids.device:
        return policy_logprobs(ctx, ctx.reference, gen)
    return token_logprobs(ctx.reference, gen.input_ids.to(where), gen.attention_mask.to(where),
                          gen.completion_start, ctx.logprob_micro,
                          temperature=ctx.sampling.temperature).to(gen.input_ids.device)


def policy_logprobs(ctx: RunContext, model: torch.nn.Module, gen: Generations) -> Tensor:
    """Token log-probs of the completions under `model`, no gradient, in micro-batches of
    `logprob_micro` rows, at the sampling temperature (the policy with its ZeRO-3 weights
    gathered once)."""
    gather = ctx.engine.gathered_parameters() if model is ctx.engine.module else (
        contextlib.nullcontext())
    with gather:
        return token_logprobs(model, gen.input_ids, gen.attention_mask, gen.completion_start,
                              ctx.logprob_micro, temperature=ctx.sampling.temperature)


def sampler_correction(ctx: RunContext, rollout: Rollout) -> tuple[Tensor | None,
                                                                  dict[str, float]]:
    """This rank's per-token weights for samples drawn by another engine than the trainer's
    (`losses.truncated_importance_weights` of the trainer's old log-probs against the
    sampler's, capped at `rollout.importance_sampling_cap`) and their stats, averaged over
    the ranks; (None, {}) for the HF backend, whose samples are the trainer's own."""
    sampled = rollout.gen.sampler_logprobs
    if sampled is None:
        return None, {}
    if rollout.old is None:
        raise RuntimeError("a sampler's log-probs without the trainer's old log-probs "
                           "(RunContext.needs_old must hold for this backend)")
    weights, stats = truncated_importance_weights(
        rollout.old, sampled, rollout.gen.completion_mask.bool(),
        ctx.config.rollout.importance_sampling_cap)
    every = distributed.gather_objects(stats) if distributed.world_size() > 1 else [stats]
    return weights, {f"sampler/{key}": sum(s[key] for s in every) / len(every)
                     for key in stats}


# ---------------------------------------------------------------- adv


@dataclass(frozen=True)
class Advantages:
    """What the `adv` phase decided, per row [N]: the rewards the advantages are of (KL folded
    in under kl_in_reward), the rows in the loss, advantages, and the weights (None: none)."""

    rewards: Tensor
    kl_penalty: Tensor
    keep: Tensor
    dynamic_sampling: dict[str, float]
    advantages: Tensor
    weights: Tensor | None
    weight_stats: dict[str, Any]

    @property
    def kept(self) -> Tensor:
        """The indices of the rows in the loss."""
        return self.keep.nonzero().squeeze(-1)


def compute_advantages(algorithm: ResolvedAlgorithm, weighting: Weighting | None,
                       rewards: Rewards, rows: StepRows, old: Tensor | None,
                       ref: Tensor | None) -> Advantages:
    """The `adv` phase: `add_kl_penalty`, `rows_in_loss`, the estimator's advantages over the
    rows in the loss (groups = the prompts; 0 elsewhere), then `weigh`."""
    shaped, kl = add_kl_penalty(algorithm, rewards.shaped, rows, old, ref)
    keep, dyn = rows_in_loss(algorithm, shaped, rewards.scored, rows.groups)
    idx = keep.nonzero().squeeze(-1)
    advantages = torch.zeros_like(shaped)
    if algorithm.estimator is not None and idx.numel():
        advantages[idx] = estimate(algorithm.estimator, shaped[idx], rows.groups[idx])
    weights, stats = weigh(weighting, shaped, advantages, idx, rows, ref)
    return Advantages(shaped, kl, keep, dyn, advantages, weights, stats)


def add_kl_penalty(algorithm: ResolvedAlgorithm, rewards: Tensor, rows: StepRows,
                   old: Tensor | None, ref: Tensor | None) -> tuple[Tensor, Tensor]:
    """(R', R − R'): under kl_in_reward presets with kl_coef β > 0, R'_i = R_i − β Σ_t m_it
    KL_t(π_old ‖ π_ref) (`losses.kl_penalized_rewards`, the `kl_estimator`'s per-token KL);
    else R' = R and a zero penalty."""
    if not (algorithm.kl_in_reward and algorithm.kl_coef > 0):
        return rewards, torch.zeros_like(rewards)
    assert old is not None and ref is not None
    shaped = all_rows(kl_penalized_rewards(
        rewards[rows.own], old, ref, rows.mask, kl_coef=algorithm.kl_coef,
        kl_estimator=algorithm.kl_estimator))  # type: ignore[arg-type]
    return shaped, rewards - shaped


def rows_in_loss(algorithm: ResolvedAlgorithm, rewards: Tensor, scored: Tensor,
                 groups: Tensor) -> tuple[Tensor, dict[str, float]]:
    """(keep [N] bool, stats): the scored rows, less, under DAPO's dynamic sampling, the rows of
    every group whose scored rewards are all equal (`dapo.dynamic_sampling_filter`)."""
    keep = scored.clone()
    dyn: dict[str, float] = {}
    if algorithm.dynamic_sampling:
        informative, dyn = dynamic_sampling_filter(rewards[scored], groups[scored])
        keep[scored.nonzero().squeeze(-1)] = informative.to(keep.device)
    return keep, dyn


def weigh(weighting: Weighting | None, rewards: Tensor, advantages: Tensor, idx: Tensor,
          rows: StepRows, ref: Tensor | None) -> tuple[Tensor | None, dict[str, Any]]:
    """The weighting's weights w_i of the rows in the loss (`idx`), 1 elsewhere, and its stats;
    (None, {}) without a weighting or without a row in the loss. The weighting updates its
    running state (HARGO's σ̄) here, once per step."""
    if weighting is None or not idx.numel():
        return None, {}
    assert ref is not None
    labels = [rows.rows[i].task for i in idx.tolist()] if weighting.needs_labels else None
    w, stats = weighting(rewards[idx], rows.groups[idx], all_rows(ref)[idx],
                         all_rows(rows.mask)[idx], advantages=advantages[idx], labels=labels)
    weights = torch.ones_like(rewards)
    weights[idx] = w.to(rewards)
    return weights, stats


# ---------------------------------------------------------------- update_actor


def update_actor(ctx: RunContext, rollout: Rollout, rows: StepRows, adv: Advantages,
                 ref: Tensor | None, is_weights: Tensor | None = None) -> dict[str, float]:
    """The preset's update (`updates.update_for(loss)`) on this rank's rows, those not in the loss
    masked out (`is_weights`: `sampler_correction`'s); returns its statistics."""
    gen, own = rollout.gen, rows.own
    world, rank = distributed.world_size(), distributed.rank()
    batch = UpdateBatch(gen.input_ids, gen.attention_mask, gen.completion_start,
                        rows.mask & adv.keep[own, None], adv.keep[own], adv.rewards[own],
                        rows.groups[own], adv.advantages[own],
                        None if adv.weights is None else adv.weights[own], rollout.old, ref,
                        rollout.examples(rank, world), is_weights)
    return update_for(ctx.algorithm.loss)(ctx.update_context(), batch)
