"""Methods against a reference method, paired on the same examples: "HARGO − GRPO".

Runs of one submission share the SFT start and the held-out split, so two methods of the same
seed answered the same examples: each run is compared with the reference method's run of its
seed (`eval.paired_runs.compare_evaluations`, B − A of every share and mean), and the
headline columns are shown as `+2.50 [−1.00, +6.00] (n=40)`, bold where the interval
excludes 0; a method with runs of several seeds gets a line pooled over them
(`report.seeds.pooled_vs_reference`). Maxima get no interval and no change. Reads the runs'
predictions files; no torch (PLP's similarity comes from the stored rewards).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hargo_hpc.report.table import (
    COLUMNS,
    MISSING,
    Cell,
    Column,
    Grid,
    Line,
    PooledRow,
    RunSummary,
    Size,
    grid_markdown,
    sort_runs,
    task_size,
    with_pooled,
)


def reference_method(runs: Sequence[RunSummary], against: str | None) -> str | None:
    """The method others are compared with: `against`, else GRPO (the uniform-weight method
    HARGO is claimed to beat) when some run is GRPO and some other method is present."""
    methods = {run.method for run in runs}
    if against is not None:
        return against if against in methods else None
    return "grpo" if "grpo" in methods and len(methods) > 1 else None


def differences(runs: Sequence[RunSummary], against: str | None = None
                ) -> tuple[str | None, list[dict[str, Any]]]:
    """(the reference method, one entry per other run with an evaluated reference run of its
    seed: method, seed, run, per column key (value, low, high) of run − reference and its
    size text (`Size.text`: n, and the distinct completions of both runs); `error` instead
    where the predictions could not be paired)."""
    from hargo_hpc.eval.evaluate import EvalError
    from hargo_hpc.eval.paired_runs import compare_evaluations

    reference = reference_method(runs, against)
    if reference is None:
        return None, []
    by_seed = {run.seed: run for run in runs if run.method == reference
               and run.evaluation is not None}
    out = []
    for run in sort_runs(runs):
        base = by_seed.get(run.seed)
        if run.method == reference or base is None or run.evaluation is None:
            continue
        try:
            found = compare_evaluations(base.path, run.path, seed=run.seed or 0)
        except EvalError as err:
            out.append({"method": run.method, "seed": run.seed, "run": run.name,
                        "error": str(err)})
            continue
        cells, sizes = {}, {}
        for column in (c for c in COLUMNS if c.task is not None and not c.point):
            interval = (found.get(column.task) or {}).get(column.source[-1])
            if interval is not None:
                cells[column.key] = (interval.value, interval.low, interval.high)
                sizes[column.key] = _size_text(run, base, column.task, interval.n)
        out.append({"method": run.method, "seed": run.seed, "run": run.name,
                    "path": str(run.path), "cells": cells, "sizes": sizes})
    return reference, out


def _size_text(run: RunSummary, base: RunSummary, task: str, n: int) -> str:
    """`n=12, 26 distinct of 96, grpo 30`: the run's size with the reference's distinct."""
    size, other = task_size(run, task) or Size(n), task_size(base, task)
    return size.text(None if other is None else other.distinct, base.method)


def _entry_line(columns: Sequence[Column], entry: dict[str, Any]) -> Line:
    seed = MISSING if entry["seed"] is None else str(entry["seed"])
    if "error" in entry:
        return Line(entry["method"], seed, entry["run"], entry.get("path", ""),
                    [Cell(entry["error"]), *(Cell("") for _ in columns[1:])])
    cells = []
    for column in columns:
        found = entry["cells"].get(column.key)
        if found is None:
            cells.append(Cell(MISSING))
            continue
        text = column.text(found[0], found[1:], signed=True,
                           size=entry["sizes"].get(column.key, ""))
        cells.append(Cell(text, found[1] > 0 or found[2] < 0))
    return Line(entry["method"], seed, entry["run"], entry.get("path", ""), cells)


def against_grid(reference: str | None, entries: Sequence[dict[str, Any]],
                 pooled: Sequence[PooledRow] = ()) -> Grid | None:
    """Each run − the reference's run of its seed, and each method's line pooled over its
    seeds (`pooled`); None when there is nothing to compare."""
    if reference is None or not entries:
        return None
    shown = tuple(c for c in COLUMNS if any(c.key in e.get("cells", {}) for e in entries)
                  or any(c.key in p.cells for p in pooled))
    lines = with_pooled([_entry_line(shown, e) for e in entries], shown, pooled)
    intro = (f"Each run − the {reference} run of its seed, paired on the same examples; "
             "**bold** where the 95 % interval excludes 0.")
    if pooled:
        intro += (" A method's line `over S seeds` pools its seeds: each seed's value, then "
                  "from 3 seeds the mean with its interval over seeds and examples, else how "
                  "many seeds' intervals exclude 0.")
    return Grid(shown, lines, intro)


def differences_markdown(reference: str | None, entries: Sequence[dict[str, Any]],
                         pooled: Sequence[PooledRow] = ()) -> str:
    """The section of report.md; '' when there is nothing to compare."""
    grid = against_grid(reference, entries, pooled)
    if grid is None:
        return ""
    return "\n".join([f"## Against {reference}", "", grid.intro, "", *grid_markdown(grid)]) + "\n"
