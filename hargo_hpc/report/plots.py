"""The report's PNGs: training curves of every run, one line per run ("<method> s<seed>").

`write_plots` draws `reward.png`, `weight_share.png`, `contrast.png`, `completion_length.png`
and `gemm_gflops.png` from the runs' records, each only when some run has its data;
`plot_notes` says which are skipped and why; `matplotlib_config_dir` keeps matplotlib's cache
out of ~/.cache. What each plot shows and when it is drawn: docs/report.md, "The plots".
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from hargo_hpc.files import temp_name, unlink_quietly
from hargo_hpc.report.table import RunSummary, number, run_labels, sort_runs

REWARD, WEIGHT_SHARE, CONTRAST, LENGTH, GFLOPS = (
    "reward.png", "weight_share.png", "contrast.png", "completion_length.png",
    "gemm_gflops.png")
PLOT_FILES = (REWARD, WEIGHT_SHARE, CONTRAST, LENGTH, GFLOPS)
DESCRIPTIONS = {
    REWARD: "Mean reward per task over RL steps (tasks/<task>/reward_mean).",
    CONTRAST: "Share of each task's groups with reward contrast over steps "
              "(tasks/<task>/contrast_share): the groups the update learns from.",
    WEIGHT_SHARE: "HARGO's share of Σ|w·A| per task over steps (solid), and the same share "
                  "with w ≡ 1 (dashed).",
    LENGTH: "Mean completion length in tokens per task over steps "
            "(tasks/<task>/completion_length).",
    GFLOPS: "GEMM GFLOPS over steps: with SQD every ok result coloured by its stage and the "
            "step's best as a line; else the step's mean (and max, dashed).",
}
Series = tuple[list[int], list[float]]


def series(run: RunSummary, key: str) -> Series:
    """(steps, values) of `key` over the run's records, steps without a number left out."""
    steps, values = [], []
    for record in run.records:
        value = number(record.get(key))
        if value is not None:
            steps.append(record["step"])
            values.append(value)
    return steps, values


def _tasks_with(runs: Sequence[RunSummary], suffix: str) -> list[str]:
    return [t for t in dict.fromkeys(t for run in runs for t in run.tasks)
            if any(series(run, f"tasks/{t}/{suffix}")[0] for run in runs)]


def _hargo_runs(runs: Sequence[RunSummary]) -> list[RunSummary]:
    return [run for run in runs
            if any(series(run, f"tasks/{t}/weight_share")[0] for t in run.tasks)]


def sqd_points(run: RunSummary) -> list[tuple[int, float, str]]:
    """(step, GFLOPS, stage) of each ok result with a number in sqd/results.jsonl."""
    points = []
    for result in run.sqd_results:
        step, gflops = result.get("step"), number(result.get("gflops"))
        if result.get("status") == "ok" and isinstance(step, int) and gflops is not None:
            points.append((step, gflops, str(result.get("stage"))))
    return points


def _gemm_runs(runs: Sequence[RunSummary]) -> list[RunSummary]:
    return [run for run in runs
            if sqd_points(run) or series(run, "tasks/gemm/gflops_mean")[0]]


def _skips(runs: Sequence[RunSummary]) -> dict[str, str]:
    """Plot file -> why it is not drawn, for the plots that are not."""
    why = {}
    if not _tasks_with(runs, "reward_mean"):
        why[REWARD] = "no per-task reward (tasks/<task>/reward_mean) in any metrics.jsonl"
    if not _hargo_runs(runs):
        why[WEIGHT_SHARE] = "no run has HARGO weight shares (tasks/<task>/weight_share)"
    if not _tasks_with(runs, "contrast_share"):
        why[CONTRAST] = "no per-task contrast share (tasks/<task>/contrast_share) in any " \
            "metrics.jsonl (runs before it was logged)"
    if not _tasks_with(runs, "completion_length"):
        why[LENGTH] = "no per-task completion length in any metrics.jsonl"
    if not _gemm_runs(runs):
        why[GFLOPS] = "no run has GEMM GFLOPS (sqd/results.jsonl or tasks/gemm/gflops_mean)"
    return why


def plot_notes(runs: Sequence[RunSummary]) -> list[str]:
    """One note per plot that `write_plots` skips, saying why (matplotlib not imported)."""
    return [f"{file} not drawn: {why}" for file, why in _skips(runs).items()]


def matplotlib_config_dir() -> str:
    """MPLCONFIGDIR, set first (when unset) to `<tmp>/hargo-matplotlib-<uid>`: created 0700
    and used only when this user owns it and it is no link; else a fresh private directory."""
    if os.environ.get("MPLCONFIGDIR"):
        return os.environ["MPLCONFIGDIR"]
    directory = Path(tempfile.gettempdir()) / f"hargo-matplotlib-{os.getuid()}"
    try:
        directory.mkdir(mode=0o700, exist_ok=True)
        info = os.lstat(directory)
        usable = (stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid()
                  and not info.st_mode & 0o077)
    except OSError:
        usable = False
    chosen = str(directory) if usable else tempfile.mkdtemp(prefix="hargo-matplotlib-")
    os.environ["MPLCONFIGDIR"] = chosen
    return chosen


def _colours(count: int) -> Callable[[int], Any]:
    from matplotlib import colormaps

    name = "tab10" if count <= 10 else "tab20" if count <= 20 else "viridis"
    cmap = colormaps[name].resampled(max(count, 2)) if name == "viridis" else colormaps[name]
    return lambda index: cmap(index)


