"""What a run logs: one metrics record per step (JSONL, TensorBoard when installed), the step's
rollouts (JSONL), phase timers, and the per-task and per-group statistics behind them.

Every record of `<run dir>/metrics.jsonl` has every key of `STEP_KEYS` (null where the method
has no such quantity, e.g. `kl` without a reference model), plus per task `t` of the run the
keys `tasks/<t>/<name>` for `name` in `TASK_KEYS` and each numeric metric the task reports
(`Task.metrics`), plus `bench/status/<status>` counts when a task is rewarded by the bench.
Names follow TRL and verl where they have one. docs/training.md describes each key.

Task labels are used here, after the update, for the log only; they never reach
`hargo_hpc.algorithms`.
"""

from __future__ import annotations

import contextlib
import json
import math
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from hargo_hpc.files import last_record, read_jsonl, write_atomic

PHASES = ("gen", "reward", "old_log_prob", "ref", "adv", "update_actor")
STEP_KEYS: tuple[str, ...] = (
    "step", "optimizer_steps", "learning_rate",
    # rewards
    "reward", "reward_std", "frac_reward_zero_std", "reward_shaped",
    "rows/scored", "rows/unscored", "shaping/overlong_penalty", "shaping/kl_penalty",
    "rows/in_loss",
    # the update
    "loss", "pg_loss", "kl", "entropy", "approx_kl", "ratio_mean", "ratio_std",
    "advantages/abs_mean", "rollout/staleness",
    "sampler/ratio_mean", "sampler/clipped_share", "sampler/abs_log_ratio_mean",
    "clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean", "clip_ratio/dual",
    "grad_norm",
    # completions
    "completions/mean_length", "completions/min_length", "completions/max_length",
    "completions/clipped_ratio",
    # methods
    "dynamic_sampling/dropped_group_fraction", "dynamic_sampling/dropped_response_fraction",
    "dynamic_sampling/kept_groups", "dynamic_sampling/rounds",
    "hargo/weight_mean", "hargo/weight_min", "hargo/weight_max", "hargo/weight_std",
    "hargo/contrast_ref", "hargo/zero_contrast_fraction", "hargo/confidence_clip_fraction",
    "dpo/pairs", "dpo/reward_accuracy", "dpo/margin", "dpo/chosen_reward", "dpo/rejected_reward",
    "sft/nll", "sft/tokens",
    # throughput and time
    "tokens/step", "num_tokens", "tokens_per_s",
    *(f"timing_s/{phase}" for phase in PHASES), "timing_s/reward_wait", "timing_s/step",
)
TASK_KEYS = ("count", "reward_mean", "reward_std", "contrast_share", "completion_length",
             "weight_mean", "weight_min", "weight_max", "weight_share", "adv_share")
SFT_KEYS = ("step", "loss", "nll", "tokens", "sequences", "grad_norm", "learning_rate",
            "timing_s/step")
TIMING_PREFIX = "timing_s/"
VOLATILE = ("timing_s/", "tokens_per_s")  # keys whose values differ between identical runs


def clean(value: Any) -> Any:
    """JSON-safe: tensors to Python numbers, non-finite floats to None."""
    if isinstance(value, Tensor):
        value = value.item() if value.numel() == 1 else value.tolist()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {str(k): clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    return value


def deterministic(record: Mapping[str, Any]) -> dict[str, Any]:
    """A record without its timing keys (what two identical runs must agree on)."""
    return {k: v for k, v in record.items() if not k.startswith(VOLATILE)}


# ---------------------------------------------------------------- timers


class PhaseTimer:
    """Wall seconds per phase of one step: `with timer("gen"): ...`; phases not entered are 0."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = dict.fromkeys(PHASES, 0.0)
        self.start = time.perf_counter()

    @contextlib.contextmanager
    def __call__(self, phase: str) -> Iterator[None]:
        begin = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[phase] = self.seconds.get(phase, 0.0) + time.perf_counter() - begin

    def record(self, since: float = 0.0) -> dict[str, float]:
        """The phases and `step`: wall seconds from the timer's start, or from `since` (a
        perf_counter value) when later: with rollout.max_staleness 1 a step is generated
        during the previous one, and its step time counts from that one's end."""
        out = {f"{TIMING_PREFIX}{k}": v for k, v in self.seconds.items()}
        out[f"{TIMING_PREFIX}step"] = time.perf_counter() - max(self.start, since)
        return out


# ---------------------------------------------------------------- statistics


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _std(values: Sequence[float]) -> float | None:
    """Unbiased std (as torch.std and TRL); 0 for one value, None for none."""
    if not values:
        return None
    if len(values) == 1:
        return 0.0
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


