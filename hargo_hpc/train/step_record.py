"""The metrics record and the rollout rows of one RL step, built after the phases from what they
returned (`train.phases`); metric names: docs/training.md. Task labels enter here, for the log
only (per-task statistics, HARGO's per-task weight shares).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from hargo_hpc.algorithms.hargo_labels import task_weight_shares
from hargo_hpc.tasks.base import Example, Task
from hargo_hpc.train import metrics as m
from hargo_hpc.train.backend import distributed
from hargo_hpc.train.phases import Advantages, Rewards, StepRows
from hargo_hpc.train.rollout.generated import Rollout

if TYPE_CHECKING:
    from hargo_hpc.train.sqd_run import SqdRun


def step_record(rollout: Rollout, rows: StepRows, rewards: Rewards, adv: Advantages,
                update: dict[str, float], *, tasks: dict[str, Task], optimizer_steps: int,
                lr: float, staleness: int, sqd: SqdRun | None, since: float,
                ) -> dict[str, Any]:
    """The step's metrics record: rewards, rows, advantages, completions, the weighting, the
    update's statistics, per-task statistics and metrics, bench statuses, SQD, timing (the
    step time counted from `since`, the previous step's end) and throughput."""
    labels = [e.task for e in rows.rows]
    task_list, scored_list = m.as_float_list(rewards.task), [bool(s) for s in rewards.batch.scored]
    length_list = [int(n) for n in rows.lengths.cpu()]
    record: dict[str, Any] = dict.fromkeys(m.STEP_KEYS)
    record.update(step=rollout.step, optimizer_steps=optimizer_steps, learning_rate=lr)
    group_list = [int(g) for g in rows.groups.cpu()]
    record.update(m.reward_stats(task_list, scored_list, group_list))
    record.update({
        "reward_shaped": m.masked_mean(adv.rewards, rewards.scored.float()),
        "rows/scored": float(sum(scored_list)),
        "rows/unscored": float(len(scored_list) - sum(scored_list)),
        "shaping/overlong_penalty": float(rewards.overlong.mean()),
        "shaping/kl_penalty": float(adv.kl_penalty.mean()),
        "rows/in_loss": float(adv.keep.sum()),
        "advantages/abs_mean": m.masked_mean(adv.advantages.abs(), adv.keep.float()),
    })
    record.update(m.completion_stats(length_list, [bool(x) for x in rows.truncated.cpu()]))
    if adv.dynamic_sampling:
        for key in ("dropped_group_fraction", "dropped_response_fraction", "kept_groups"):
            record[f"dynamic_sampling/{key}"] = adv.dynamic_sampling[key]
    record.update(weight_stats(adv))
    record.update(update)
    keep_list = [bool(k) for k in adv.keep.cpu()]
    weight_list = m.per_row(adv.weights)
    kept_weights = None if weight_list is None else [
        w if k else None for w, k in zip(weight_list, keep_list, strict=True)]
    record.update(task_stats(labels, task_list, scored_list, group_list, length_list,
                             kept_weights))
    if adv.weights is not None:
        for name, share in task_weight_shares(labels, adv.weights, adv.advantages,
                                              adv.keep).items():
            record[f"tasks/{name}/weight_share"] = share["share"]
            record[f"tasks/{name}/adv_share"] = share["adv_share"]
    record.update(task_metrics(tasks, rows.rows, rollout.texts, rewards.batch.records))
    record.update(m.status_histogram(rewards.batch.records))
    if sqd is not None:
        record.update(sqd.metrics())
    num_tokens = distributed.sum_across_ranks(float(rollout.gen.attention_mask.sum()))
    timing = rollout.timer.record(since=since)
    timing["timing_s/reward_wait"] = rewards.batch.wait_s
    record["rollout/staleness"] = staleness
    record.update(timing)
    record["tokens/step"] = num_tokens  # `num_tokens`, their running total: MetricsWriter
    record["tokens_per_s"] = num_tokens / max(timing["timing_s/step"], 1e-9)
    return record


def weight_stats(adv: Advantages) -> dict[str, float]:
    """The weighting's statistics over the rows in the loss (`hargo/*`); {} without one."""
    if adv.weights is None or not adv.weight_stats:
        return {}
    kept, stats = adv.weights[adv.kept], adv.weight_stats
    return {
        "hargo/weight_mean": float(kept.mean()), "hargo/weight_min": float(kept.min()),
        "hargo/weight_max": float(kept.max()), "hargo/weight_std": stats["weight_std"],
        "hargo/contrast_ref": stats["contrast_ref"],
        "hargo/zero_contrast_fraction": stats["zero_contrast_fraction"],
        "hargo/confidence_clip_fraction": stats["confidence_clip_fraction"],
    }


def rollout_rows(rollout: Rollout, rows: StepRows, rewards: Rewards,
                 adv: Advantages) -> list[dict[str, Any]]:
    """One line per completion for `rollouts/step_<n>.jsonl`."""
    G = len(rows.rows) // max(len(rollout.everything), 1)
    task_list = m.as_float_list(rewards.task)
    weight_list = m.per_row(adv.weights)
    records = rewards.batch.records
    return [{
        "step": rollout.step, "index": i, "group": int(rows.groups[i]), "task": example.task,
        "id": example.id, "prompt": rollout.prompts[i // G], "completion": rollout.texts[i],
        "reward": task_list[i], "scored": bool(rewards.batch.scored[i]),
        "in_loss": bool(adv.keep[i]), "advantage": float(adv.advantages[i]),
        "weight": None if weight_list is None else weight_list[i],
        "length": int(rows.lengths[i]), "truncated": bool(rows.truncated[i]),
        "status": None if records[i] is None else records[i].get("status"),
    } for i, example in enumerate(rows.rows)]


def task_stats(tasks: list[str], rewards: list[float], scored: list[bool], groups: list[int],
               lengths: list[int], weights: list[float | None] | None) -> dict[str, Any]:
    """Per-task statistics; weights only over the rows in the loss (None elsewhere)."""
    out = m.task_stats(tasks, rewards, scored, groups, lengths, None)
    if weights is not None:
        for name in dict.fromkeys(tasks):
            w = [x for x, t in zip(weights, tasks, strict=True) if t == name and x is not None]
            out[f"tasks/{name}/weight_mean"] = sum(w) / len(w) if w else None
            out[f"tasks/{name}/weight_min"] = min(w) if w else None
            out[f"tasks/{name}/weight_max"] = max(w) if w else None
    return out


def task_metrics(tasks: dict[str, Task], rows: Sequence[Example], texts: Sequence[str],
                 records: Sequence[dict[str, Any] | None]) -> dict[str, float]:
    """Each task's own metrics over this step's completions (bench records for remote tasks:
    only the scored ones)."""
    out: dict[str, float] = {}
    for name in dict.fromkeys(e.task for e in rows):
        task = tasks[name]
        picked = [i for i, e in enumerate(rows) if e.task == name
                  and (not task.remote or records[i] is not None)]
        if not picked:
            continue
        predictions: list[Any] = [records[i] if task.remote else texts[i] for i in picked]
        out.update(m.task_metrics(name, task.metrics([rows[i] for i in picked], predictions)))
    return out
