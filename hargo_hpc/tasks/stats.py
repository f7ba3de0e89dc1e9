"""What `hargo data stats` reports of task data: sizes, label balance, answer lengths.

Counted over every record of a task's file (`items`, before records that do not fit the task
are dropped), except `usable` (what `from_record` keeps). Answer length is `len(output)` in
characters, untrimmed. See docs/data.md.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from hargo_hpc.tasks.base import DataError, Task
from hargo_hpc.tasks.data import SourceRecords, read_records
from hargo_hpc.tasks.registry import get_task, task_class, task_names

LONG_ANSWER = 40  # characters: the HARGO abstract's "responses exceed 40 characters"


@dataclass(frozen=True)
class TaskStats:
    """One task's file: `labels` (yes / no / other counts of the lower-cased, trimmed
    answers) only for the data race tasks; `over_40` is a share in [0, 1]."""

    task: str
    source: str
    items: int
    usable: int
    labels: dict[str, int] | None
    mean_chars: float
    median_chars: float
    p90_chars: int
    over_40: float


@dataclass(frozen=True)
class DataStats:
    """The tasks found, and across them the longest and shortest mean answer (None with
    fewer than two tasks) and their ratio."""

    tasks: list[TaskStats]
    longest: str | None
    shortest: str | None
    ratio: float | None


def nearest_rank(values: Sequence[int], q: float) -> int:
    """The q-quantile by nearest rank: the `ceil(q * n)`-th smallest value (1-based), i.e. the
    smallest value with at least a share q of the values at or below it (Hyndman & Fan's
    definition 1 of a sample quantile)."""
    ordered = sorted(values)
    return ordered[max(math.ceil(q * len(ordered)), 1) - 1]


def label_counts(outputs: Sequence[str]) -> dict[str, int]:
    """yes / no / other counts of the answers, each lower-cased and trimmed."""
    counts = {"yes": 0, "no": 0, "other": 0}
    for output in outputs:
        answer = output.strip().lower()
        counts[answer if answer in ("yes", "no") else "other"] += 1
    return counts


def task_stats(task: Task, records: SourceRecords) -> TaskStats:
    """The statistics of `task`'s records: mean, median and nearest-rank p90 of `len(output)`,
    the share with `len(output) > 40`, and how many records `task.from_record` keeps."""
    outputs = [record["output"] for record in records.records]
    lengths = [len(output) for output in outputs]
    usable = sum(task.from_record(r, i) is not None for i, r in enumerate(records.records))
    if not lengths:
        raise DataError(f"{records.source}: no records")
    return TaskStats(
        task=task.name,
        source=records.source,
        items=len(lengths),
        usable=usable,
        labels=label_counts(outputs) if task.name.startswith("data_race") else None,
        mean_chars=statistics.fmean(lengths),
        median_chars=float(statistics.median(lengths)),
        p90_chars=nearest_rank(lengths, 0.9),
        over_40=sum(n > LONG_ANSWER for n in lengths) / len(lengths),
    )


def published_tasks(file_name: str) -> list[str]:
    """The tasks whose published file names include `file_name`."""
    return [name for name in task_names() if file_name in task_class(name).files]


def collect_stats(path: str, task: str | None = None) -> DataStats:
    """The statistics of `path`: a directory (every task with a published file in it, in
    registry order) or one file (of `task`, by default the task its published name says)."""
    where = Path(path)
    if where.is_dir():
        if task is not None:
            names = [task]
        else:
            names = [n for n in task_names() if any((where / f).is_file()
                                                     for f in task_class(n).files)]
        if not names:
            known = sorted({f for n in task_names() for f in task_class(n).files})
            raise DataError(f"{where}: no published task file in it (looked for "
                            f"{', '.join(known)})")
    elif where.is_file():
        names = [task] if task is not None else published_tasks(where.name)
        if len(names) != 1:
            raise DataError(f"{where}: cannot tell the task from the file name; give --task")
    else:
        raise DataError(f"{path}: no such file or directory")
    found = []
    for name in names:
        try:
            instance = get_task(name)
        except ValueError as err:
            raise DataError(str(err)) from None
        if instance.remote:
            raise DataError(f"task {name!r} has no reference answers to count (the bench "
                            "rewards it)")
        found.append(task_stats(instance, read_records(instance, path)))
    return across(found)


def across(found: list[TaskStats]) -> DataStats:
    """`found` with the ratio of the longest to the shortest mean answer length."""
    if len(found) < 2:
        return DataStats(found, None, None, None)
    longest = max(found, key=lambda s: s.mean_chars)
    shortest = min(found, key=lambda s: s.mean_chars)
    ratio = longest.mean_chars / shortest.mean_chars if shortest.mean_chars > 0 else None
    return DataStats(found, longest.task, shortest.task, ratio)


def as_json(stats: DataStats) -> dict[str, Any]:
    """The machine form of `hargo data stats --json`."""
    return {"tasks": [asdict(s) for s in stats.tasks], "longest": stats.longest,
            "shortest": stats.shortest, "ratio": stats.ratio}


def format_table(stats: DataStats) -> str:
    """The human table of `hargo data stats`, and the ratio line."""
    header = ("task", "file", "items", "usable", "yes", "no", "other", "mean", "median", "p90",
              ">40 chars")
    rows = [header]
    for s in stats.tasks:
        labels = s.labels or {}
        rows.append((
            s.task, Path(s.source).name, str(s.items), str(s.usable),
            *(str(labels[k]) if k in labels else "-" for k in ("yes", "no", "other")),
            f"{s.mean_chars:.1f}", f"{s.median_chars:g}", str(s.p90_chars),
            f"{100 * s.over_40:.1f} %",
        ))
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) if i < 2 else cell.rjust(w)
                       for i, (cell, w) in enumerate(zip(row, widths, strict=True))).rstrip()
             for row in rows]
    if stats.ratio is not None:
        by_name = {s.task: s for s in stats.tasks}
        longest, shortest = by_name[stats.longest], by_name[stats.shortest]
        lines.append(f"mean answer length, longest / shortest: {longest.task} "
                     f"{longest.mean_chars:.1f} / {shortest.task} {shortest.mean_chars:.1f} "
                     f"= {stats.ratio:.1f}x")
    return "\n".join(lines) + "\n"
