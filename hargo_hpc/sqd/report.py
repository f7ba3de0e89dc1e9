"""What a run's SQD did: per problem the stage history and the archive, as text; GFLOPS over
steps coloured by stage, as a PNG (matplotlib, imported only for it). From `<run dir>/sqd/
state.json` and `results.jsonl`, written by the trainer (`hargo_hpc.sqd.schedule`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hargo_hpc.sqd.schedule import SqdSettings

PLOT = "gflops.png"


def schedule_text(settings: SqdSettings) -> str:
    """The stages, one line each, then the rule."""
    lines = [f"{'stage':<10} {'permitted':<36} {'forbidden':<28} required"]
    for stage in settings.stages:
        lines.append(f"{stage.name:<10} {', '.join(stage.permitted) or '-':<36} "
                     f"{', '.join(stage.forbid) or '-':<28} {', '.join(stage.require) or '-'}")
    lines.append(f"advance when the best GFLOPS gains less than {settings.min_improvement:.0%} "
                 f"for {settings.patience} steps, or after {settings.max_steps} steps in a "
                 f"stage; after the last: {settings.after_last}; start: {settings.start}"
                 + ("" if settings.enabled else "  (sqd.enabled is false: plain GFLOPS reward)"))
    return "\n".join(lines)


def report_text(state: dict[str, Any], results: list[dict[str, Any]]) -> str:
    """Per problem: its stage now, its visits per stage, its stage changes, then its archive
    rows; a last line counts the problems by how many stages they visited."""
    stages = state["stages"]
    lines = []
    reached: dict[int, int] = {}
    for problem, p in sorted(state["problems"].items()):
        seen = sum(1 for r in results if r["problem"] == problem)
        visits = p.get("visits") or {}
        reached[len(visits)] = reached.get(len(visits), 0) + 1
        lines.append(f"{problem}: stage {stages[p['stage']]} ({seen} results, "
                     f"{p['cycles']} cycles)")
        lines.append("  visits: " + (", ".join(f"{s} {visits[s]}" for s in stages if s in visits)
                                     or "none"))
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
    lines.append("problems by stages visited: " + ", ".join(
        f"{n} stage(s) {reached[n]}" for n in sorted(reached)))
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
