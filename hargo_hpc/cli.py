"""The `hargo` command line: parses arguments, calls library functions, formats output.

Each area's commands are a click group in the owning package (`<package>/commands.py`),
registered here; this module holds no logic of its own.
"""

from __future__ import annotations

import click

from hargo_hpc import __version__
from hargo_hpc.bench.commands import bench
from hargo_hpc.cli_support import CONTEXT, HargoGroup, UsageFailure
from hargo_hpc.config import ConfigError, ExperimentConfig, load_config
from hargo_hpc.eval.commands import eval_group
from hargo_hpc.examples.commands import init
from hargo_hpc.handoff.commands import handoff, worker
from hargo_hpc.report.commands import report
from hargo_hpc.slurm.commands import render, submit
from hargo_hpc.slurm.watch_commands import cancel, logs, status
from hargo_hpc.sqd.commands import sqd
from hargo_hpc.tasks.commands import data
from hargo_hpc.train.commands import sft, train


@click.group(cls=HargoGroup, context_settings=CONTEXT)
@click.version_option(__version__, "-V", "--version", prog_name="hargo")
def main() -> None:
    """hargo-hpc: RL post-training of LLMs on HPC tasks, on Slurm.

    Write an experiment file (`hargo init DIR` copies the examples into DIR/jobs/), check it
    with `hargo config validate`, then run it.
    """


@main.group(context_settings=CONTEXT)
def config() -> None:
    """Inspect and check experiment files (jobs/*.toml)."""


@config.command("show", context_settings=CONTEXT)
@click.argument("job", type=click.Path(dir_okay=False))
@click.argument("overrides", nargs=-1)
def config_show(job: str, overrides: tuple[str, ...]) -> None:
    """Print the resolved config of JOB after OVERRIDES (section.key=value ...)."""
    click.echo(load_or_fail(job, overrides).to_toml(), nl=False)


@config.command("validate", context_settings=CONTEXT)
@click.argument("job", type=click.Path(dir_okay=False))
@click.argument("overrides", nargs=-1)
def config_validate(job: str, overrides: tuple[str, ...]) -> None:
    """Check JOB (and OVERRIDES); print `ok` or one line naming what is wrong.

    Beyond the schema, this resolves the algorithm preset (e.g. HARGO's base estimator must
    be the method's) and checks that the rollout batch divides into micro-batches, on one
    rank and on [slurm.train]'s nodes x tasks, with one GPU per rank when it asks for GPUs.
    """
    cfg = load_or_fail(job, overrides)
    from hargo_hpc.algorithms.presets import resolve_algorithm
    from hargo_hpc.config import expand_sweep
    from hargo_hpc.slurm.submission import check_ranks
    from hargo_hpc.train.settings import check_batch_shape

    try:
        points = expand_sweep(cfg, job)
        for label, point, _ in points:
            where = f"{job}" + (f" (sweep point {label})" if label else "")
            try:
                resolve_algorithm(point.algorithm)
                check_batch_shape(point.rollout, point.training)  # one rank (hargo train)
            except ValueError as err:
                raise UsageFailure(f"{where}: {err}") from None
            check_ranks(point, where)  # the ranks of [slurm.train] (hargo submit)
    except ConfigError as err:
        raise UsageFailure(str(err)) from None
    runs = f", {len(points)} sweep runs" if cfg.sweep else ""
    click.echo(f"ok: {job} (run {cfg.run.name}, algorithm {cfg.algorithm.name}{runs})")


def load_or_fail(job: str, overrides: tuple[str, ...]) -> ExperimentConfig:
    try:
        return load_config(job, list(overrides))
    except ConfigError as err:
        raise UsageFailure(str(err)) from None


# Each area owns its commands (`<package>/commands.py`); the CLI only mounts them.
main.add_command(bench)
main.add_command(cancel)
main.add_command(data)
main.add_command(eval_group)
main.add_command(handoff)
main.add_command(init)
main.add_command(logs)
main.add_command(render)
main.add_command(report)
main.add_command(submit)
main.add_command(sft)
main.add_command(sqd)
main.add_command(status)
main.add_command(train)
main.add_command(worker)

