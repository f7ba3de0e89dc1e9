"""`hargo config show | validate`: the resolved experiment file, and its checks."""

from __future__ import annotations

import click

from hargo_hpc.cli.support import CONTEXT, group, one_line
from hargo_hpc.config import ExperimentConfig, load_config


@group()
def config() -> None:
    """Inspect and check experiment files (jobs/*.toml)."""


@config.command("show", context_settings=CONTEXT)
@click.argument("job", type=click.Path(dir_okay=False))
@click.argument("overrides", nargs=-1)
def config_show(job: str, overrides: tuple[str, ...]) -> None:
    """Print the resolved config of JOB after OVERRIDES (section.key=value ...)."""
    click.echo(load(job, overrides).to_toml(), nl=False)


@config.command("validate", context_settings=CONTEXT)
@click.argument("job", type=click.Path(dir_okay=False))
@click.argument("overrides", nargs=-1)
def config_validate(job: str, overrides: tuple[str, ...]) -> None:
    """Check JOB (and OVERRIDES); print `ok` or one line naming what is wrong.

    Beyond the schema, this resolves the algorithm preset (e.g. HARGO's base estimator must
    be the method's) and checks that the rollout batch divides into micro-batches, on one
    rank and on [slurm.train]'s nodes x tasks, with one GPU per rank when it asks for GPUs.
    """
    cfg = load(job, overrides)
    from hargo_hpc.algorithms.presets import resolve_algorithm
    from hargo_hpc.config import expand_sweep
    from hargo_hpc.config.training import check_batch_shape
    from hargo_hpc.slurm.submission import check_memory, check_ranks

    points = expand_sweep(cfg, job)
    for label, point, _ in points:
        where = f"{job}" + (f" (sweep point {label})" if label else "")
        with one_line(ValueError, prefix=f"{where}: "):
            resolve_algorithm(point.algorithm)
            check_batch_shape(point.rollout, point.training)  # one rank (hargo train)
        check_ranks(point, where)  # the ranks of [slurm.train] (hargo submit)
        check_memory(point, where)  # slurm.train.gpu_memory_gib, when set
    runs = f", {len(points)} sweep runs" if cfg.sweep else ""
    click.echo(f"ok: {job} (run {cfg.run.name}, algorithm {cfg.algorithm.name}{runs})")


@config.command("check", context_settings=CONTEXT)
@click.argument("job", type=click.Path(dir_okay=False))
@click.argument("overrides", nargs=-1)
def config_check(job: str, overrides: tuple[str, ...]) -> None:
    """Print the training job's estimated memory a GPU, by component and phase, and its host
    memory a node, for JOB's model, ZeRO stage, ranks, precision and batch (docs/cluster.md,
    "6. Memory"); exit 1 when it exceeds slurm.train.gpu_memory_gib or slurm.train.mem.

    Reads the model's config.json (or the tiny / smollm2 shapes), never its weights.
    """
    cfg = load(job, overrides)
    from hargo_hpc.algorithms.presets import resolve_algorithm
    from hargo_hpc.train.memory import (
        architecture_of,
        fit_refusal,
        host_plan,
        host_refusal,
        memory_plan,
        plan_lines,
    )

    needs_reference = resolve_algorithm(cfg.algorithm).needs_reference
    with one_line(ValueError, prefix=f"{job}: "):
        arch = architecture_of(cfg.model.path, cfg.model.revision)
        plan = memory_plan(cfg, arch, needs_reference)
    host = host_plan(cfg, arch, needs_reference)
    for line in plan_lines(plan, arch, host):
        click.echo(line)
    limit = cfg.slurm.train.gpu_memory_gib
    refusal = (fit_refusal(plan, limit)
               or host_refusal(host, cfg.slurm.train.mem))
    if refusal:
        click.echo(f"error: {job}: {refusal}", err=True)
        raise SystemExit(1)
    click.echo(f"fits slurm.train.mem = {cfg.slurm.train.mem}"
               + (f" and gpu_memory_gib = {limit:g}" if limit else
                  "; set slurm.train.gpu_memory_gib to have hargo submit check a GPU"))


def load(job: str, overrides: tuple[str, ...]) -> ExperimentConfig:
    """The experiment file with its overrides (a ConfigError is the group's to render)."""
    return load_config(job, list(overrides))
