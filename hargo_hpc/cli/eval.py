"""`hargo eval`: evaluate a model or run (evaluate.py), score predictions of a task, compare
two systems (WinRate).

A predictions file is a JSON list of records, or JSONL (one record per line), each with
`output` (the reference) and `prediction` (the system's raw completion or answer), and
optionally `instruction` and `input` (shown to an LLM judge; compared between WinRate's two
files). Bad input is one line, `error: ...`, exit 2. See docs/tasks.md.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from hargo_hpc.cli.support import CONTEXT, HargoGroup, UsageFailure, group, one_line
from hargo_hpc.tasks.base import Example, Task
from hargo_hpc.tasks.winrate import DEFAULT_MARGIN

TEXT_FIELDS = ("instruction", "input")  # optional strings
REQUIRED = ("output", "prediction")


class _EvalGroup(HargoGroup):
    """`hargo eval TARGET [OPTIONS]` runs the `model` subcommand: a first argument that is no
    subcommand's name is the model or run directory to evaluate."""

    def resolve_command(self, ctx: click.Context, args: list[str]
                        ) -> tuple[str | None, click.Command | None, list[str]]:
        if args and args[0] not in self.commands and not args[0].startswith("-"):
            args = ["model", *args]
        return super().resolve_command(ctx, args)

    def format_usage(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        formatter.write_usage("hargo eval", "MODEL_OR_RUN_DIR [OPTIONS] | COMMAND [ARGS]...")


@group("eval", cls=_EvalGroup)
def eval_group() -> None:
    """Evaluate a model or a run on the held-out split (`hargo eval MODEL_OR_RUN_DIR`, see
    `hargo eval model --help`); compare two evaluations, paired; score a predictions file;
    WinRate of one system against another."""


@eval_group.command("model", context_settings=CONTEXT)
@click.argument("target", metavar="MODEL_OR_RUN_DIR")
@click.option("--tasks", "task_names", default="",
              help="Comma-separated tasks (default: the run's, or the four text tasks).")
@click.option("--split", type=click.Choice(["eval", "train", "all"]), default="eval",
              show_default=True, help="Which examples: the held-out split, training's, all.")
@click.option("-n", "limit", type=click.IntRange(min=1), default=None,
              help="At most N examples per task (default: each task's eval size, capped by "
                   "eval.max_examples).")
@click.option("--baseline", default=None, metavar="MODEL_OR_RUN_DIR",
              help="WinRate against this (default: the run's starting model; none for a "
                   "model directory).")
@click.option("--judge", "judge_spec", default=None,
              help="WinRate judge: auto (the task's own score against the reference) or "
                   "llm:MODEL_DIR (default: eval.judge, auto).")
@click.option("--sample/--greedy", default=None,
              help="HPC-GPT's sampling (temperature 0.2, top-p 0.95) or greedy decoding "
                   "(default: eval.sample, greedy).")
@click.option("-o", "--out", default=None,
              help="Output directory (default: RUN_DIR/eval, or ./eval for a model).")
@click.option("--batch-size", type=click.IntRange(min=1), default=None,
              help="Prompts per generate call (default: eval.batch_size, 8).")
@click.option("--local-workers", type=click.IntRange(min=0), default=None,
              help="Bench workers to start for GEMM (default: the run's handoff.local_workers; "
                   "1 for a model directory). A submission's bench array serves its runs.")
@click.option("--stage", default=None, metavar="NAME",
              help="Ask GEMM under this SQD stage's prompt (one of the run's sqd.stages; its "
                   "requests forbid what it forbids); default: the plain prompt. The default "
                   "output directory gets -NAME appended.")
@click.option("--json", "as_json", is_flag=True, help="Print metrics.json instead of the table.")
def model(target: str, task_names: str, split: str, limit: int | None, baseline: str | None,
          judge_spec: str | None, sample: bool | None, out: str | None,
          batch_size: int | None, local_workers: int | None, stage: str | None,
          as_json: bool) -> None:
    """Answer the held-out prompts of each task with MODEL_OR_RUN_DIR (a run directory: its
    export, on its tasks and split; a model directory or tiny / smollm2: the text tasks on the
    shipped samples), score them with the tasks' metrics (GEMM through the bench), and WinRate
    against the baseline. Writes OUT/metrics.json (read by `hargo report`),
    OUT/predictions/<task>.jsonl (the format `hargo eval score` reads) and OUT/table.md."""
    from hargo_hpc.eval.evaluate import (
        baseline_target,
        evaluate,
        format_table,
        resolve_target,
    )

    names = [t.strip() for t in task_names.split(",") if t.strip()]
    evaluated = resolve_target(target, out=out, tasks=names or None)
    if stage is not None and out is None:  # beside the plain prompt's, not over it
        evaluated = resolve_target(target, out=f"{evaluated.out}-{stage}",
                                   tasks=names or None)  # fmt: skip
    base = None if baseline is None else baseline_target(baseline, evaluated)
    settings = evaluated.config.eval
    metrics = evaluate(
        evaluated, split=split, limit=limit or settings.max_examples or None,
        baseline=base, judge=judge_spec or settings.judge,
        sample=settings.sample if sample is None else sample,
        batch_size=batch_size or settings.batch_size, local_workers=local_workers,
        stage=stage, log=lambda line: click.echo(line, err=True))
    click.echo(json.dumps(metrics) if as_json else format_table(metrics), nl=as_json)
    if not as_json:
        click.echo(f"wrote {evaluated.out}/metrics.json, table.md, predictions/")


@eval_group.command("compare", context_settings=CONTEXT)
@click.argument("eval_a", metavar="A")
@click.argument("eval_b", metavar="B")
@click.option("--json", "as_json", is_flag=True, help="Print the changes as one JSON object.")
def compare(eval_a: str, eval_b: str, as_json: bool) -> None:
    """B − A of every share and mean, paired on the same examples, with its 95 % interval:
    A and B are two evaluations (`hargo eval`'s output directories, or run directories) of
    the same held-out examples, e.g. two methods of one sweep. A change whose interval
    excludes 0 is marked *."""
    from hargo_hpc.eval.paired_runs import compare_evaluations

    found = compare_evaluations(Path(eval_a), Path(eval_b))
    if as_json:
        click.echo(json.dumps({task: {k: v.to_json() for k, v in keys.items()}
                               for task, keys in found.items()}))
        return
    click.echo(f"B − A, paired: A = {eval_a}, B = {eval_b}")
    for task, keys in found.items():
        for key, change in keys.items():
            mark = " *" if change.excludes_zero() else ""
            click.echo(f"  {task:<18} {key:<16} {change.value:+.4f} "
                       f"[{change.low:+.4f}, {change.high:+.4f}] (n={change.n}){mark}")


@eval_group.command("score", context_settings=CONTEXT)
@click.argument("task_name", metavar="TASK")
@click.argument("predictions", metavar="PREDICTIONS")
@click.option("--json", "as_json", is_flag=True, help="Print the metrics as one JSON object.")
def score(task_name: str, predictions: str, as_json: bool) -> None:
    """Print TASK's metrics of the predictions in PREDICTIONS (a JSON list or JSONL file of
    records with `output`, the reference, and `prediction`)."""
    task = _task(task_name)
    records = _read(predictions)
    examples = _examples(task, records, predictions)
    metrics = task.metrics(examples, [r["prediction"] for r in records])
    _show(metrics, as_json, f"{task.name}: {len(records)} predictions in {predictions}")


@eval_group.command("winrate", context_settings=CONTEXT)
@click.argument("file_a", metavar="A")
@click.argument("file_b", metavar="B")
@click.option("--task", "task_name", required=True, help="The task whose records both hold.")
@click.option("--judge", "judge_spec", default="auto", show_default=True,
              help="auto (reference-grounded, the task's own score) or llm:MODEL_DIR.")
@click.option("--margin", type=float, default=DEFAULT_MARGIN, show_default=True,
              help="auto judge: score differences up to this are ties.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as one JSON object.")
def winrate(file_a: str, file_b: str, task_name: str, judge_spec: str, margin: float,
            as_json: bool) -> None:
    """WinRate of system A against system B: two prediction files over the same records
    (same order, same `instruction` and `output`); ties count half."""
    from hargo_hpc.tasks.winrate import make_judge, win_rate

    task = _task(task_name)
    records_a, records_b = _read(file_a), _read(file_b)
    examples = _examples(task, records_a, file_a)
    _examples(task, records_b, file_b)
    _same_records(records_a, records_b, file_a, file_b)
    with one_line(ValueError):  # a bad judge spec
        judge = make_judge(judge_spec, task, margin)
    result = win_rate(examples, [r["prediction"] for r in records_a],
                      [r["prediction"] for r in records_b], judge)
    _show(result.as_dict(), as_json, f"{task.name}: {file_a} (A) against {file_b} (B), "
                                     f"judge {judge_spec}")


def _task(name: str) -> Task:
    from hargo_hpc.eval.evaluate import text_tasks
    from hargo_hpc.tasks.registry import get_task, task_class, task_names

    if name in task_names() and task_class(name).remote:
        raise UsageFailure(f"{name} predictions are kernels, scored by measurement: "
                           "use `hargo bench run`, not `hargo eval`")
    if name not in task_names():
        raise UsageFailure(f"unknown task {name!r}; known: {', '.join(text_tasks())}")
    return get_task(name)


def _read(path: str) -> list[dict[str, Any]]:
    """The validated records of a predictions file (JSON list, or JSONL); UsageFailure naming
    the file and the record (or line) for anything else."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        reason = getattr(err, "strerror", None) or err
        raise UsageFailure(f"{path}: cannot read: {reason}") from None
    if text.lstrip().startswith("["):
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as err:
            raise UsageFailure(f"{path}: not valid JSON: {err.msg} "
                               f"(line {err.lineno}, column {err.colno})") from None
    else:
        raw = []
        for lineno, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                raw.append(json.loads(line))
            except json.JSONDecodeError as err:
                raise UsageFailure(f"{path}: line {lineno}: not valid JSON ({err.msg}); "
                                   "expected a JSON list of records or JSONL") from None
    if not raw:
        raise UsageFailure(f"{path}: no records")
    for index, record in enumerate(raw):
        if not isinstance(record, dict):
            raise UsageFailure(f"{path}: record {index} is not an object "
                               f"(got {type(record).__name__})")
        for key in REQUIRED:
            if not isinstance(record.get(key), str):
                problem = "has no" if key not in record else "has a non-string"
                raise UsageFailure(f"{path}: record {index} {problem} {key!r}")
        for key in TEXT_FIELDS:
            if record.get(key) is not None and not isinstance(record[key], str):
                raise UsageFailure(f"{path}: record {index}: {key!r} is not a string")
    return raw


def _examples(task: Task, records: list[dict[str, Any]], path: str) -> list[Example]:
    examples = []
    for index, record in enumerate(records):
        source = {"instruction": record.get("instruction") or "",
                  "input": record.get("input") or "", "output": record["output"]}
        example = task.from_record(source, index)
        if example is None:
            raise UsageFailure(f"{path}: record {index}: output {record['output'][:40]!r} is "
                               f"not a {task.name} reference")
        examples.append(example)
    return examples


def _same_records(a: list[dict[str, Any]], b: list[dict[str, Any]], file_a: str,
                  file_b: str) -> None:
    if len(a) != len(b):
        raise UsageFailure(f"{file_a} has {len(a)} records but {file_b} has {len(b)}: "
                           f"record {min(len(a), len(b))} has no counterpart")
    for index, (x, y) in enumerate(zip(a, b, strict=True)):
        for key in ("instruction", "input", "output"):
            if (x.get(key) or "") != (y.get(key) or ""):
                raise UsageFailure(f"{file_a} and {file_b} differ at record {index}: {key!r}")


def _show(values: dict[str, Any], as_json: bool, title: str) -> None:
    if as_json:
        click.echo(json.dumps(values))
        return
    click.echo(title)
    width = max(map(len, values))
    for key, value in values.items():
        shown = f"{value:.4f}" if isinstance(value, float) else str(value)
        click.echo(f"  {key:<{width}}  {shown}")
