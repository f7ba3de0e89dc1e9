"""One RL step, read top to bottom: `start_step` (gen, and what needs the sampling policy)
then `finish_step` (the rest); `rl_step` is the two in turn.

One step, in verl's phase names (each timed as `timing_s/<phase>`):

    gen           draw prompts_per_step prompts (the task mixture), template them (a GEMM
                  problem's at its SQD stage, with sqd.enabled), sample G completions of each
                  (the generation backend; ZeRO-3 weights gathered once)
    reward        the tasks' rewards (in process; GEMM through the handoff, each request with
                  its stage's forbidden techniques); unscored ones are dropped from the loss and
                  counted; SQD sees the results (`_sqd_step`: archive, advancement); DAPO's
                  overlong shaping when the preset has a buffer
    old_log_prob  the sampling policy's token log-probs, when the update is off-policy at all
                  (num_iterations > 1, several optimizer steps per batch, KL in the reward, or
                  max_staleness 1); else the update is exactly on-policy (ratio 1 on its first
                  pass). Taken right after generation, before any later update
    ref           the reference model's token log-probs, when the method needs them
    adv           KL folded into the reward (kl_in_reward presets), DAPO's dynamic sampling,
                  advantages (groups = the prompts), HARGO's weights
    update_actor  num_iterations passes over the batch: micro-batches of micro_batch_size rows,
                  grad_accum of them per optimizer step; each micro-batch loss uses the whole
                  optimizer step's denominators (tokens / sequences), so they add up to that
                  step's full-batch loss (the engine's summed-loss convention)

What the update does comes from the resolved preset (`algorithms.resolve_algorithm`): its
`loss` picks the update (`updates.UPDATES`: ppo/pg policy loss, dpo, sft), its other fields
the estimator, HARGO, KL, dynamic sampling and overlong shaping. Task labels never reach the
algorithms: per-task statistics are computed from the step's rows afterwards, for the log (the
one exception is HARGO's label control, an ablation row: `algorithms.hargo_labels`).
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from hargo_hpc.algorithms.advantages import compute_advantages
from hargo_hpc.algorithms.dapo import dynamic_sampling_filter, overlong_penalty
from hargo_hpc.algorithms.hargo import hargo_weights
from hargo_hpc.algorithms.hargo_labels import task_weight_shares
from hargo_hpc.algorithms.losses import kl_penalized_rewards
from hargo_hpc.sqd import Result, StageSpec
from hargo_hpc.tasks.base import Example
from hargo_hpc.train import distributed
from hargo_hpc.train import metrics as m
from hargo_hpc.train.logprobs import token_logprobs
from hargo_hpc.train.rollout import Generations
from hargo_hpc.train.run import SQD_TASKS, Run, TrainError
from hargo_hpc.train.updates import UPDATES, UpdateBatch


@dataclass
class Rollout:
    """A generated step on its way to the update (`start_step` → `finish_step`): every rank's
    prompts, this rank's generations and its share of them, the sampling policy's log-probs
    when the update needs them, and rank 0's submitted rewards."""

    step: int
    everything: list[Example]  # the step's prompts, the same on every rank
    prompts: list[str]  # their templated texts (a GEMM problem's at its stage then)
    stages: list[StageSpec | None]  # per row, the SQD stage its prompt had (None: no SQD)
    gen: Any  # this rank's Generations
    texts: list[str]  # every rank's completions, in row order
    old: Tensor | None  # this rank's rows under the sampling policy
    policy_version: int  # optimizer steps taken before generation
    pending: Any = None  # rank 0: the RewardRouter's PendingRewards; elsewhere None
    timer: m.PhaseTimer = field(default_factory=m.PhaseTimer)

    def rows(self) -> list[Example]:
        """The example of every row: each prompt's G completions in turn."""
        G = len(self.stages) // max(len(self.everything), 1)
        return [e for e in self.everything for _ in range(G)]

    def examples(self, rank: int, world: int) -> list[Example]:
        share = len(self.everything) // world
        return self.everything[rank * share:(rank + 1) * share]

    def state_dict(self) -> dict[str, Any]:
        """This rank's part as tensors and plain values (a checkpoint's `loop_rank<r>.pt`); the
        submitted rewards are not in it: `resume_rollout` submits them again."""
        return {"step": self.step, "policy_version": self.policy_version,
                "examples": [[e.task, e.id] for e in self.everything],
                "prompts": self.prompts, "texts": self.texts, "old": self.old,
                "stages": [None if s is None else s.name for s in self.stages],
                "gen": {name: getattr(self.gen, name)
                        for name in Generations.__dataclass_fields__}}


