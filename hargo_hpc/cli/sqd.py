"""`hargo sqd stages JOB` and `hargo sqd report RUN_DIR`: SQD's schedule, and what a run's
SQD did (`hargo_hpc.sqd.report`). Registered by hargo_hpc/cli.py; thin.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from hargo_hpc.cli.support import CONTEXT, UsageFailure, group, one_line
from hargo_hpc.config import load_config
from hargo_hpc.files import read_jsonl
from hargo_hpc.runs import RunLayout
from hargo_hpc.sqd.report import PLOT, plot, report_text, schedule_text
from hargo_hpc.sqd.schedule import RESULTS, STATE, load_state_file


@group("sqd")
def sqd() -> None:
    """Staged Quality-Diversity: the schedule of an experiment, the report of a run."""


@sqd.command("stages", context_settings=CONTEXT)
@click.argument("job", type=click.Path(dir_okay=False))
@click.argument("overrides", nargs=-1)
def stages(job: str, overrides: tuple[str, ...]) -> None:
    """Print JOB's SQD stages (permitted, forbidden, required techniques) and its rule."""
    config = load_config(job, list(overrides))
    click.echo(schedule_text(config.sqd))


@sqd.command("report", context_settings=CONTEXT)
@click.argument("run_dir", type=click.Path(file_okay=False))
def report(run_dir: str) -> None:
    """Print each problem's stage history and archive (technique set, best GFLOPS, share of
    the in-run reference) from RUN_DIR/sqd/, and write RUN_DIR/sqd/gflops.png."""
    directory = RunLayout(Path(run_dir)).sqd
    if not (directory / STATE).is_file():
        raise UsageFailure(f"{directory / STATE}: no such file; was {run_dir} trained with "
                           "sqd.enabled?")
    state = load_state_file(directory / STATE)  # SqdError naming the file
    with one_line(KeyError, TypeError, IndexError, json.JSONDecodeError,
                  prefix=f"{directory}: "):
        results = read_jsonl(directory / RESULTS)
        click.echo(report_text(state, results))
    click.echo(f"plot: {plot(results, state['stages'], directory / PLOT)}")
