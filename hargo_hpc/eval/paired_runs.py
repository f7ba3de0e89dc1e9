"""Two evaluations on the same examples, compared: the paired change of every metric.

`hargo eval` writes each task's answers to `<eval dir>/predictions/<task>.jsonl`, one line per
answer (`id`, `sample`, `output`, `prediction`, `reward`; GEMM's `record`), and its baseline's
to `<task>.baseline.jsonl`. Two sets of answers to the same held-out examples (a run and its
baseline; a sweep's methods: one SFT start, one split) are compared here line by line: B − A
of each share and mean on the same resampled examples (`eval.compare.paired`), which is how
"HARGO − GRPO" gets its interval (`compare_evaluations`). Over several training seeds, one
such pair per seed, the change is pooled with `eval.intervals.over_seeds` (`seed_changes`).
Answers whose lines differ in id or order are refused (`EvalError`, naming both files).
Maxima (`Task.points`) get no interval and no change.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from hargo_hpc.eval.compare import Memo, UnitMetrics, interval_keys, paired
from hargo_hpc.eval.evaluate import Answers, EvalError, TaskPlan, unit_metrics
from hargo_hpc.eval.intervals import Interval, Metric, SeedPooled, over_seeds
from hargo_hpc.runs import RunLayout
from hargo_hpc.tasks.base import Example, Task
from hargo_hpc.tasks.registry import get_task, task_names

PREDICTIONS = "predictions"
BASELINE_SUFFIX = ".baseline"


def eval_dir(path: Path) -> Path:
    """`path` itself when it is an evaluation directory; a run directory's `eval/` when that
    holds predictions."""
    inside = path / RunLayout.EVAL
    return inside if (inside / PREDICTIONS).is_dir() else path


@dataclass(frozen=True)
class Predictions:
    """One side of a comparison: the model's answers of an evaluation (`predictions/
    <task>.jsonl`) or, with `baseline`, its baseline's (`<task>.baseline.jsonl`).
    `directory` is an evaluation directory or a run directory (its eval/)."""

    directory: Path
    baseline: bool = False

    def file(self, task: str) -> Path:
        suffix = BASELINE_SUFFIX if self.baseline else ""
        return eval_dir(self.directory) / PREDICTIONS / f"{task}{suffix}.jsonl"


Pair = tuple[Predictions, Predictions]  # (A, B): the change is B − A


class PairedTask(NamedTuple):
    """One task answered by A and B on the same examples: their metrics as functions of
    example indices (`eval.compare.UnitMetrics`), the number of examples and the keys that
    get an interval (shares and means; not the task's `points`)."""

    before: UnitMetrics
    after: UnitMetrics
    n: int
    keys: list[str]


def read_predictions(file: Path) -> list[dict[str, Any]]:
    """The lines of one predictions file; EvalError naming the file for anything unreadable."""
    try:
        lines = file.read_text(encoding="utf-8").splitlines()
        rows = [json.loads(line) for line in lines if line.strip()]
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise EvalError(f"{file}: cannot read the predictions: {err}") from None
    if not rows or not all(isinstance(r, dict) and "prediction" in r for r in rows):
        raise EvalError(f"{file}: expected JSON lines with a 'prediction' each")
    return rows


def plan_and_answers(task: Task, rows: list[dict[str, Any]]) -> tuple[TaskPlan, Answers]:
    samples = 1 + max(int(r.get("sample", 0)) for r in rows)
    firsts = rows[::samples]
    examples = []
    for i, r in enumerate(firsts):
        source = {k: str(r.get(k) or "") for k in ("instruction", "input", "output")}
        example = None if task.remote else task.from_record(source, i)
        examples.append(example or Example(task.name, str(r.get("id", i)), source["instruction"],
                                           source["input"], source["output"]))
    plan = TaskPlan(examples, samples, 1, (), do_sample=samples > 1)
    answers = Answers({task.name: [str(r["prediction"]) for r in rows]})
    if task.remote:
        answers.records[task.name] = [r.get("record") or {"status": "infra_error"} for r in rows]
    remember = getattr(task, "remember_rewards", None)
    if remember is not None and all("reward" in r for r in rows):
        remember(plan.rows, answers.texts[task.name], [float(r["reward"]) for r in rows])
    return plan, answers


def paired_task(task: Task, pair: Pair) -> PairedTask:
    """Task `task` of both sides of `pair`, line by line; EvalError when their lines differ in
    id or order (or a file does not read)."""
    files = [side.file(task.name) for side in pair]
    rows_a, rows_b = (read_predictions(f) for f in files)
    ids_a = [(r.get("id"), r.get("sample", 0)) for r in rows_a]
    if ids_a != [(r.get("id"), r.get("sample", 0)) for r in rows_b]:
        raise EvalError(f"{files[0]} and {files[1]} answer other examples (or in another "
                        "order): a paired comparison needs the same ones")
    plan, answers_a = plan_and_answers(task, rows_a)
    _, answers_b = plan_and_answers(task, rows_b)
    of_a, of_b = unit_metrics(task, plan, answers_a), unit_metrics(task, plan, answers_b)
    n = len(plan.examples)
    return PairedTask(of_a, of_b, n, interval_keys(dict(of_a(list(range(n)))), task.points))


def _answered_by_all(name: str, pairs: Sequence[Pair]) -> bool:
    return all(side.file(name).is_file() for pair in pairs for side in pair)


def compare_evaluations(a: Path, b: Path, *, seed: int = 0) -> dict[str, dict[str, Interval]]:
    """B − A, per task both evaluated, of every share and mean, paired on their examples.
    `a` and `b` are evaluation directories (holding predictions/) or run directories (their
    eval/)."""
    pair = (Predictions(a), Predictions(b))
    out: dict[str, dict[str, Interval]] = {}
    for name in task_names():
        if _answered_by_all(name, [pair]):
            found = paired_task(get_task(name), pair)
            out[name] = paired(found.before, found.after, found.n, found.keys, seed=seed)
    if not out:
        raise EvalError(f"{a} and {b}: no task has predictions in both")
    return out


def _difference(key: str, before: Memo, after: Memo) -> Metric:
    """after − before of `key` on the examples at the indices, each side's metrics computed
    once per index array for every key (`eval.compare`'s memo)."""
    of_before, of_after = before.value(key), after.value(key)
    return lambda idx: of_after(idx) - of_before(idx)


def seed_changes(pairs: Sequence[Pair], *, seed: int = 0) -> dict[str, dict[str, SeedPooled]]:
    """B − A of every share and mean, one pair per training seed, pooled over the seeds.

    Each pair is one seed's two sets of answers to the same examples, e.g. a run's baseline
    answers and its own (`Predictions(run, baseline=True), Predictions(run)`: the change
    training made), or the reference method's run and another method's run of that seed
    (`Predictions(grpo_run), Predictions(hargo_run)`). Per task that every pair answered (both
    files present), each seed's change is paired on its examples and the seeds are pooled by
    `eval.intervals.over_seeds` (per-seed intervals; the two-level bootstrap over seeds, then
    examples, from `MIN_POOLED_SEEDS` seeds; its docstring has the formula). The keys are
    those every pair gives an interval (`PairedTask.keys`: no maximum). Result: task → key →
    `SeedPooled`, the seeds in the order of `pairs`; EvalError when the pairs share no task or
    a pair's files answer other examples."""
    if not pairs:
        raise EvalError("seed_changes needs at least one pair of predictions")
    out: dict[str, dict[str, SeedPooled]] = {}
    for name in task_names():
        if not _answered_by_all(name, pairs):
            continue
        task = get_task(name)
        found = [paired_task(task, pair) for pair in pairs]
        keys = [k for k in found[0].keys if all(k in f.keys for f in found)]
        memos = [(Memo(f.before), Memo(f.after)) for f in found]
        out[name] = {key: over_seeds([(_difference(key, *memo), f.n)
                                      for f, memo in zip(found, memos, strict=True)], seed=seed)
                     for key in keys}
    if not out:
        sides = "; ".join(f"{a.file('TASK')} and {b.file('TASK')}" for a, b in pairs)
        raise EvalError(f"no task has predictions on both sides of every pair ({sides})")
    return out