def rl_step(run: Run, step: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """One synchronous RL step (the phases of the module docstring): `finish_step` of
    `start_step`; returns the metrics record and the rollout rows."""
    return finish_step(run, start_step(run, step))


def start_step(run: Run, step: int) -> Rollout:
    """The `gen` phase and what must happen under the sampling policy: draw the prompts,
    sample G completions each, take their log-probs under this policy when the update needs
    them (off-policy updates; always with rollout.max_staleness 1, since the update then comes
    after the policy moved), and submit the rewards (GEMM requests go to the bench now).

    Under W ranks every rank draws the same prompts (the same sampler, the same seed) and
    generates for its contiguous share (rank r: prompts r·P/W … (r+1)·P/W − 1, whole groups).
    Rank 0 submits every rank's completions."""
    cfg = run.config
    G = cfg.rollout.num_generations
    timer = m.PhaseTimer()
    world, rank = distributed.world_size(), distributed.rank()
    with timer("gen"):
        everything = run.sampler.batch(cfg.rollout.prompts_per_step)  # the same on every rank
        prompts = [run.prompt_of(e) for e in everything]
        share = len(everything) // world
        gen = run.backend.generate(prompts[rank * share:(rank + 1) * share], G, run.sampling)
    texts = [t for part in distributed.gather_objects(list(gen.texts)) for t in part]
    with timer("old_log_prob"):
        old = _logprobs(run, run.engine.module, gen) if run.needs_old else None
    stages = [run.stage_of(e) for e in everything for _ in range(G)]
    rollout = Rollout(step, everything, prompts, stages, gen, texts, old,
                      run.engine.optimizer_steps, timer=timer)
    with timer("reward"):
        rollout.pending = _submit(run, rollout)
    return rollout


def resume_rollout(run: Run, state: dict[str, Any], examples: dict[tuple[str, str], Example]
                   ) -> Rollout:
    """The in-flight step of a checkpoint (`Rollout.state_dict`), its rewards submitted again
    under the same request ids (the handoff returns what it stored)."""
    stages = {s.name: s for s in run.config.sqd.stages}
    try:
        everything = [examples[(task, id_)] for task, id_ in state["examples"]]
    except KeyError as err:
        raise TrainError(f"the checkpoint's in-flight step {state['step']} names example "
                         f"{err.args[0]} that the training data no longer holds") from None
    rollout = Rollout(int(state["step"]), everything, list(state["prompts"]),
                      [None if n is None else stages[n] for n in state["stages"]],
                      Generations(**state["gen"]), list(state["texts"]), state["old"],
                      int(state["policy_version"]))
    with rollout.timer("reward"):
        rollout.pending = _submit(run, rollout)
    return rollout


def finish_step(run: Run, rollout: Rollout) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Everything after generation: wait for the rewards, reference log-probs, advantages,
    HARGO's weights, the update, and the step's record and rollout rows.

    Rewards, lengths, groups and, for HARGO, the reference log-probs are gathered, so every
    rank computes the same whole-batch advantages and weights, and keeps its own rows (`own`)
    for the update. The record and the rollout rows describe the whole batch."""
    cfg, alg, engine = run.config, run.algorithm, run.engine
    G, max_new = cfg.rollout.num_generations, cfg.rollout.max_new_tokens
    step, gen, texts, old, timer = (rollout.step, rollout.gen, rollout.texts, rollout.old,
                                    rollout.timer)
    everything, prompts = rollout.everything, rollout.prompts
    lr = engine.lr  # what this step's first optimizer step uses
    staleness = engine.optimizer_steps - rollout.policy_version
    world, rank = distributed.world_size(), distributed.rank()
    share = len(everything) // world
    examples = rollout.examples(rank, world)
    rows = rollout.rows()
    own = slice(rank * share * G, (rank + 1) * share * G)
    mask = gen.completion_mask.bool()  # this rank's rows
    lengths = _all_rows(gen.completion_lengths)
    groups = _all_rows(gen.group_index + rank * share)
    truncated = _all_rows(gen.truncated)
    device = gen.completion_ids.device

    with timer("reward"):
        scores = _collect(run, rollout, rows)
        task_rewards = torch.tensor(scores.rewards, dtype=torch.float32, device=device)
        scored = torch.tensor(scores.scored, dtype=torch.bool, device=device)
        rewards = task_rewards.clone()
        overlong = torch.zeros_like(rewards)
        buffer = alg.overlong_buffer_tokens(max_new)
        if buffer > 0:
            overlong = overlong_penalty(lengths, max_length=max_new, buffer=buffer,
                                        factor=alg.overlong_penalty).to(rewards)
            rewards = rewards + overlong

    with timer("ref"):
        ref = _logprobs(run, run.reference, gen) if run.reference is not None else None

    with timer("adv"):
        kl_penalty = torch.zeros_like(rewards)
        if alg.kl_in_reward and alg.kl_coef > 0:
            assert old is not None and ref is not None
            shaped = _all_rows(kl_penalized_rewards(
                rewards[own], old, ref, mask, kl_coef=alg.kl_coef,
                kl_estimator=alg.kl_estimator))  # type: ignore[arg-type]
            kl_penalty = rewards - shaped
            rewards = shaped
        keep = scored.clone()
        dyn: dict[str, float] = {}
        if alg.dynamic_sampling:
            informative, dyn = dynamic_sampling_filter(rewards[scored], groups[scored])
            keep[scored.nonzero().squeeze(-1)] = informative.to(device)
        idx = keep.nonzero().squeeze(-1)
        advantages = torch.zeros_like(rewards)
        if alg.estimator is not None and idx.numel():
            advantages[idx] = compute_advantages(alg.estimator, rewards[idx], groups[idx])
        weights, hargo_stats = None, {}
        if alg.hargo is not None and idx.numel():
            assert ref is not None
            all_ref, all_mask = _all_rows(ref), _all_rows(mask)
            control = {}  # the label control (an ablation only) is the one use of labels
            if alg.hargo.label_control:
                control = {"labels": [rows[i].task for i in idx.tolist()],
                           "label_means": run.hargo_label_means}
            w, hargo_stats = hargo_weights(
                rewards[idx], groups[idx], all_ref[idx], all_mask[idx],
                advantages=advantages[idx], running_contrast=run.hargo_contrast,
                **control, **alg.hargo.to_dict())
            weights = torch.ones_like(rewards)
            weights[idx] = w.to(rewards)
            run.hargo_contrast = float(hargo_stats["contrast_ref"])
            run.hargo_label_means = hargo_stats.get("label_means", run.hargo_label_means)
    loss_mask = mask & keep[own, None]

    with timer("update_actor"):
        batch = UpdateBatch(gen.input_ids, gen.attention_mask, gen.completion_start, loss_mask,
                            keep[own], rewards[own], groups[own], advantages[own],
                            None if weights is None else weights[own], old, ref, examples)
        update = UPDATES[alg.loss](run.update_context(), batch)

    # ------------------------------------------------ the log (task labels only from here on)
    tasks = [e.task for e in rows]
    task_list = m.as_float_list(task_rewards)
    scored_list = [bool(s) for s in scores.scored]
    length_list = [int(n) for n in lengths.cpu()]
    weight_list = m.per_row(weights)
    record: dict[str, Any] = dict.fromkeys(m.STEP_KEYS)
    record.update(step=step, optimizer_steps=engine.optimizer_steps, learning_rate=lr)
    record.update(m.reward_stats(task_list, scored_list, [int(g) for g in groups.cpu()]))
    record.update({
        "reward_shaped": m.masked_mean(rewards, scored.float()),
        "rewards/scored": float(sum(scored_list)),
        "rewards/unscored": float(len(scored_list) - sum(scored_list)),
        "rewards/overlong_penalty": float(overlong.mean()),
        "rewards/kl_penalty": float(kl_penalty.mean()),
        "rows/in_loss": float(keep.sum()),
        "advantages/abs_mean": m.masked_mean(advantages.abs(), keep.float()),
    })
    record.update(m.completion_stats(length_list, [bool(x) for x in truncated.cpu()]))
    if dyn:
        record["dynamic_sampling/dropped_group_fraction"] = dyn["dropped_group_fraction"]
        record["dynamic_sampling/dropped_response_fraction"] = dyn["dropped_response_fraction"]
    if weights is not None and hargo_stats:
        kept_w = weights[idx]
        record.update({
            "hargo/weight_mean": float(kept_w.mean()), "hargo/weight_min": float(kept_w.min()),
            "hargo/weight_max": float(kept_w.max()), "hargo/weight_std": hargo_stats["weight_std"],
            "hargo/contrast_ref": hargo_stats["contrast_ref"],
            "hargo/zero_contrast_fraction": hargo_stats["zero_contrast_fraction"],
            "hargo/confidence_clip_fraction": hargo_stats["confidence_clip_fraction"],
        })
    record.update(update)
    keep_list = [bool(k) for k in keep.cpu()]
    task_weights = None if weight_list is None else [
        w if k else None for w, k in zip(weight_list, keep_list, strict=True)]
    record.update(_task_stats(tasks, task_list, scored_list, length_list, task_weights))
    if weights is not None:
        for name, share in task_weight_shares(tasks, weights, advantages, keep).items():
            record[f"tasks/{name}/weight_share"] = share["share"]
            record[f"tasks/{name}/adv_share"] = share["adv_share"]
    record.update(_task_metrics(run, rows, texts, scores.records))
    record.update(m.status_histogram(scores.records))
    if run.sqd is not None:
        record.update(run.sqd.metrics())
    num_tokens = distributed.sum_across_ranks(float(gen.attention_mask.sum()))
    timing = timer.record(since=run.last_step_end)
    run.last_step_end = time.perf_counter()
    timing["timing_s/reward_wait"] = scores.wait_s
    record["rollout/staleness"] = staleness
    record.update(timing)
    record["num_tokens"] = num_tokens
    record["tokens_per_s"] = num_tokens / max(timing["timing_s/step"], 1e-9)

    rollout_rows = []
    for i, example in enumerate(rows):
        rollout_rows.append({
            "step": step, "index": i, "group": int(groups[i]), "task": example.task,
            "id": example.id, "prompt": prompts[i // G], "completion": texts[i],
            "reward": task_list[i], "scored": scored_list[i], "in_loss": keep_list[i],
            "advantage": float(advantages[i]),
            "weight": None if weight_list is None else weight_list[i],
            "length": length_list[i], "truncated": bool(truncated[i]),
            "status": None if scores.records[i] is None else scores.records[i].get("status"),
        })
    return record, rollout_rows


def _all_rows(rows: Tensor) -> Tensor:
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


def _submit(run: Run, rollout: Rollout) -> Any:
    """Rank 0 submits every completion of the step (text rewards in process, GEMM requests to
    the handoff, each with its prompt's SQD stage's forbidden techniques); None elsewhere."""
    if not distributed.is_main():
        return None
    rows = rollout.rows()
    forbidden = [None if s is None else s.forbid for s in rollout.stages] if run.sqd else None
    return run.router.submit(rollout.step, rows, rollout.texts, forbidden=forbidden)


def _collect(run: Run, rollout: Rollout, rows: Sequence[Example]) -> Any:
    """The RewardBatch of the whole step: rank 0 waits for it and the others receive it; under
    SQD the results go to SQD (`_sqd_step`) on every rank alike."""
    batch = run.router.collect(rollout.pending) if distributed.is_main() else None
    batch = distributed.broadcast_object(batch)
    if run.sqd is not None:
        _sqd_step(run, rollout.step, rows, rollout.texts, rollout.stages, batch)
    return batch


def _sqd_step(run: Run, step: int, rows: Sequence[Example], texts: Sequence[str],
              stages: Sequence[StageSpec | None], batch: Any) -> None:
    """A required technique of the stage a prompt had, missing from an ok kernel, costs the
    format-violation penalty (the bench judged what is forbidden, SQD what is required); then
    SQD sees the step's results (archive, advancement) and rank 0 writes its files."""
    assert run.sqd is not None
    results = []
    for i, (example, text, stage) in enumerate(zip(rows, texts, stages, strict=True)):
        record = batch.records[i]
        if example.task not in SQD_TASKS or record is None or stage is None:
            continue
        problem = example.meta["problem"]["name"]
        missing = (run.sqd.required_miss(problem, record, stage.name)
                   if record.get("status") == "ok" else [])
        if missing and batch.scored[i]:
            batch.rewards[i] = float(run.config.bench.penalties.format_violation)
        results.append(Result(problem, run.tasks[example.task].extract(text), record,
                              stage.name))
    for line in run.sqd.observe(step, results):
        if distributed.is_main():
            print(line, file=sys.stderr)
    if distributed.is_main() and run.sqd_dir is not None:
        run.sqd.save(run.sqd_dir, step, results)


def _task_stats(tasks: list[str], rewards: list[float], scored: list[bool],
                lengths: list[int], weights: list[float | None] | None) -> dict[str, Any]:
    """Per-task statistics; weights only over the rows in the loss (None elsewhere)."""
    out = m.task_stats(tasks, rewards, scored, lengths, None)
    if weights is not None:
        for name in dict.fromkeys(tasks):
            w = [x for x, t in zip(weights, tasks, strict=True) if t == name and x is not None]
            out[f"tasks/{name}/weight_mean"] = sum(w) / len(w) if w else None
            out[f"tasks/{name}/weight_min"] = min(w) if w else None
            out[f"tasks/{name}/weight_max"] = max(w) if w else None
    return out


def _task_metrics(run: Run, rows: Sequence[Example], texts: Sequence[str],
                  records: Sequence[dict[str, Any] | None]) -> dict[str, float]:
    """Each task's own metrics over this step's completions (bench records for remote tasks:
    only the scored ones)."""
    out: dict[str, float] = {}
    for name in dict.fromkeys(e.task for e in rows):
        task = run.tasks[name]
        picked = [i for i, e in enumerate(rows) if e.task == name
                  and (not task.remote or records[i] is not None)]
        if not picked:
            continue
        predictions: list[Any] = [records[i] if task.remote else texts[i] for i in picked]
        out.update(m.task_metrics(name, task.metrics([rows[i] for i in picked], predictions)))
    return out


def _logprobs(run: Run, model: torch.nn.Module | None, gen: Any) -> Tensor:
    """Token log-probs of the completions under `model`, no gradient, in micro-batches (the
    policy with its ZeRO-3 weights gathered once)."""
    assert model is not None
    gather = run.engine.gathered_parameters() if model is run.engine.module else (
        contextlib.nullcontext())
    with gather:
        return token_logprobs(model, gen.input_ids, gen.attention_mask, gen.completion_start,
                              run.logprob_micro, temperature=run.sampling.temperature)
