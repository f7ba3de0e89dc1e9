"""Command line of the handoff: the `hargo handoff` group and the `hargo worker` command.

Registered by `hargo_hpc.cli` (`main.add_command(handoff)`, `main.add_command(worker)`).
Thin: parse, call the library, format.
"""

from __future__ import annotations

import importlib
import json
import logging
import sys
from pathlib import Path
from typing import Any

import click
from pydantic import ValidationError

from hargo_hpc.cli.support import CONTEXT, UsageFailure, command, group
from hargo_hpc.config import load_config
from hargo_hpc.handoff import retention, schema
from hargo_hpc.handoff.settings import HandoffSettings
from hargo_hpc.handoff.status import gather, render
from hargo_hpc.handoff.trainer import Trainer

_DIR = click.Path(file_okay=False)


@group()
def handoff() -> None:
    """Inspect and maintain a handoff directory (trainer <-> bench workers)."""


@handoff.command("status", context_settings=CONTEXT)
@click.argument("directory", type=_DIR)
@click.option("--json", "as_json", is_flag=True, help="print JSON instead of a table")
@click.option("--all-workers", is_flag=True, help="also list workers that are gone")
def handoff_status(directory: str, as_json: bool, all_workers: bool) -> None:
    """Queued / claimed / done / failed per step, live workers, oldest pending request."""
    status = gather(directory)
    if as_json:
        click.echo(json.dumps(status.to_dict(), indent=2))
    else:
        click.echo(render(status, all_workers=all_workers))


@handoff.command("compact", context_settings=CONTEXT)
@click.argument("directory", type=_DIR)
@click.option("--step", "steps", type=click.IntRange(min=0), multiple=True,
              help="compact this step (repeatable); default: every closed step")
def handoff_compact(directory: str, steps: tuple[int, ...]) -> None:
    """Merge the results of closed steps into one file each."""
    _require_dir(directory)
    if steps:
        done = [retention.compact(directory, step) for step in steps]
    else:
        done = retention.compact_closed(directory)
    for item in done:
        extra = f", {item.skipped} unreadable skipped" if item.skipped else ""
        click.echo(f"step {item.step}: {item.results} results, {item.duplicates} duplicates, "
                   f"{item.failed_attempts} failed attempts{extra}")
    if not done:
        click.echo("nothing to compact")


@handoff.command("prune", context_settings=CONTEXT)
@click.argument("directory", type=_DIR)
@click.option("--keep", type=click.IntRange(min=0), required=True,
              help="keep the newest KEEP steps; older closed steps are deleted")
@click.option("--dry-run", is_flag=True, help="only say what would be deleted")
def handoff_prune(directory: str, keep: int, dry_run: bool) -> None:
    """Delete old closed steps; steps a trainer has not closed are never deleted."""
    _require_dir(directory)
    pruned, left = retention.prune(directory, keep, dry_run=dry_run)
    verb = "would prune" if dry_run else "pruned"
    click.echo(f"{verb} {len(pruned)} step(s)" + (f": {_steps(pruned)}" if pruned else ""))
    if left:
        click.echo(f"kept {len(left)} old step(s) that are not closed: {_steps(left)}")


@handoff.command("stop", context_settings=CONTEXT)
@click.argument("directory", type=_DIR)
@click.option("--reason", default="stopped by hand", show_default=True)
def handoff_stop(directory: str, reason: str) -> None:
    """Write the stop sentinel: every worker exits at its next look."""
    trainer = Trainer(directory, create=False, progress=False)
    trainer.stop(reason)
    click.echo(f"stop sentinel written in {directory}")


@handoff.command("schema", context_settings=CONTEXT)
@click.argument("kind", required=False, type=click.Choice(sorted(schema.KINDS)))
def handoff_schema(kind: str | None) -> None:
    """Print the JSON Schema of every handoff file kind (or of KIND)."""
    schemas = schema.json_schemas()
    click.echo(json.dumps(schemas[kind] if kind else schemas, indent=2))


@command("worker")
@click.option("--handoff", "directory", type=_DIR, required=True, help="the handoff directory")
@click.option("--max-idle", type=click.FloatRange(min=0, min_open=True),
              help="exit after this many seconds without work [handoff.worker_max_idle_s]")