def reward_stats(rewards: Sequence[float], scored: Sequence[bool], groups: Sequence[int]
                 ) -> dict[str, float | None]:
    """`reward` and `reward_std` over the scored completions; `frac_reward_zero_std`: the share
    of groups (prompts) with a scored completion whose scored rewards all agree (std 0: no
    learning signal for a group-relative estimator)."""
    kept = [r for r, s in zip(rewards, scored, strict=True) if s]
    contrast = contrast_share(rewards, scored, groups)
    return {
        "reward": _mean(kept),
        "reward_std": _std(kept),
        "frac_reward_zero_std": None if contrast is None else 1.0 - contrast,
    }


def contrast_share(rewards: Sequence[float], scored: Sequence[bool], groups: Sequence[int]
                   ) -> float | None:
    """The share of groups (prompts) with a scored completion whose scored rewards are not all
    equal: the groups a group-relative estimator learns from (a flat group's advantages are
    all 0). None without a scored group."""
    by_group: dict[int, set[float]] = {}
    for r, s, g in zip(rewards, scored, groups, strict=True):
        if s:
            by_group.setdefault(g, set()).add(r)
    if not by_group:
        return None
    return sum(len(v) > 1 for v in by_group.values()) / len(by_group)


def completion_stats(lengths: Sequence[int], truncated: Sequence[bool]) -> dict[str, float]:
    """Token lengths of the completions and the share cut at max_new_tokens."""
    return {
        "completions/mean_length": sum(lengths) / len(lengths),
        "completions/min_length": float(min(lengths)),
        "completions/max_length": float(max(lengths)),
        "completions/clipped_ratio": sum(truncated) / len(truncated),
    }


def task_stats(
    tasks: Sequence[str], rewards: Sequence[float], scored: Sequence[bool],
    groups: Sequence[int], lengths: Sequence[int], weights: Sequence[float] | None,
) -> dict[str, float | None]:
    """Per task t: `tasks/<t>/count` (completions), reward mean/std over the scored ones, the
    share of its groups with reward contrast (`contrast_share`), mean completion length, and
    the HARGO weight mean/min/max (None without weights)."""
    out: dict[str, float | None] = {}
    for name in dict.fromkeys(tasks):
        rows = [i for i, t in enumerate(tasks) if t == name]
        kept = [rewards[i] for i in rows if scored[i]]
        prefix = f"tasks/{name}/"
        out[prefix + "count"] = float(len(rows))
        out[prefix + "reward_mean"] = _mean(kept)
        out[prefix + "reward_std"] = _std(kept)
        out[prefix + "contrast_share"] = contrast_share(
            [rewards[i] for i in rows], [scored[i] for i in rows], [groups[i] for i in rows])
        out[prefix + "completion_length"] = _mean([float(lengths[i]) for i in rows])
        w = [weights[i] for i in rows] if weights is not None else []
        out[prefix + "weight_mean"] = _mean(w)
        out[prefix + "weight_min"] = min(w) if w else None
        out[prefix + "weight_max"] = max(w) if w else None
        out[prefix + "weight_share"] = out[prefix + "adv_share"] = None  # HARGO: the loop's
    return out


def task_metrics(name: str, metrics: Mapping[str, Any]) -> dict[str, float]:
    """The numeric (not bool) scalars of a task's `metrics()` as `tasks/<name>/<key>`; nested
    dicts of numbers (e.g. GEMM's status counts) as `tasks/<name>/<key>/<sub>`."""
    out: dict[str, float] = {}
    for key, value in metrics.items():
        if isinstance(value, bool):
            continue
        if isinstance(value, (int, float)):
            out[f"tasks/{name}/{key}"] = float(value)
        elif isinstance(value, Mapping):
            for sub, inner in value.items():
                if isinstance(inner, (int, float)) and not isinstance(inner, bool):
                    out[f"tasks/{name}/{key}/{sub}"] = float(inner)
    return out


def status_histogram(records: Sequence[Mapping[str, Any] | None]) -> dict[str, float]:
    """`bench/status/<status>`: how many bench records of the step ended in each status."""
    out: dict[str, float] = {}
    for record in records:
        if record is not None:
            key = f"bench/status/{record.get('status', 'unknown')}"
            out[key] = out.get(key, 0.0) + 1.0
    return out


def masked_mean(values: Tensor, mask: Tensor) -> float | None:
    count = float(mask.sum())
    if count == 0:
        return None
    return float((values * mask).sum() / count)


class WeightedMean:
    """Σ w·x / Σ w over contributions (micro-batch statistics weighted by their tokens)."""

    def __init__(self) -> None:
        self.total: dict[str, float] = {}
        self.weight: dict[str, float] = {}

    def add(self, stats: Mapping[str, float], weight: float) -> None:
        for key, value in stats.items():
            if value is None or weight <= 0:
                continue
            self.total[key] = self.total.get(key, 0.0) + float(value) * weight
            self.weight[key] = self.weight.get(key, 0.0) + weight

    def get(self, key: str) -> float | None:
        w = self.weight.get(key, 0.0)
        return self.total[key] / w if w > 0 else None


# ---------------------------------------------------------------- writers


def read_records(path: Path) -> list[dict[str, Any]]:
    """The records of a JSONL file (a half-written last line, from a kill, is skipped)."""
    return read_jsonl(path)


