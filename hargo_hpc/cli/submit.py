"""`hargo render` and `hargo submit`: an experiment file to batch scripts, and to jobs.

Thin: parse, call `hargo_hpc.slurm.submission`, print. Bad input is one line, exit 2.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from hargo_hpc.cli.support import command, one_line
from hargo_hpc.config import load_config

if TYPE_CHECKING:
    from hargo_hpc.slurm.submission import Plan


def _plan(job: str, overrides: tuple[str, ...], python: str | None = None,
          config_dir: Path | None = None) -> Plan:
    """The plan of JOB, every script rendered once (a template error is one line before
    anything is written)."""
    from hargo_hpc.slurm.submission import plan_submission, render_job

    config = load_config(job, list(overrides))
    with one_line(ValueError, FileNotFoundError):  # a site template's error
        plan = plan_submission(config, job, python=python, config_dir=config_dir,
                               fetch_models=True)  # a hub id, once, here on the login node
        for planned in plan.jobs:
            render_job(plan, planned)
    return plan


@command("render")
@click.argument("job", type=click.Path(dir_okay=False))
@click.argument("overrides", nargs=-1)
@click.option("-o", "--out", "out_dir", type=click.Path(file_okay=False), required=True,
              help="directory for the scripts (created)")
def render(job: str, overrides: tuple[str, ...], out_dir: str) -> None:
    """Write the batch script of every job of JOB (after OVERRIDES) into OUT, and the runs'
    resolved configs into OUT/configs/: standalone scripts to `sbatch` by hand (chain stop
    and eval after train with --dependency, as the graph printed last says); their Slurm
    output goes to OUT/logs/."""
    from hargo_hpc.slurm.submission import LOGS, graph, write_run_configs, write_scripts

    out = Path(out_dir)
    plan = _plan(job, overrides, config_dir=out / "configs")
    paths = write_scripts(plan, out, log_dir=(out / LOGS).absolute())
    write_run_configs(plan, root=False)
    for name, path in paths.items():
        click.echo(f"{name:<6} {path}")
    click.echo(graph(plan))


@command("submit")
@click.argument("job", type=click.Path(dir_okay=False))
@click.argument("overrides", nargs=-1)
@click.option("--dry-run", is_flag=True, help="print the scripts and the graph; submit nothing")
@click.option("--executor", type=click.Choice(["slurm", "local"]), default="slurm",
              show_default=True, help="submitit's Slurm executor (this cluster), or its local "
              "executor (processes here, the same jobs and dependencies)")
@click.option("--wait", is_flag=True,
              help="follow the submission to its end; exit 1 if a job failed")
@click.option("--resume", is_flag=True,
              help="submit again into the existing submission directory (same file and "
              "overrides): each run continues from its latest checkpoint")
def submit(job: str, overrides: tuple[str, ...], dry_run: bool, executor: str,
           wait: bool, resume: bool) -> None:
    """Submit the experiment JOB (after OVERRIDES) through submitit: the SFT warm start, the
    training array (one task per [sweep] point), the bench worker array, then the evaluation,
    report and stop jobs chained after them. Writes <run.dir>/<run.name>/ (run.json, scripts/
    as `hargo render` writes them, submitit/ with each job's logs, handoff/, the runs)."""
    from hargo_hpc.slurm.submission import graph, render_job
    from hargo_hpc.slurm.submitter import submit_plan

    plan = _plan(job, overrides, python=sys.executable if executor == "local" else None)
    if dry_run:
        for planned in plan.jobs:
            click.echo(f"# ---- {planned.name}.sh")
            click.echo(render_job(plan, planned), nl=False)
        click.echo("# ---- dependency graph")
        click.echo(graph(plan))
        return
    manifest = submit_plan(plan, "local" if executor == "local" else "slurm",
                           log=lambda line: click.echo(line, err=True), resume=resume)
    click.echo(f"submission: {manifest.root}")
    if wait and executor == "slurm":
        from hargo_hpc.slurm.watch import wait_for

        failed = wait_for(manifest, write=lambda line: click.echo(line, err=True))
        if failed:
            click.echo(failed, err=True)
            sys.exit(1)
