"""Command line of watching a submission: `hargo status`, `hargo cancel`, `hargo logs`.

Registered by `hargo_hpc.cli` (`main.add_command(status)`, ...). Thin: parse, call
`hargo_hpc.slurm.watch`, print. Every error is one line on stderr: exit 2 for bad input or a
failing Slurm command, exit 1 for `logs` when no log file exists yet.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from typing import Any

import click

from hargo_hpc.cli.support import UsageFailure, command, one_line
from hargo_hpc.slurm import watch
from hargo_hpc.slurm.manifest import Manifest, load_manifest

_RUN_DIR = click.Path(file_okay=False)


class NothingYet(UsageFailure):
    """Nothing to show yet (no log file written): one line, exit code 1."""

    exit_code = 1


@command("status")
@click.argument("run_dir", type=_RUN_DIR)
@click.option("--json", "as_json", is_flag=True, help="print JSON instead of a table")
def status(run_dir: str, as_json: bool) -> None:
    """Jobs and array tasks of the submission in RUN_DIR with their states, and progress.

    States come from one sacct call (squeue for jobs sacct does not list yet); progress from
    the files: each run's last step and reward (metrics.jsonl), whether it finished, and the
    handoff's open steps, pending benchmarks and live workers.
    """
    manifest = load_manifest(run_dir)
    found = _call(watch.status, manifest)
    click.echo(json.dumps(found.to_dict(), indent=2) if as_json else watch.format_status(found))


@command("cancel")
@click.argument("run_dir", type=_RUN_DIR)
def cancel(run_dir: str) -> None:
    """Stop the submission in RUN_DIR: write the handoff's stop sentinel, then scancel every
    job of it (one scancel). Safe to repeat, and on a finished submission."""
    manifest = load_manifest(run_dir)
    cancelled = _call(watch.cancel, manifest)
    if manifest.handoff_dir:
        click.echo(f"stop sentinel written in {manifest.handoff_dir}")
    if cancelled:
        names = ", ".join(f"{j.name} {j.job_id}" for j in manifest.jobs if j.job_id)
        click.echo(f"scancel sent to {len(cancelled)} job(s): {names}")
    elif manifest.executor != "slurm":
        click.echo(f"executor {manifest.executor}: no Slurm jobs to cancel")
    else:
        click.echo("no job of this submission was submitted: nothing to scancel")


@command("logs")
@click.argument("run_dir", type=_RUN_DIR)
@click.option("--job", "job", metavar="NAME", help="only this job (train, bench, eval, ...)")
@click.option("--task", "task", type=click.IntRange(min=0), metavar="I",
              help="only array task I")
@click.option("-f", "--follow", "follow", is_flag=True,
              help="keep printing what is appended until the jobs end (or Ctrl-C)")
def logs(run_dir: str, job: str | None, task: int | None, follow: bool) -> None:
    """Print the Slurm output files of the submission in RUN_DIR, each after a
    `==> path <==` header; a task that has not started yet is said to have no log yet."""
    manifest = load_manifest(run_dir)
    paths = _call(watch.log_files, manifest, job, task)
    missing = [path for path in paths if not path.exists()]
    if not paths or (len(missing) == len(paths) and not follow):
        where = f" (e.g. {paths[0]})" if paths else ""
        raise NothingYet(f"no log file exists yet for {len(paths)} task(s){where}")
    if not follow:
        watch.show_logs(paths, _echo)
        return
    if missing:
        click.echo(f"waiting for {len(missing)} log file(s) not written yet", err=True)
    done = _ended(manifest, job, task) if manifest.executor == "slurm" else None
    try:
        ended = watch.follow(paths, _echo, done=done)
    except KeyboardInterrupt:
        return
    if ended == "finished":
        click.echo("(every task of these logs has ended)", err=True)


def _ended(manifest: Manifest, job: str | None, task: int | None) -> Callable[[], bool]:
    def ended() -> bool:
        return bool(_call(watch.tasks_finished, manifest, job, task))

    return ended


def _echo(text: str) -> None:
    click.echo(text, nl=False)


def _call(function: Callable[..., Any], *args: Any) -> Any:
    with one_line(OSError, subprocess.TimeoutExpired):
        return function(*args)