class MetricsWriter:
    """Appends one JSON line per step to `path` (flushed each time) and gives each tracker
    (`train.trackers`) the record's finite numbers. `running` maps a per-step key to the key of
    its running total (TRL's cumulative `num_tokens`), carried on from the file's last record
    (a resumed run, its records after the checkpoint already cut)."""

    def __init__(self, path: Path, trackers: Sequence[Any] = (),
                 running: Mapping[str, str] | None = None) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        last = last_record(path)
        self._totals = {total: float(last.get(total) or 0.0) if last else 0.0
                        for total in (running or {}).values()}
        self._running = dict(running or {})
        self._file = path.open("a", encoding="utf-8")
        self._trackers = list(trackers)

    def write(self, record: Mapping[str, Any]) -> None:
        record = dict(record)
        for key, total in self._running.items():
            self._totals[total] += float(record.get(key) or 0.0)
            record[total] = self._totals[total]
        self._file.write(json.dumps(clean(record), allow_nan=False) + "\n")
        self._file.flush()
        if self._trackers:
            values = numbers(record)
            for tracker in self._trackers:
                tracker.log(values, int(record["step"]))

    def close(self) -> None:
        self._file.close()
        for tracker in self._trackers:
            tracker.close()

    def __enter__(self) -> MetricsWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def numbers(record: Mapping[str, Any]) -> dict[str, float]:
    """The finite numbers of a step's record (not the step; no booleans, None or NaN)."""
    return {key: float(value) for key, value in record.items()
            if key != "step" and isinstance(value, (int, float))
            and not isinstance(value, bool) and math.isfinite(value)}


def truncate_after(path: Path, step: int) -> int:
    """Keep the records of steps ≤ `step` (a resume drops what a killed run logged after its
    last checkpoint); returns how many were kept. Atomic."""
    if not path.is_file():
        return 0
    kept = [r for r in read_records(path) if int(r.get("step", 0)) <= step]
    write_atomic(path, "".join(json.dumps(r, allow_nan=False) + "\n" for r in kept))
    return len(kept)


def write_rollouts(path: Path, rows: Sequence[Mapping[str, Any]]) -> None:
    """One JSON line per completion of a step (atomically: a resume rewrites the file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, "".join(json.dumps(clean(dict(r)), allow_nan=False) + "\n"
                               for r in rows))


def per_row(values: Tensor | None) -> list[float] | None:
    return None if values is None else [float(v) for v in values.detach().float().cpu()]


def as_float_list(values: Tensor) -> list[float]:
    return [float(v) for v in values.detach().to(torch.float64).cpu()]


def mix_summary(records: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per task, over RL step records (metrics.jsonl): `steps` it was drawn in, `with_contrast`
    the steps where some of its groups had reward contrast (`contrast_share` > 0: it had a say
    in the update), `contrast_mean` the mean contrast share over its steps, and HARGO's mean
    weight share / advantage share (`weight_share`, `adv_share`; None without HARGO)."""
    out: dict[str, dict[str, Any]] = {}
    for record in records:
        for key, value in record.items():
            parts = key.split("/")
            if len(parts) != 3 or parts[0] != "tasks" or parts[2] != "contrast_share":
                continue
            if value is None:
                continue
            entry = out.setdefault(parts[1], {"steps": 0, "with_contrast": 0, "contrast": [],
                                              "weight_share": [], "adv_share": []})
            entry["steps"] += 1
            entry["with_contrast"] += value > 0
            entry["contrast"].append(float(value))
            for share in ("weight_share", "adv_share"):
                found = record.get(f"tasks/{parts[1]}/{share}")
                if found is not None:
                    entry[share].append(float(found))
    return {name: {"steps": e["steps"], "with_contrast": e["with_contrast"],
                   "contrast_mean": _mean(e["contrast"]),
                   "weight_share": _mean(e["weight_share"]), "adv_share": _mean(e["adv_share"])}
            for name, e in out.items()}


def mix_lines(summary: Mapping[str, Mapping[str, Any]], steps: int) -> list[str]:
    """`data_race_c  drawn in 31 of 40 steps, contrast in 29 of them (mean share of its groups
    0.84); HARGO weight share 0.41 (0.38 with w = 1)`, flagged `PASSENGER` when the task had
    contrast in fewer than half of the steps it was drawn in."""
    lines = []
    for name, e in summary.items():
        text = (f"{name}  drawn in {e['steps']} of {steps} steps, contrast in "
                f"{e['with_contrast']} of them (mean share of its groups "
                f"{e['contrast_mean']:.2f})")
        if e["weight_share"] is not None:
            text += (f"; HARGO weight share {e['weight_share']:.2f} ({e['adv_share']:.2f} with "
                     "w = 1)")
        if e["with_contrast"] * 2 < e["steps"]:
            text += "  PASSENGER: its groups rarely differ, so it barely shapes the update"
        lines.append(text)
    return lines
