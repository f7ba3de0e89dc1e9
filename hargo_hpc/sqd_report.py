"""`hargo sqd stages JOB` and `hargo sqd report RUN_DIR`: SQD's schedule, and what a run's
SQD did (per problem the stage history and the archive; a PNG of GFLOPS over steps coloured by
stage). Reads `<run dir>/sqd/state.json` and `results.jsonl` (written by the trainer,
hargo_hpc.sqd); matplotlib only for the PNG.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from hargo_hpc.cli_support import CONTEXT, UsageFailure
from hargo_hpc.config import ConfigError, load_config
from hargo_hpc.files import read_jsonl
from hargo_hpc.runs import RunLayout
from hargo_hpc.sqd import RESULTS, STATE, SqdError, SqdSettings, load_state_file

PLOT = "gflops.png"


def schedule_text(settings: SqdSettings) -> str:
    """The stages, one line each, then the rule."""
    lines = [f"{'stage':<10} {'permitted':<36} {'forbidden':<28} required"]
    for stage in settings.stages:
        lines.append(f"{stage.name:<10} {', '.join(stage.permitted) or '-':<36} "
                     f"{', '.join(stage.forbid) or '-':<28} {', '.join(stage.require) or '-'}")
    lines.append(f"advance when the best GFLOPS gains less than {settings.min_improvement:.0%} "
                 f"for {settings.patience} steps, or after {settings.max_steps} steps in a "
                 f"stage; after the last: {settings.after_last}"
                 + ("" if settings.enabled else "  (sqd.enabled is false: plain GFLOPS reward)"))
    return "\n".join(lines)


def report_text(state: dict[str, Any], results: list[dict[str, Any]]) -> str:
    """Per problem: its stage now and its stage changes, then its archive rows."""
    stages = state["stages"]
    lines = []
    for problem, p in sorted(state["problems"].items()):
        seen = sum(1 for r in results if r["problem"] == problem)
        lines.append(f"{problem}: stage {stages[p['stage']]} ({seen} results, "
                     f"{p['cycles']} cycles)")
        for change in p["history"]:
            lines.append(f"  step {change['step']:>5}: -> {stages[change['stage']]} "
                         f"({change['why']})")
        rows = sorted((e for e in state["archive"].values() if e["problem"] == problem),
                      key=lambda e: -e["gflops"])
        if rows:
            lines.append(f"  {'techniques':<28} {'GFLOPS':>8} {'of ref.':>8} {'step':>6} stage")
        for e in rows:
            share = "-" if e["ratio"] is None else f"{100 * e['ratio']:.1f}%"
            lines.append(f"  {'+'.join(e['techniques']) or 'none':<28} {e['gflops']:>8.2f} "
                         f"{share:>8} {e['step']:>6} {e['stage']}")
    return "\n".join(lines)


def plot(results: list[dict[str, Any]], stages: list[str], out: Path) -> Path:
    """GFLOPS of every ok result over steps, one colour per stage, one panel per problem."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    problems = sorted({r["problem"] for r in results}) or ["(no results)"]
    fig, axes = plt.subplots(len(problems), 1, figsize=(7, 2.6 * len(problems)), squeeze=False)
    colours = plt.get_cmap("viridis", max(len(stages), 2))
    for ax, problem in zip(axes[:, 0], problems, strict=True):
        for index, stage in enumerate(stages):
            points = [(r["step"], r["gflops"]) for r in results if r["problem"] == problem
                      and r["stage"] == stage and r["status"] == "ok" and r["gflops"]]
            if points:
                ax.scatter(*zip(*points, strict=True), s=12, color=colours(index), label=stage)
        ax.set_title(problem)
        ax.set_xlabel("step")
        ax.set_ylabel("GFLOPS")
        if ax.has_data():
            ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(out, dpi=80)
    plt.close(fig)
    return out


@click.group("sqd", context_settings=CONTEXT)
def sqd() -> None:
    """Staged Quality-Diversity: the schedule of an experiment, the report of a run."""


@sqd.command("stages", context_settings=CONTEXT)
@click.argument("job", type=click.Path(dir_okay=False))
@click.argument("overrides", nargs=-1)
def stages(job: str, overrides: tuple[str, ...]) -> None:
    """Print JOB's SQD stages (permitted, forbidden, required techniques) and its rule."""
    try:
        config = load_config(job, list(overrides))
    except ConfigError as err:
        raise UsageFailure(str(err)) from None
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
    try:
        state = load_state_file(directory / STATE)
        results = read_jsonl(directory / RESULTS)
        click.echo(report_text(state, results))
    except (SqdError, KeyError, TypeError, IndexError, json.JSONDecodeError) as err:
        raise UsageFailure(f"{directory}: {err}") from None
    click.echo(f"plot: {plot(results, state['stages'], directory / PLOT)}")
