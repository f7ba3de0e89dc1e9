"""Two evaluations on the same examples, compared: the paired change of every metric.

`hargo eval` writes each task's answers to `<eval dir>/predictions/<task>.jsonl`, one line per
answer (`id`, `sample`, `output`, `prediction`, `reward`; GEMM's `record`). Two runs evaluated
on the same held-out examples (a sweep's methods: one SFT start, one split) are compared here
line by line: B − A of each share and mean on the same resampled examples
(`eval.compare.paired`), which is how "HARGO − GRPO" gets its interval. Evaluations whose
lines differ in id or order are refused (`EvalError`, naming both files).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hargo_hpc.eval.compare import interval_keys, paired
from hargo_hpc.eval.evaluate import Answers, EvalError, TaskPlan, unit_metrics
from hargo_hpc.eval.intervals import Interval
from hargo_hpc.runs import RunLayout
from hargo_hpc.tasks.base import Example, Task
from hargo_hpc.tasks.registry import get_task, task_names

PREDICTIONS = "predictions"


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


def compare_evaluations(a: Path, b: Path, *, seed: int = 0) -> dict[str, dict[str, Interval]]:
    """B − A, per task both evaluated, of every share and mean, paired on their examples.
    `a` and `b` are evaluation directories (holding predictions/) or run directories (their
    eval/)."""
    dirs = [d / RunLayout.EVAL if (d / RunLayout.EVAL / PREDICTIONS).is_dir() else d
            for d in (a, b)]
    out: dict[str, dict[str, Interval]] = {}
    for name in task_names():
        files = [d / PREDICTIONS / f"{name}.jsonl" for d in dirs]
        if not all(f.is_file() for f in files):
            continue
        rows_a, rows_b = (read_predictions(f) for f in files)
        ids_a = [(r.get("id"), r.get("sample", 0)) for r in rows_a]
        if ids_a != [(r.get("id"), r.get("sample", 0)) for r in rows_b]:
            raise EvalError(f"{files[0]} and {files[1]} answer other examples (or in another "
                            "order): a paired comparison needs the same ones")
        task = get_task(name)
        plan, answers_a = plan_and_answers(task, rows_a)
        _, answers_b = plan_and_answers(task, rows_b)
        of_a, of_b = unit_metrics(task, plan, answers_a), unit_metrics(task, plan, answers_b)
        n = len(plan.examples)
        keys = interval_keys(dict(of_a(list(range(n)))))
        out[name] = paired(of_a, of_b, n, keys, seed=seed)
    if not out:
        raise EvalError(f"{a} and {b}: no task has predictions in both")
    return out
