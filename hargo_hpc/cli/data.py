"""`hargo data`: look at task data (stats, prompts)."""

from __future__ import annotations

import json
from typing import Any

import click

from hargo_hpc.cli.support import CONTEXT, UsageFailure, group
from hargo_hpc.tasks.names import PROMPT_FORMATS


@group()
def data() -> None:
    """Inspect task data: sizes, label balance, answer lengths, the prompts (docs/data.md)."""


@data.command("stats", context_settings=CONTEXT)
@click.argument("path")
@click.option("--task", "task", default=None,
              help="the task of a single file (default: the one its published name says)")
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
def stats_command(path: str, task: str | None, as_json: bool) -> None:
    """Sizes, label balance and answer lengths of the task data at PATH.

    PATH is a directory (every published HPC-GPT file in it: task1_ml_perf.json,
    task1_plp.json, task2_c_c++.json, task2_fortran.json) or one file of a task.
    """
    from hargo_hpc.tasks import stats

    found = stats.collect_stats(path, task)
    if as_json:
        click.echo(json.dumps(stats.as_json(found), indent=2))
    else:
        click.echo(stats.format_table(found), nl=False)


@data.command("show", context_settings=CONTEXT)
@click.argument("task")
@click.option("--path", default="", help="the task's data (default: its shipped sample)")
@click.option("-n", "count", type=click.IntRange(min=1), default=3, show_default=True,
              help="how many examples")
@click.option("--format", "prompt_format", type=click.Choice(PROMPT_FORMATS), default="auto",
              show_default=True, help="the prompt format (chat needs --model)")
@click.option("--model", default=None, help="a model directory whose tokenizer formats chat")
def show_command(task: str, path: str, count: int, prompt_format: str, model: str | None) -> None:
    """The first N prompts of TASK exactly as the model sees them, each with its reference."""
    from hargo_hpc.tasks.data import load_examples
    from hargo_hpc.tasks.prompts import build_prompt, resolve_format
    from hargo_hpc.tasks.registry import get_task

    instance = get_task(task)
    tokenizer = _tokenizer(model) if model else None
    try:
        resolved = resolve_format(prompt_format, tokenizer)
    except ValueError as err:
        hint = " (give --model DIR)" if tokenizer is None else ""
        raise UsageFailure(f"{err}{hint}") from None
    examples = load_examples(instance, path, max_items=count,
                             log=lambda line: click.echo(line, err=True))
    for number, example in enumerate(examples, start=1):
        prompt = build_prompt(instance.user_text(example), resolved, tokenizer)
        click.echo(f"===== {number}/{len(examples)} {example.id} ({resolved}) =====")
        click.echo("----- prompt -----")
        click.echo(prompt)
        click.echo("----- reference -----")
        click.echo(example.output)
    click.echo("===== end =====")


def _tokenizer(model: str) -> Any:
    """The tokenizer of the model directory `model`, offline; UsageFailure when it cannot
    load."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(model, local_files_only=True)
    except Exception as err:  # a missing directory, no tokenizer files: one line
        first = (str(err).strip() or type(err).__name__).splitlines()[0]
        raise UsageFailure(f"{model}: cannot load a tokenizer: {first}") from None
