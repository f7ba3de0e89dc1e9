"""What an evaluation against its baseline says, in lines a reader can believe.

`change_lines`: per task and metric, start (the baseline) → end with its 95 % interval, the
paired change with its interval, n (examples, × samples each) and the distinct completions
among the rows, and a verdict read off the change's interval (`verdict`). A maximum (a task's
`points`) is shown as a point, never with an interval. `verdict_lines` then names every worse
metric first: a worse headline metric is said, not buried.

`generalisation_gap`: a model's metric on training examples against its held-out interval,
flagged when the held-out value lies below the training value by more than its interval (the
model learnt its training set, not the task). What `make demo` and `hargo sft` print.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from hargo_hpc.eval.evaluate import headline
from hargo_hpc.eval.intervals import Interval
from hargo_hpc.tasks.registry import task_class

BETTER, WORSE, NO_CHANGE, UP, DOWN = "better", "worse", "no change shown", "up", "down"


def _task_set(name: str, attribute: str) -> tuple[str, ...]:
    try:
        return tuple(getattr(task_class(name), attribute))
    except ValueError:
        return ()


def direction(task: str, key: str) -> str:
    """The good direction of a task's metric: "higher", "lower" (the task's `lower_better`)
    or "none" (its `undirected`: a length)."""
    if key in _task_set(task, "undirected"):
        return "none"
    return "lower" if key in _task_set(task, "lower_better") else "higher"


def verdict(task: str, key: str, change: dict[str, Any] | None) -> str | None:
    """`better` / `worse` when the change's 95 % interval excludes 0, in the metric's good
    direction (higher, or lower for the task's `lower_better`; a metric with no good direction,
    `undirected`, is `up` / `down`); `no change shown` when the interval holds 0; None without
    an interval."""
    if not change or change.get("low") is None or change.get("high") is None:
        return None
    low, high = change["low"], change["high"]
    if low <= 0 <= high:
        return NO_CHANGE
    rose, good = low > 0, direction(task, key)
    if good == "none":
        return UP if rose else DOWN
    return BETTER if rose == (good == "higher") else WORSE


def _num(value: Any) -> str:
    return "—" if value is None else f"{value:.3f}" if isinstance(value, float) else str(value)


def sizes_text(values: dict[str, Any]) -> str:
    """`n=12 × 8, distinct 15 -> 26` (examples × samples each, then the distinct completions
    of the baseline -> the model); `n=200` for one answer each."""
    n, rows = values.get("n"), values.get("rows")
    text = f"n={n}"
    if isinstance(n, int) and isinstance(rows, int) and n and rows != n:
        text += f" × {rows // n}"
    distinct = values.get("distinct")
    if distinct is not None:
        before = (values.get("baseline") or {}).get("distinct")
        text += f", distinct {'' if before is None else f'{before} -> '}{distinct}"
    return text


def change_lines(metrics: dict[str, Any], keys_of: Callable[[str], Sequence[str]] = headline,
                 *, prefix: str = "") -> list[str]:
    """One line per task and metric (`keys_of(task name)`, default its headline) of an
    evaluation (metrics.json) against its baseline:

        <task>  <metric>  <start> -> <end> [lo, hi]  change +d [lo, hi]  (n=N × S, distinct
        a -> b)  <verdict>

    a maximum (`Task.points`) as `<start> -> <end> (a maximum: a point, no interval)`."""
    lines = []
    for name, values in metrics["tasks"].items():
        points = _task_set(name, "points")
        for key in keys_of(name):
            if key not in values:
                continue
            start = (values.get("baseline") or {}).get(key)
            text = f"{prefix}{name}  {key}  {_num(start)} -> {_num(values.get(key))}"
            if key in points:
                lines.append(f"{text}  (a maximum: a point, no interval; "
                             f"{sizes_text(values)})")
                continue
            bounds = (values.get("intervals") or {}).get(key) or {}
            if bounds.get("low") is not None:
                text += f" [{_num(bounds['low'])}, {_num(bounds['high'])}]"
            change = (values.get("vs_baseline") or {}).get(key) or {}
            if change.get("value") is not None and change.get("low") is not None:
                text += f"  change {Interval.from_json(change).change_text('+.3f')}"
            text += f"  ({sizes_text(values)})"
            said = verdict(name, key, change)
            lines.append(text + (f"  {said}" if said else ""))
    return lines


def verdict_lines(metrics: dict[str, Any],
                  keys_of: Callable[[str], Sequence[str]] = headline) -> list[str]:
    """The metrics grouped by verdict, worse first: `worse: gemm ok_share, ...`, then
    `better: ...`, then `no change shown: ...` (groups with none left out)."""
    found: dict[str, list[str]] = {WORSE: [], BETTER: [], DOWN: [], UP: [], NO_CHANGE: []}
    for name, values in metrics["tasks"].items():
        for key in keys_of(name):
            said = verdict(name, key, (values.get("vs_baseline") or {}).get(key))
            if said is not None:
                found[said].append(f"{name} {key}")
    return [f"{said}: {', '.join(items)}" for said, items in found.items() if items]


# ---------------------------------------------------------------- memorised or learnt


def generalisation_gap(train: dict[str, Any], held_out: dict[str, Any],
                       keys_of: Callable[[str], Sequence[str]] = headline) -> list[dict[str, Any]]:
    """Per task and metric evaluated on both: the value on training examples (`train`, an
    evaluation's metrics.json on the train split) against the held-out value and its 95 %
    interval (`held_out`, on the eval split). `memorised` when the metric is worse held out
    than on training examples by more than the held-out interval allows (the training value
    lies outside it, on the good side): the model answers what it saw, not the task."""
    out = []
    for name, values in held_out["tasks"].items():
        seen = train["tasks"].get(name)
        if seen is None:
            continue
        lower = _task_set(name, "lower_better")
        for key in keys_of(name):
            bounds = (values.get("intervals") or {}).get(key) or {}
            if seen.get(key) is None or values.get(key) is None or bounds.get("low") is None:
                continue
            gap = seen[key] > bounds["high"] if key not in lower else seen[key] < bounds["low"]
            out.append({"task": name, "metric": key, "train": seen[key], "n_train": seen["n"],
                        "held_out": values[key], "low": bounds["low"], "high": bounds["high"],
                        "n": values["n"], "memorised": bool(gap)})
    return out


def gap_lines(found: Sequence[dict[str, Any]]) -> list[str]:
    """`data_race_c  accuracy  train 0.780 (n=200), held-out 0.739 [0.678, 0.807] (n=200): as
    well held out` or `... : MEMORISED (held out below its training value beyond its
    interval)`."""
    lines = []
    for g in found:
        said = ("MEMORISED: held out worse than on its training examples, beyond the interval"
                if g["memorised"] else "no gap beyond the held-out interval")
        lines.append(f"{g['task']}  {g['metric']}  train {_num(g['train'])} (n={g['n_train']}), "
                     f"held-out {_num(g['held_out'])} [{_num(g['low'])}, {_num(g['high'])}] "
                     f"(n={g['n']}): {said}")
    return lines
