"""A method's change pooled over its training seeds: the unit of a claim about a method.

A sweep trains each method once per seed (jobs/paper.toml: methods × seeds 0, 1); one run's
interval covers the examples it was evaluated on, not the next training run. Where the report
holds a method's runs of two seeds or more, its changes are pooled over them with
`eval.paired_runs.seed_changes` (each seed paired on its examples, from the runs'
predictions files), one `PooledRow` per method:

- `pooled_vs_baseline`: each run − its own baseline's answers (`<task>.baseline.jsonl`);
- `pooled_vs_reference`: each run − the reference method's run of the same seed.

WinRate is not pooled (its judged outcomes are not in the predictions), nor is a maximum.
Reads the predictions only when called (numpy, scipy and the tasks load then).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from hargo_hpc.report.table import COLUMNS, PooledRow, RunSummary, sort_runs

if TYPE_CHECKING:
    from hargo_hpc.eval.paired_runs import Pair

MIN_SEEDS = 2  # runs of a method before its changes are pooled


def _groups(runs: Sequence[RunSummary]) -> dict[str, list[RunSummary]]:
    """The evaluated runs of each method, in table order."""
    out: dict[str, list[RunSummary]] = {}
    for run in sort_runs(runs):
        if run.evaluation is not None:
            out.setdefault(run.method, []).append(run)
    return out


def _pooled(method: str, pairs: list[Pair], seeds: list[int | None], *, seed: int
            ) -> PooledRow:
    """The method's row: per column its `SeedPooled`, or the error of pairing them."""
    from hargo_hpc.eval.evaluate import EvalError
    from hargo_hpc.eval.paired_runs import seed_changes

    try:
        found = seed_changes(pairs, seed=seed)
    except EvalError as err:
        return PooledRow(method, tuple(seeds), error=str(err))
    cells = {c.key: found[c.task][c.source[-1]] for c in COLUMNS
             if not c.point and c.task in found and c.source[-1] in found[c.task]}
    return PooledRow(method, tuple(seeds), cells)


def _has_baseline(run: RunSummary) -> bool:
    """Whether the run was evaluated with a baseline whose answers are kept."""
    from hargo_hpc.eval.paired_runs import Predictions

    side = Predictions(run.path, baseline=True)
    return any(side.file(task).is_file() for task in run.tasks)


def pooled_vs_baseline(runs: Sequence[RunSummary], *, seed: int = 0) -> list[PooledRow]:
    """Per method with `MIN_SEEDS` runs or more evaluated against their baseline: each run −
    its baseline's answers, pooled over the runs (each a training seed)."""
    from hargo_hpc.eval.paired_runs import Predictions

    out = []
    for method, group in _groups(runs).items():
        group = [run for run in group if _has_baseline(run)]
        if len(group) >= MIN_SEEDS:
            pairs = [(Predictions(r.path, baseline=True), Predictions(r.path)) for r in group]
            out.append(_pooled(method, pairs, [r.seed for r in group], seed=seed))
    return out


def pooled_vs_reference(runs: Sequence[RunSummary], reference: str | None, *, seed: int = 0
                        ) -> list[PooledRow]:
    """Per method other than `reference` with `MIN_SEEDS` runs or more whose seed the
    reference method also ran: each run − the reference's run of its seed, pooled."""
    from hargo_hpc.eval.paired_runs import Predictions

    if reference is None:
        return []
    groups = _groups(runs)
    by_seed = {run.seed: run for run in groups.get(reference, [])}
    out = []
    for method, group in groups.items():
        group = [run for run in group if run.seed in by_seed]
        if method != reference and len(group) >= MIN_SEEDS:
            pairs = [(Predictions(by_seed[r.seed].path), Predictions(r.path)) for r in group]
            out.append(_pooled(method, pairs, [r.seed for r in group], seed=seed))
    return out
