"""One RL step, read top to bottom: `start_step` (gen, and what needs the sampling policy)
then `finish_step` (the rest, one phase a block, in verl's phase names: gen, reward,
old_log_prob, ref, adv, update_actor); `rl_step` is the two in turn, `refill` DAPO's extra
generation rounds. What each phase does: docs/training.md, "One step"; what the update does
comes from the resolved preset, never from the method's name.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from hargo_hpc.algorithms.dapo import dynamic_sampling_filter
from hargo_hpc.tasks.base import Example
from hargo_hpc.train import metrics as m
from hargo_hpc.train.backend import distributed
from hargo_hpc.train.phases import (
    collect_rewards,
    compute_advantages,
    policy_logprobs,
    reference_logprobs,
    sampler_correction,
    shape_rewards,
    step_rows,
    submit_rewards,
    update_actor,
)
from hargo_hpc.train.rollout.balance import balanced_order
from hargo_hpc.train.rollout.generate import Generations, derive_seed
from hargo_hpc.train.rollout.generated import Rollout, by_rank
from hargo_hpc.train.rollout.rewards import RewardBatch
from hargo_hpc.train.run import LoopState, RunContext, TrainError
from hargo_hpc.train.step_record import rollout_rows, step_record

__all__ = ["Rollout", "finish_step", "resume_rollout", "rl_step", "start_step"]


def rl_step(ctx: RunContext, state: LoopState, step: int
            ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """One synchronous RL step (the phases of the module docstring): `finish_step` of
    `start_step`; returns the metrics record and the rollout rows."""
    return finish_step(ctx, state, start_step(ctx, state, step))


def start_step(ctx: RunContext, state: LoopState, step: int, prompts: int | None = None,
               first: int = 0) -> Rollout:
    """The `gen` phase and what must happen under the sampling policy: draw the prompts,
    sample G completions each, take their log-probs under this policy when the update needs
    them (off-policy updates; always with rollout.max_staleness 1, since the update then comes
    after the policy moved), and submit the rewards (GEMM requests go to the bench now).

    Under W ranks every rank draws the same prompts (the same sampler, the same seed), puts
    them in `balanced_order` of their generation budgets, and generates for its contiguous
    share of that order (rank r: prompts r·P/W … (r+1)·P/W − 1, whole groups).
    Row g of the step's drawn prompt i samples its own stream,
    `derive_seed(derive_seed(run.seed, "rollout", step, i), g)` (the backend derives the
    second), so the completions do not depend on how many ranks share the step.
    Rank 0 submits every rank's completions. `prompts` (default rollout.prompts_per_step) and
    `first` (the index of its first prompt in the step, for its seeds) serve a refill round."""
    G = ctx.config.rollout.num_generations
    timer = m.PhaseTimer()
    world, rank = distributed.world_size(), distributed.rank()
    with timer("gen"):
        drawn = state.sampler.batch(  # every rank's
            ctx.config.rollout.prompts_per_step if prompts is None else prompts)
        # each prompt keeps the seed of its place in the draw; the ranks' shares balance work
        drawn_seeds = [derive_seed(ctx.config.run.seed, "rollout", step, first + i)
                       for i in range(len(drawn))]
        order = (balanced_order([ctx.sampling_of(e).max_new_tokens for e in drawn], world)
                 if ctx.config.rollout.balance_ranks else list(range(len(drawn))))
        everything = [drawn[i] for i in order]
        seeds = [drawn_seeds[i] for i in order]
        stages = [state.stage_of(e) for e in everything]
        texts = [ctx.prompt_of(e, stage) for e, stage in zip(everything, stages, strict=True)]
        share = len(everything) // world
        mine = slice(rank * share, (rank + 1) * share)
        gen = ctx.backend.generate(texts[mine], G,
                                   [ctx.sampling_of(e) for e in everything[mine]], seeds[mine])
    completions = [t for part in distributed.gather_objects(list(gen.texts)) for t in part]
    with timer("old_log_prob"):
        old = policy_logprobs(ctx, ctx.engine.module, gen) if ctx.needs_old else None
    rollout = Rollout(step, everything, texts, [s for s in stages for _ in range(G)], gen,
                      completions, old, ctx.engine.optimizer_steps, timer=timer)
    with timer("reward"):
        rollout.pending = submit_rewards(ctx, state, rollout)
    return rollout


def resume_rollout(ctx: RunContext, state: LoopState, saved: dict[str, Any],
                   examples: dict[tuple[str, str], Example]) -> Rollout:
    """The in-flight step of a checkpoint (`Rollout.state_dict`), its rewards submitted again
    under the same request ids (the handoff returns what it stored)."""
    stages = {s.name: s for s in ctx.config.sqd.stages}
    try:
        everything = [examples[(task, id_)] for task, id_ in saved["examples"]]
    except KeyError as err:
        raise TrainError(f"the checkpoint's in-flight step {saved['step']} names example "
                         f"{err.args[0]} that the training data no longer holds") from None
    rollout = Rollout(int(saved["step"]), everything, list(saved["prompts"]),
                      [None if n is None else stages[n] for n in saved["stages"]],
                      Generations(**saved["gen"]), list(saved["texts"]), saved["old"],
                      int(saved["policy_version"]))
    with rollout.timer("reward"):
        rollout.pending = submit_rewards(ctx, state, rollout)
    return rollout


def finish_step(ctx: RunContext, state: LoopState, rollout: Rollout
                ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Everything after generation, one phase a block; then the step's record and rollout
    rows, which describe the whole batch (every rank's rows)."""
    alg, timer = ctx.algorithm, rollout.timer
    lr = ctx.engine.lr  # what this step's first optimizer step uses
    staleness = ctx.engine.optimizer_steps - rollout.policy_version
    with timer("reward"):
        batch = collect_rewards(ctx, state, rollout)
    rounds = 1
    if alg.refill_rounds > 1:
        rollout, batch, rounds = refill(ctx, state, rollout, batch)
    rows = step_rows(rollout)
    with timer("reward"):
        limits = [ctx.sampling_of(row).max_new_tokens for row in rows.rows]
        rewards = shape_rewards(alg, batch, rows.lengths, limits,
                                rollout.gen.completion_ids.device)
    with timer("ref"):
        ref = reference_logprobs(ctx, rollout.gen)
        is_weights, sampler_stats = sampler_correction(ctx, rollout)
    with timer("adv"):
        adv = compute_advantages(alg, state.weighting, rewards, rows, rollout.old, ref)
    with timer("update_actor"):
        update = update_actor(ctx, rollout, rows, adv, ref, is_weights)
    record = step_record(rollout, rows, rewards, adv, update, tasks=ctx.tasks,
                         optimizer_steps=ctx.engine.optimizer_steps, lr=lr,
                         staleness=staleness, sqd=state.sqd, since=state.last_step_end)
    record.update(sampler_stats)
    if alg.dynamic_sampling:
        record["dynamic_sampling/rounds"] = rounds
    state.last_step_end = time.perf_counter()
    return record, rollout_rows(rollout, rows, rewards, adv)


