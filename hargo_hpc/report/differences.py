"""Methods against a reference method, paired on the same examples: "HARGO − GRPO".

Runs of one submission share the SFT start and the held-out split, so two methods of the same
seed answered the same examples: each run is compared with the reference method's run of its
seed (`eval.paired_runs.compare_evaluations`, B − A of every share and mean), and the
headline columns are shown as `+2.50 [−1.00, +6.00]`, bold where the interval excludes 0.
Reads the runs' predictions files; no torch (PLP's similarity comes from the stored rewards).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hargo_hpc.report.table import COLUMNS, MISSING, RunSummary, sort_runs


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
    seed: method, seed, run, and per column key (value, low, high) of run − reference)."""
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
        cells = {}
        for column in COLUMNS:
            interval = (found.get(column.task) or {}).get(column.source[-1])
            if interval is not None:
                cells[column.key] = (interval.value, interval.low, interval.high)
        out.append({"method": run.method, "seed": run.seed, "run": run.name, "cells": cells})
    return reference, out


def differences_markdown(reference: str | None, entries: Sequence[dict[str, Any]]) -> str:
    """The section of report.md; '' when there is nothing to compare."""
    if reference is None or not entries:
        return ""
    shown = [c for c in COLUMNS if any(c.key in e.get("cells", {}) for e in entries)]
    lines = [f"## Against {reference}", "",
             f"Each run − the {reference} run of its seed, paired on the same examples; "
             "**bold** where the 95 % interval excludes 0.", "",
             "| method | seed | run | " + " | ".join(c.header for c in shown) + " |",
             "|---|---:|---|" + "---:|" * len(shown)]
    for entry in entries:
        if "error" in entry:
            lines.append(f"| {entry['method']} | {entry['seed']} | {entry['run']} | "
                         f"{entry['error']} |" + " |" * (len(shown) - 1))
            continue
        cells = []
        for column in shown:
            found = entry["cells"].get(column.key)
            if found is None:
                cells.append(MISSING)
                continue
            text = column.text(found[0], found[1:], signed=True)
            cells.append(f"**{text}**" if found[1] > 0 or found[2] < 0 else text)
        seed = MISSING if entry["seed"] is None else str(entry["seed"])
        lines.append(f"| {entry['method']} | {seed} | {entry['run']} | " + " | ".join(cells)
                     + " |")
    return "\n".join(lines) + "\n"