@click.option("--idle-from-first-step", is_flag=True,
              help="start the idle clock only once the handoff holds a step (workers started "
              "before training; the stop sentinel ends them)")
@click.option("--max-requests", type=click.IntRange(min=1), help="exit after N requests")
@click.option("--threads", type=click.IntRange(min=1),
              help="requests benchmarked at once [handoff.worker_threads]")
@click.option("--lease", type=click.FloatRange(min=0, min_open=True),
              help="lease in seconds [handoff.lease_s]")
@click.option("--max-attempts", type=click.IntRange(min=1),
              help="infra failures before infra_error [handoff.max_attempts]")
@click.option("--max-infra-share", type=click.FloatRange(min=0, max=1, min_open=True),
              help="exit non-zero once more workload runs than this end infra_error "
              "[handoff.max_infra_share]")
@click.option("--config", "job", type=click.Path(dir_okay=False),
              help="experiment file: its [handoff] and [bench] sections")
@click.option("--fsync/--no-fsync", default=None,
              help="fsync results before they are linked into place [handoff.fsync]")
@click.option("--workload", metavar="MODULE:FUNCTION",
              help="a callable request -> record for every request, instead of each kind's "
              "registered workload (the bench for gemm)")
@click.option("--worker-id", help="default: Slurm array job/task or job id, host, pid")
@click.option("-q", "--quiet", is_flag=True, help="log warnings and errors only")
def worker(
    directory: str, max_idle: float | None, idle_from_first_step: bool,
    max_requests: int | None, threads: int | None,
    lease: float | None, max_attempts: int | None, max_infra_share: float | None,
    job: str | None, fsync: bool | None,
    workload: str | None, worker_id: str | None, quiet: bool,
) -> None:
    """Claim, benchmark and answer requests of a handoff directory until told to stop.

    Exits on the stop sentinel, when idle too long, after --max-requests, or on SIGTERM /
    SIGUSR1 (its claims are released first, so other workers take them over at once); exits
    with status 1 when a workload thread crashed or when too many runs ended infra_error
    (--max-infra-share), with the first error's message.
    """
    from hargo_hpc.handoff.worker import Worker
    from hargo_hpc.handoff.workloads import Dispatch

    logging.basicConfig(
        level=logging.WARNING if quiet else logging.INFO, stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    config = load_config(job) if job else None
    settings = config.handoff if config is not None else HandoffSettings()
    options = {"lease_s": lease, "max_attempts": max_attempts, "fsync": fsync,
               "worker_max_idle_s": max_idle, "max_infra_share": max_infra_share}  # fmt: skip
    updates = {key: value for key, value in options.items() if value is not None}
    try:  # validated again: e.g. --max-idle must outlive the lease
        settings = HandoffSettings.model_validate({**settings.model_dump(), **updates})
    except ValidationError as err:
        raise UsageFailure(schema.first_error(err, "--max-idle/--lease")) from None
    run = _load_workload(workload) if workload else Dispatch(config)
    stopped = Worker(
        directory, run, settings=settings, threads=threads or settings.worker_threads,
        max_requests=max_requests, worker_id=worker_id,
        idle_from_first_step=idle_from_first_step,
    ).run()
    click.echo(f"worker stopped: {stopped}", err=True)
    if stopped.failed:  # a workload thread crashed, or the harness fails: exit status 1
        sys.exit(1)


def _load_workload(spec: str) -> Any:
    module_name, _, name = spec.partition(":")
    try:
        target = getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError, ValueError) as err:
        raise UsageFailure(f"--workload {spec}: cannot load it ({err})") from None
    if not callable(target):
        raise UsageFailure(f"--workload {spec}: not callable")
    return target


def _require_dir(directory: str) -> None:
    if not Path(directory).is_dir():
        raise UsageFailure(f"handoff directory {directory} does not exist")


def _steps(steps: list[int]) -> str:
    shown = ", ".join(str(s) for s in steps[:20])
    return shown + (f" and {len(steps) - 20} more" if len(steps) > 20 else "")