def refill(ctx: RunContext, state: LoopState, rollout: Rollout, batch: RewardBatch
           ) -> tuple[Rollout, RewardBatch, int]:
    """DAPO's dynamic sampling with refill (Yu et al., "DAPO", arXiv 2503.14476, §3.2): a group
    whose rewards are all equal has no advantage, so while the step holds fewer than
    P = rollout.prompts_per_step informative groups (scored task rewards not all equal) and
    fewer than algorithm.refill_rounds generation rounds ran, draw P − k more prompts (k the
    informative groups so far, rounded up to a multiple of the ranks), generate and score them
    as in `start_step` (the same policy; each prompt's seed by its index in the step), and add
    them to the step (`Rollout.extended`). The flat groups stay in the rollout and leave the
    loss in `phases.rows_in_loss`, so the update sees at most P (+ ranks − 1) groups with
    task-reward contrast (shaping that breaks a tie, overlong or a KL in the reward, can keep
    a few more). Text tasks only (`setup.resolve`: the bench takes one batch per step). Returns the
    step, its rewards and the rounds it took."""
    P, G = ctx.config.rollout.prompts_per_step, ctx.config.rollout.num_generations
    world, rounds = distributed.world_size(), 1
    pad_id = int(getattr(ctx.backend, "pad_id", 0))  # under a zero mask: any token will do
    while rounds < ctx.algorithm.refill_rounds:
        need = P - informative_groups(batch, G)
        if need <= 0:
            break
        more = start_step(ctx, state, rollout.step, prompts=-(-need // world) * world,
                          first=len(rollout.everything))
        with rollout.timer("reward"):
            extra = collect_rewards(ctx, state, more)
        rollout = rollout.extended(more, world, pad_id)
        batch = RewardBatch(by_rank(batch.rewards, extra.rewards, world),
                            by_rank(batch.scored, extra.scored, world),
                            by_rank(batch.records, extra.records, world),
                            batch.wait_s + extra.wait_s)
        rounds += 1
    return rollout, batch, rounds


def informative_groups(batch: RewardBatch, G: int) -> int:
    """The groups (rows i·G … i·G + G − 1) whose scored rewards are not all equal
    (`dapo.dynamic_sampling_filter`)."""
    scored = torch.tensor(batch.scored, dtype=torch.bool)
    rewards = torch.tensor(batch.rewards, dtype=torch.float32)[scored]
    groups = (torch.arange(len(batch.rewards)) // G)[scored]
    return int(dynamic_sampling_filter(rewards, groups)[1]["kept_groups"])