def _grid(fig: Any, count: int, *, sharey: bool = False) -> list[Any]:
    cols = min(count, 3)
    rows = -(-count // cols)
    axes = fig.subplots(rows, cols, squeeze=False, sharey=sharey)
    flat = [ax for line in axes for ax in line]
    for extra in flat[count:]:
        extra.set_visible(False)
    return flat[:count]


def _figure(count: int, cols: int = 3) -> Any:
    from matplotlib.figure import Figure

    width = 4.2 * min(count, cols) + 2.2
    height = 3.0 * -(-count // cols) + 0.6
    return Figure(figsize=(width, height), layout="constrained")


def _finish(fig: Any, directory: Path, file: str) -> Path:
    """Save `fig` as `directory/file` through a temporary name and one rename."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.ticker import MaxNLocator

    FigureCanvasAgg(fig)
    handles, labels = [], []
    for ax in fig.axes:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            if label not in labels:
                handles.append(handle)
                labels.append(label)
    if handles:
        fig.legend(handles, labels, loc="outside right upper", fontsize="small")
    target = directory / file
    tmp = temp_name(directory)
    try:
        fig.savefig(tmp, format="png", dpi=80)
        os.replace(tmp, target)
    finally:
        unlink_quietly(tmp)
    return target


def _per_task(runs: Sequence[RunSummary], labels: dict[int, str], colour: Callable[[int], Any],
              suffix: str, title: str, ylabel: str, directory: Path, file: str,
              companion: str | None = None, share: bool = False) -> Path:
    tasks = _tasks_with(runs, suffix)
    fig = _figure(len(tasks))
    for ax, task in zip(_grid(fig, len(tasks)), tasks, strict=True):
        for run in runs:
            index = id(run)
            steps, values = series(run, f"tasks/{task}/{suffix}")
            if steps:
                ax.plot(steps, values, marker=".", color=colour(index), label=labels[index])
            if companion:
                steps, values = series(run, f"tasks/{task}/{companion}")
                if steps:
                    ax.plot(steps, values, linestyle="--", color=colour(index), alpha=0.7)
        ax.set_title(task)
        ax.set_xlabel("step")
        ax.set_ylabel(ylabel)
        if share:
            ax.set_ylim(0, 1)
    fig.suptitle(title)
    return _finish(fig, directory, file)


def _gemm(runs: Sequence[RunSummary], labels: dict[int, str], colour: Callable[[int], Any],
          directory: Path) -> Path:
    from matplotlib import colormaps

    gemm = _gemm_runs(runs)
    stages: list[str] = []
    for run in gemm:
        for stage in [*run.sqd_stages, *(s for _, _, s in sorted(sqd_points(run)))]:
            if stage not in stages:
                stages.append(stage)
    stage_colours = colormaps["viridis"].resampled(max(len(stages), 2))
    fig = _figure(len(gemm), cols=1)
    for ax, run in zip(_grid(fig, len(gemm), sharey=True), gemm, strict=True):
        index, points = id(run), sqd_points(run)
        if points:
            for s, stage in enumerate(stages):
                mine = [(step, g) for step, g, name in points if name == stage]
                if mine:
                    ax.scatter(*zip(*mine, strict=True), s=12, color=stage_colours(s),
                               label=f"stage {stage}", zorder=3)
            best: dict[int, float] = {}
            for step, g, _ in points:
                best[step] = max(g, best.get(step, g))
            ax.plot(sorted(best), [best[s] for s in sorted(best)], color=colour(index),
                    label=labels[index], zorder=2)
        else:
            ax.plot(*series(run, "tasks/gemm/gflops_mean"), marker=".", color=colour(index),
                    label=labels[index])
            steps, values = series(run, "tasks/gemm/gflops_max")
            if steps:
                ax.plot(steps, values, linestyle="--", color=colour(index), alpha=0.7)
        ax.set_title(f"{labels[index]}: {'SQD results' if points else 'mean per step'}")
        ax.set_xlabel("step")
        ax.set_ylabel("GFLOPS")
    fig.suptitle("GEMM GFLOPS over steps")
    return _finish(fig, directory, GFLOPS)


def write_plots(runs: Sequence[RunSummary], directory: str | Path) -> list[Path]:
    """Draw every plot of PLOT_FILES that has data into `directory` (each PNG put in place
    atomically); return the files written, in PLOT_FILES order. matplotlib is imported only
    under this call (its Agg canvas: no pyplot, no display, no global backend switch)."""
    matplotlib_config_dir()
    out = Path(directory)
    ordered = sort_runs(runs)
    labels = {id(run): label for run, label in zip(ordered, run_labels(ordered), strict=True)}
    palette = _colours(len(ordered))
    position = {id(run): i for i, run in enumerate(ordered)}

    def colour(key: int) -> Any:
        return palette(position[key])

    skip = _skips(ordered)
    written = []
    if REWARD not in skip:
        written.append(_per_task(ordered, labels, colour, "reward_mean",
                                 "mean reward per task", "reward", out, REWARD))
    if WEIGHT_SHARE not in skip:
        written.append(_per_task(_hargo_runs(ordered), labels, colour, "weight_share",
                                 "HARGO weight share per task (solid: Σ|w·A|; dashed: w ≡ 1)",
                                 "share", out, WEIGHT_SHARE, companion="adv_share",
                                 share=True))
    if CONTRAST not in skip:
        written.append(_per_task(ordered, labels, colour, "contrast_share",
                                 "share of groups with reward contrast per task", "share", out,
                                 CONTRAST, share=True))
    if LENGTH not in skip:
        written.append(_per_task(ordered, labels, colour, "completion_length",
                                 "mean completion length per task", "tokens", out, LENGTH))
    if GFLOPS not in skip:
        written.append(_gemm(ordered, labels, colour, out))
    return written
