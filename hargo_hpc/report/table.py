"""Run directories into the method table: one row per run, the evaluation's headline metrics.

A run directory (what `hargo train` writes, then `hargo eval`) holds some of:

- `config.toml`: the resolved experiment: `[run] name, seed`, `[algorithm] name`,
  `[[data.tasks]] name`;
- `metrics.jsonl`: one record per RL step (docs/training.md, "Metrics");
- `eval/metrics.json`: the evaluation of the trained model (format 2: per task its metrics,
  their 95 % intervals and paired changes against the baseline, and the WinRate with its
  interval; format 1, without intervals, still reads);
- `sqd/results.jsonl` and `sqd/state.json`: with SQD, every GEMM bench result and the stages.

Missing files leave their cells empty; a directory with none of the first three is not a run
(`ReportError`, one line naming it). Values are kept as read (fractions); `Column.display`
turns them into the table's units (percent, GFLOPS) and rounds them. Pure: no matplotlib, no
torch, not even the experiment config's validation (a run of an older config still reads).
"""

from __future__ import annotations

import json
import math
import tomllib
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from hargo_hpc.errors import HargoError
from hargo_hpc.files import read_jsonl
from hargo_hpc.runs import RunLayout
from hargo_hpc.tasks.registry import task_names

if TYPE_CHECKING:
    from hargo_hpc.eval.intervals import SeedPooled

EVAL_FORMATS = (1, 2)
MISSING = "—"
NOT_A_RUN = (f"not a run directory (no {RunLayout.CONFIG}, {RunLayout.METRICS} or "
             f"{RunLayout.EVAL}/{RunLayout.EVAL_METRICS})")


class ReportError(HargoError, ValueError):
    """A path that cannot be reported on; the message is one line naming it."""


@dataclass(frozen=True)
class RunSummary:
    """What the report knows of one run directory.

    `method` and `seed` come from config.toml (else eval/metrics.json; "unknown" / None);
    `name` is `[run] name`, followed by `/<directory>` when the directory is named otherwise
    (a sweep point); `tasks` are the config's tasks and any the evaluation or the metrics
    name; `records` are the metrics.jsonl records in step order (the last record of a step
    wins); `evaluation` is eval/metrics.json or None.
    """

    path: Path
    method: str
    seed: int | None
    name: str
    tasks: tuple[str, ...]
    evaluation: dict[str, Any] | None = None
    records: tuple[dict[str, Any], ...] = ()
    sqd_results: tuple[dict[str, Any], ...] = ()
    sqd_stages: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        """`<method> s<seed>`: the run in plots and notes (`run_labels` makes them unique)."""
        return f"{self.method} s{'?' if self.seed is None else self.seed}"

    def eval_task(self, task: str) -> dict[str, Any] | None:
        tasks = (self.evaluation or {}).get("tasks")
        found = tasks.get(task) if isinstance(tasks, dict) else None
        return found if isinstance(found, dict) else None

    def winrate(self) -> dict[str, Any] | None:
        found = (self.evaluation or {}).get("winrate")
        return found if isinstance(found, dict) else None


@dataclass(frozen=True)
class Size:
    """What a cell's interval resamples: `n` examples (WinRate: judged pairs); with `rows`
    answers (n × samples) and how many of them are `distinct` completions, and the same
    count of the baseline's answers (`baseline_distinct`), where eval/metrics.json has
    them."""

    n: int
    rows: int | None = None
    distinct: int | None = None
    baseline_distinct: int | None = None

    def text(self, other: int | None = None, label: str = "") -> str:
        """`n=12`; with several samples per example (rows > n) `n=12, 26 distinct of 96`,
        and `, <label> 30` with `other` (the distinct count of the answers compared with):
        copies of one completion are not independent draws."""
        if self.rows is None or self.distinct is None or self.rows <= self.n:
            return f"n={self.n}"
        against = "" if other is None else f", {label} {other}"
        return f"n={self.n}, {self.distinct} distinct of {self.rows}{against}"


@dataclass(frozen=True)
class Column:
    """One column of the method table: `key` in JSON, `header` in markdown, `task` the task
    it belongs to (None: the run's own), `scale` from the stored value to the shown one (100
    for a percentage), `digits` after the point, `description` for the legend; `point`: a
    maximum, shown as a plain value without interval or change (`Task.points`; an interval
    of a maximum that an older eval/metrics.json holds is ignored)."""

    key: str
    header: str
    task: str | None
    source: tuple[str, ...]
    scale: float
    digits: int
    description: str
    point: bool = False

    def direction(self) -> str:
        """The metric's good direction for a verdict: "lower" for its task's `lower_better`
        (e.g. MLPerf's share over 40 characters), "none" for its `undirected`, else
        "higher"."""
        from hargo_hpc.tasks.registry import task_class

        if self.task is None:
            return "higher"
        task = task_class(self.task)
        key = self.source[-1]
        return ("none" if key in task.undirected else
                "lower" if key in task.lower_better else "higher")

    def display(self, value: float | None) -> float | None:
        """The value in the table's unit, rounded; None (and NaN, infinities) give None."""
        if value is None or not math.isfinite(value):
            return None
        return round(value * self.scale, self.digits)

    def number_text(self, value: float | None, signed: bool = False) -> str:
        """The value in the table's unit: `57.50`; `signed` writes `+2.50`; "—" for none."""
        shown = self.display(value)
        return MISSING if shown is None else f"{shown:{'+' if signed else ''}.{self.digits}f}"

    def text(self, value: float | None, interval: tuple[float, float] | None = None,
             signed: bool = False, size: str = "") -> str:
        """`57.50`, with an interval `57.50 [43.00, 71.00]`, and its `size` after it:
        `57.50 [43.00, 71.00] (n=40)`; `signed` writes `+2.50`."""
        if self.display(value) is None:
            return MISSING
        text = self.number_text(value, signed)
        if interval is not None and all(math.isfinite(v) for v in interval):
            low, high = (self.number_text(v, signed) for v in interval)
            text += f" [{low}, {high}]" + (f" ({size})" if size else "")
        return text

    def pooled_text(self, found: SeedPooled, seeds: Sequence[int | None]) -> str:
        """A change over training seeds: each seed's value, then the pooled value with its
        interval over seeds (from 3 seeds) and the verdict, or the per-seed statement:
        `s0 +2.50, s1 +4.00: better in 1 of 2 seeds (too few to pool)`,
        `+3.00 [+1.00, +5.00] (3 seeds of n=40); s0 +2.50, s1 +4.00, s2 +2.50: better`."""
        each = ", ".join(f"s{'?' if s is None else s} {self.number_text(i.value, True)}"
                         for s, i in zip(seeds, found.per_seed, strict=True))
        if found.pooled is None:
            return f"{each}: {found.verdict(self.direction())}"
        sizes = {i.n for i in found.per_seed}
        of = f" of n={sizes.pop()}" if len(sizes) == 1 else ""
        pooled = self.text(found.pooled.value, (found.pooled.low, found.pooled.high),
                           signed=True, size=f"{found.seeds} seeds{of}")
        return f"{pooled}; {each}: {found.verdict(self.direction())}"


def _pct(key: str, header: str, task: str | None, source: tuple[str, ...], what: str) -> Column:
    return Column(key, header, task, source, 100.0, 2, what)


COLUMNS: tuple[Column, ...] = (
    _pct("winrate", "WinRate (%)", None, ("winrate", "overall", "win_rate"),
         "WinRate of the run's answers against the baseline's over every judged record "
         "(wins + ties/2) / n, from `hargo eval`'s winrate.overall"),
    _pct("race_c_f1", "C F1 (%)", "data_race_c", ("f1",),
         "data race detection, C/C++: F1 of the yes/no answers (positive: a race)"),
    _pct("race_c_adj_f1", "C adj. F1 (%)", "data_race_c", ("adjusted_f1",),
         "the same F1 times the share of answers that parsed (support_rate)"),
    _pct("race_fortran_f1", "Fortran F1 (%)", "data_race_fortran", ("f1",),
         "data race detection, Fortran: F1"),
    _pct("race_fortran_adj_f1", "Fortran adj. F1 (%)", "data_race_fortran", ("adjusted_f1",),
         "Fortran: F1 times the share of answers that parsed"),
    _pct("mlperf_em", "MLPerf EM (%)", "mlperf_qa", ("exact_match",),
         "MLPerf QA: exact match of the normalised answer"),
    _pct("mlperf_f1", "MLPerf F1 (%)", "mlperf_qa", ("f1",),
         "MLPerf QA: token F1 against the reference"),
    _pct("mlperf_over_40", "MLPerf >40 chars (%)", "mlperf_qa", ("share_over_40",),
         "MLPerf QA: share of answers longer than 40 characters (the short answers the task "
         "wants: lower is better)"),
    Column("plp_similarity", "PLP similarity", "plp_qa", ("similarity",), 1.0, 3,
           "PLP QA: mean embedding cosine similarity of answer and reference"),
    _pct("gemm_ok", "GEMM ok (%)", "gemm", ("ok_share",),
         "GEMM: share of the scored kernels that compiled, verified and ran (status ok)"),
    _pct("gemm_fast_0.5", "GEMM fast_0.5 (%)", "gemm", ("fast_0.5",),
         "GEMM: share of the scored kernels that are ok and at least half as fast as the "
         "reference DGEMM timed in the same bench run (KernelBench's fast_p, p = 0.5)"),
    Column("gemm_log2_ratio", "GEMM log2 speed", "gemm", ("log2_ratio_mean",), 1.0, 2,
           "GEMM: mean log2 of an ok kernel's speed over the in-run reference DGEMM's (the "
           "geometric-mean speed in doublings: 0 is the reference's speed, -1 half of it)"),
    Column("gemm_reward", "GEMM reward", "gemm", ("reward_mean",), 1.0, 3,
           "GEMM: mean reward of the scored kernels (the task's scale)"),
    Column("gemm_best_gflops", "GEMM best GFLOPS", "gemm", ("gflops_max",), 1.0, 1,
           "GEMM: the best median GFLOPS of an ok, not suspicious kernel; a maximum, shown "
           "without interval (see fast_0.5 and log2 speed for the spread)", point=True),
    Column("gemm_best_ratio", "GEMM best of ref. (%)", "gemm", ("ratio_max",), 100.0, 2,
           "GEMM: the best speed as a share of the reference DGEMM timed in the same bench "
           "run; a maximum, shown without interval", point=True),
    Column("last_reward", "last reward", None, ("train", "reward"), 1.0, 3,
           "the mean task reward of the last training step (metrics.jsonl `reward`, before "
           "shaping); rewards are on each task's scale"),
)


@dataclass(frozen=True)
class Row:
    """One run's row: its identity and the raw value (fraction, GFLOPS) of each column key."""

    method: str
    seed: int | None
    run: str
    path: str
    values: dict[str, float | None] = field(default_factory=dict)
    intervals: dict[str, tuple[float, float]] = field(default_factory=dict)
    changes: dict[str, tuple[float, float, float]] = field(default_factory=dict)
    sizes: dict[str, Size] = field(default_factory=dict)

    def significant(self, key: str) -> bool:
        """Whether the change against the baseline of column `key` excludes 0 (WinRate: its
        interval excludes 0.5, i.e. the change from an even match)."""
        found = self.changes.get(key)
        return found is not None and (found[1] > 0 or found[2] < 0)

    def size_text(self, key: str, against_baseline: bool = False) -> str:
        """The size of column `key`'s interval (`Size.text`); '' when unknown."""
        size = self.sizes.get(key)
        if size is None:
            return ""
        return size.text(size.baseline_distinct, "baseline") if against_baseline else size.text()


@dataclass(frozen=True)
class PooledRow:
    """One method's change over its training seeds (`report.seeds`): `seeds` in the order of
    each cell's `SeedPooled.per_seed`, per column key its `SeedPooled`; `error` (one line)
    instead where the predictions could not be paired."""

    method: str
    seeds: tuple[int | None, ...]
    cells: dict[str, SeedPooled] = field(default_factory=dict)
    error: str | None = None

    @property
    def label(self) -> str:
        return ", ".join("?" if s is None else str(s) for s in self.seeds)

    def significant(self, key: str) -> bool:
        """Whether the pooled interval (3 seeds or more) of column `key` excludes 0."""
        found = self.cells.get(key)
        return found is not None and found.pooled is not None and found.pooled.excludes_zero()


class MethodTable(NamedTuple):
    """The rows, their notes, and (filled by `hargo report` from the predictions) each
    method's change against the baseline pooled over its training seeds."""

    columns: tuple[Column, ...]
    rows: list[Row]
    notes: list[str]
    pooled: tuple[PooledRow, ...] = ()


# ---------------------------------------------------------------- reading


def number(value: Any) -> float | None:
    """`value` as a finite float; None for null, booleans, text, NaN and infinities."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    result = float(value)
    return result if math.isfinite(result) else None


def _dig(data: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data


def _read_toml(file: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as err:
        raise ReportError(f"{file}: cannot read it: {err}") from None


def _read_json(file: Path) -> Any:
    try:
        return json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ReportError(f"{file}: cannot read it: {err}") from None


def _read_eval(file: Path) -> dict[str, Any]:
    data = _read_json(file)
    if not isinstance(data, dict):
        raise ReportError(f"{file}: expected a JSON object")
    if data.get("format", 1) not in EVAL_FORMATS:
        raise ReportError(f"{file}: format {data.get('format')!r}; this report reads formats "
                          f"{', '.join(map(str, EVAL_FORMATS))}")
    return data


def _records(file: Path) -> tuple[dict[str, Any], ...]:
    """metrics.jsonl's step records in step order; of a step written twice, the last."""
    by_step: dict[int, dict[str, Any]] = {}
    for record in read_jsonl(file):
        step = record.get("step") if isinstance(record, dict) else None
        if isinstance(step, int) and not isinstance(step, bool):
            by_step[step] = record
    return tuple(by_step[step] for step in sorted(by_step))


def _sqd_stages(file: Path) -> tuple[str, ...]:
    """The stage names of sqd/state.json; () when it is absent or unreadable (the plot then
    orders stages as they appear)."""
    try:
        stages = json.loads(file.read_text(encoding="utf-8")).get("stages")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError):
        return ()
    return tuple(s for s in stages if isinstance(s, str)) if isinstance(stages, list) else ()


def _task_order(names: Iterable[str]) -> tuple[str, ...]:
    unique = set(names)
    known = [t for t in task_names() if t in unique]
    return (*known, *sorted(unique - set(known)))


def _record_tasks(records: Sequence[dict[str, Any]]) -> set[str]:
    found = set()
    for record in records:
        for key, value in record.items():
            parts = key.split("/")
            if len(parts) == 3 and parts[0] == "tasks" and value is not None:
                found.add(parts[1])
    return found


def load_run(path: str | Path) -> RunSummary:
    """Read the run directory at `path` (module docstring); ReportError when it is missing,
    not a directory, not a run, or holds a file that does not parse."""
    root = Path(path)
    if not root.exists():
        raise ReportError(f"{path}: no such directory")
    if not root.is_dir():
        raise ReportError(f"{path}: not a directory")
    layout = RunLayout(root)
    if not _holds_a_run(layout):
        raise ReportError(f"{path}: {NOT_A_RUN}")
    config = _read_toml(layout.config) if layout.config.is_file() else {}
    evaluation = _read_eval(layout.eval_metrics) if layout.eval_metrics.is_file() else None
    records = _records(layout.metrics)
    method = _dig(config, "algorithm", "name") or _dig(evaluation, "method")
    seed = _dig(config, "run", "seed")
    if not isinstance(seed, int) or isinstance(seed, bool):
        seed = _dig(evaluation, "seed")
    directory = root.resolve().name
    name = _dig(config, "run", "name")
    name = directory if not isinstance(name, str) or not name else (
        name if name == directory else f"{name}/{directory}")
    listed = _dig(config, "data", "tasks")
    tasks = {_dig(t, "name") for t in listed} if isinstance(listed, list) else set()
    eval_tasks = _dig(evaluation, "tasks")
    tasks |= set(eval_tasks) if isinstance(eval_tasks, dict) else set()
    tasks |= _record_tasks(records)
    sqd = tuple(r for r in read_jsonl(layout.sqd_results) if isinstance(r, dict))
    return RunSummary(
        path=root, method=str(method) if method else "unknown",
        seed=seed if isinstance(seed, int) and not isinstance(seed, bool) else None,
        name=name, tasks=_task_order(t for t in tasks if isinstance(t, str) and t),
        evaluation=evaluation, records=records, sqd_results=sqd,
        sqd_stages=_sqd_stages(layout.sqd_state))


def _holds_a_run(layout: RunLayout) -> bool:
    """Whether the directory has a run's config, metrics or evaluation."""
    return any(p.is_file() for p in (layout.config, layout.metrics, layout.eval_metrics))


def _sweep_points(root: Path) -> list[Path]:
    """The run directories of a sweep's submission directory (its config.toml has a
    `[sweep]` and it has no metrics of its own); [] for anything else."""
    layout = RunLayout(root)
    config = layout.config
    if not config.is_file() or layout.metrics.is_file() or layout.eval_metrics.is_file():
        return []
    try:
        sweep = tomllib.loads(config.read_text(encoding="utf-8")).get("sweep")
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return []
    if not sweep:
        return []
    return sorted(p for p in root.iterdir() if p.is_dir() and _holds_a_run(RunLayout(p)))


def load_runs(paths: Iterable[str | Path]) -> list[RunSummary]:
    """`load_run` of each path; a sweep's submission directory stands for its run
    directories (one per sweep point). A directory given twice is read once."""
    runs: list[RunSummary] = []
    seen: set[Path] = set()
    for path in paths:
        points = _sweep_points(Path(path)) if Path(path).is_dir() else []
        for one in points or [Path(path)]:
            key = one.resolve()
            if key not in seen:
                seen.add(key)
                runs.append(load_run(one))
    return runs


def run_labels(runs: Sequence[RunSummary]) -> list[str]:
    """`<method> s<seed>` per run, with ` (<run name>)` added where two runs share one."""
    plain = [run.label for run in runs]
    return [f"{label} ({run.name})" if plain.count(label) > 1 else label
            for label, run in zip(plain, runs, strict=True)]


# ---------------------------------------------------------------- the table


def sort_runs(runs: Iterable[RunSummary]) -> list[RunSummary]:
    """By method, then seed (unknown last), then run name and path."""
    return sorted(runs, key=lambda r: (r.method, r.seed is None, r.seed or 0, r.name,
                                       str(r.path)))


def _value(run: RunSummary, column: Column) -> float | None:
    if column.source == ("train", "reward"):
        return number(run.records[-1].get("reward")) if run.records else None
    if column.task is None:
        return number(_dig(run.evaluation, *column.source))
    if column.task not in run.tasks:
        return None
    return number(_dig(run.eval_task(column.task), *column.source))


def _bounds(found: Any) -> tuple[float, float] | None:
    low, high = number(_dig(found, "low")), number(_dig(found, "high"))
    return None if low is None or high is None else (low, high)


def _interval(run: RunSummary, column: Column) -> tuple[float, float] | None:
    """The column's 95 % interval in eval/metrics.json (format 2), or None (always for a
    maximum, `Column.point`)."""
    if column.key == "winrate":
        return _bounds(_dig(run.winrate(), "overall", "interval"))
    if column.task is None or column.task not in run.tasks or column.point:
        return None
    return _bounds(_dig(run.eval_task(column.task), "intervals", column.source[-1]))


def _change(run: RunSummary, column: Column) -> tuple[float, float, float] | None:
    """(value, low, high) of the column's paired change against the baseline; WinRate's is
    its distance from an even match, 0.5. None for a maximum (`Column.point`)."""
    if column.key == "winrate":
        rate, bounds = _value(run, column), _interval(run, column)
        if rate is None or bounds is None:
            return None
        return rate - 0.5, bounds[0] - 0.5, bounds[1] - 0.5
    if column.task is None or column.task not in run.tasks or column.point:
        return None
    found = _dig(run.eval_task(column.task), "vs_baseline", column.source[-1])
    value, bounds = number(_dig(found, "value")), _bounds(found)
    return None if value is None or bounds is None else (value, *bounds)


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def task_size(run: RunSummary, task: str) -> Size | None:
    """The run's evaluation of `task`: n examples, rows, distinct completions (its own and
    the baseline's); None without n."""
    found = run.eval_task(task)
    n = _count(_dig(found, "n"))
    if n is None:
        return None
    return Size(n, _count(_dig(found, "rows")), _count(_dig(found, "distinct")),
                _count(_dig(found, "baseline", "distinct")))


def _size(run: RunSummary, column: Column) -> Size | None:
    """What the column's interval resamples: the task's examples; WinRate's judged pairs."""
    if column.key == "winrate":
        n = _count(_dig(run.winrate(), "overall", "n"))
        return None if n is None else Size(n)
    if column.task is None or column.task not in run.tasks:
        return None
    return task_size(run, column.task)


def _notes(runs: Sequence[RunSummary], labels: Sequence[str]) -> list[str]:
    notes: list[str] = []
    all_tasks = _task_order(t for run in runs for t in run.tasks)
    table_tasks = [t for t in task_names() if any(c.task == t for c in COLUMNS)]
    for task in all_tasks:
        lacking = [label for run, label in zip(runs, labels, strict=True)
                   if task not in run.tasks]
        if lacking and task in table_tasks:
            notes.append(f"{task}: not a task of {', '.join(lacking)}; its columns are empty "
                         "there")
    absent = [t for t in table_tasks if t not in all_tasks]
    if absent:
        notes.append(f"no run has {', '.join(absent)}: those columns are empty")
    unevaluated = [label for run, label in zip(runs, labels, strict=True)
                   if run.evaluation is None]
    if unevaluated:
        notes.append(f"no eval/metrics.json (run `hargo eval` on the run): "
                     f"{', '.join(unevaluated)}; only the last reward is filled there")
    for run, label in zip(runs, labels, strict=True):
        if run.evaluation is None:
            continue
        missing = [t for t in run.tasks if t in table_tasks and run.eval_task(t) is None]
        if missing:
            notes.append(f"{label}: eval/metrics.json has no {', '.join(missing)}")
    notes.extend(_winrate_notes(runs, labels))
    for key in ("split", "decoding"):
        seen = {json.dumps(run.evaluation.get(key), sort_keys=True): run.evaluation.get(key)
                for run in runs if run.evaluation is not None}
        if len(seen) > 1:
            values = "; ".join(f"{label}: {json.dumps(run.evaluation.get(key))}"
                               for run, label in zip(runs, labels, strict=True)
                               if run.evaluation is not None)
            notes.append(f"the evaluations differ in {key} ({values}): compare with care")
    return notes


def _winrate_notes(runs: Sequence[RunSummary], labels: Sequence[str]) -> list[str]:
    against = {label: (str(w.get("baseline")), str(w.get("judge", "?")))
               for run, label in zip(runs, labels, strict=True)
               if (w := run.winrate()) is not None}
    if not against:
        return []
    notes = []
    if len(set(against.values())) == 1:
        baseline, judge = next(iter(against.values()))
        notes.append(f"WinRate: against {baseline} (judge {judge}); ties count half")
    else:
        notes.extend(f"{label}: WinRate against {baseline} (judge {judge})"
                     for label, (baseline, judge) in against.items())
    without = [label for run, label in zip(runs, labels, strict=True)
               if run.evaluation is not None and label not in against]
    if without:
        notes.append(f"no WinRate for {', '.join(without)} (evaluated without a baseline)")
    return notes


def method_table(runs: Iterable[RunSummary]) -> MethodTable:
    """One row per run (sorted by method, then seed), the columns of `COLUMNS`, and notes:
    which runs lack which task, which have no evaluation, what WinRate is measured against,
    and where the evaluations' split or decoding differ."""
    ordered = sort_runs(runs)
    labels = run_labels(ordered)
    rows = []
    for run in ordered:
        intervals = {c.key: found for c in COLUMNS if (found := _interval(run, c)) is not None}
        changes = {c.key: found for c in COLUMNS if (found := _change(run, c)) is not None}
        sizes = {c.key: found for c in COLUMNS if (found := _size(run, c)) is not None}
        rows.append(Row(run.method, run.seed, run.name, str(run.path),
                        {column.key: _value(run, column) for column in COLUMNS},
                        intervals, changes, sizes))
    notes = [*_sizes(ordered), *_distinct_notes(ordered, labels), *_notes(ordered, labels)]
    return MethodTable(COLUMNS, rows, notes)


def _sizes(runs: Sequence[RunSummary]) -> list[str]:
    """One note of how many examples each task was evaluated on (n), when every run agrees;
    else one per run."""
    sizes = {}
    for run in runs:
        tasks = _dig(run.evaluation, "tasks")
        if isinstance(tasks, dict):
            sizes[run.label] = ", ".join(f"{name} {_dig(v, 'n')}" for name, v in tasks.items())
    if not sizes:
        return []
    what = ("cells show the value, its 95 % interval over the examples (each example with "
            "all its samples) and (n=examples; with several samples per example, how many of "
            "the rows are distinct completions)")
    if len(set(sizes.values())) == 1:
        return [f"evaluated on n examples per task: {next(iter(sizes.values()))}; {what}"]
    return [*(f"{label}: evaluated on {text}" for label, text in sizes.items()), what]


def _distinct_notes(runs: Sequence[RunSummary], labels: Sequence[str]) -> list[str]:
    """Per evaluated run, how many distinct completions each task's rows hold (and the
    baseline's), where eval/metrics.json counts them."""
    notes = []
    for run, label in zip(runs, labels, strict=True):
        parts = []
        tasks = _dig(run.evaluation, "tasks")
        for task in _task_order(tasks if isinstance(tasks, dict) else ()):
            size = task_size(run, task)
            if size is None or size.distinct is None:
                continue
            base = ("" if size.baseline_distinct is None
                    else f" (baseline {size.baseline_distinct})")
            parts.append(f"{task} {size.distinct} of {size.rows or size.n}{base}")
        if parts:
            notes.append(f"{label}: distinct completions: {', '.join(parts)}")
    return notes


# ---------------------------------------------------------------- renderings


class Cell(NamedTuple):
    """One cell of a rendered table; `strong` (bold) where its interval excludes 0."""

    text: str
    strong: bool = False


class Line(NamedTuple):
    """One line of a rendered table: the run's (or method's) identity, then one Cell per
    column; `path` is the run directory (the HTML's tooltip), '' for a pooled line."""

    method: str
    seed: str
    run: str
    path: str
    cells: list[Cell]


class Grid(NamedTuple):
    """A table to render in markdown (`grid_markdown`) or HTML (`report.page.grid_html`):
    the columns after method, seed and run, the lines, and a sentence saying what it holds."""

    columns: tuple[Column, ...]
    lines: list[Line]
    intro: str = ""


def _seed(seed: int | None) -> str:
    return MISSING if seed is None else str(seed)


def value_grid(table: MethodTable) -> Grid:
    """The method table: each cell the value, with its interval and n where it has one."""
    lines = [Line(row.method, _seed(row.seed), row.run, row.path,
                  [Cell(c.text(row.values.get(c.key), row.intervals.get(c.key),
                               size=row.size_text(c.key))) for c in table.columns])
             for row in table.rows]
    return Grid(table.columns, lines)


CHANGE_INTRO = ("Change against the baseline, paired on the same examples (WinRate: its "
                "distance from 50 %); **bold** where the 95 % interval excludes 0")
POOLED_INTRO = ("; a method's row `over S seeds` pools its runs' changes: each seed's value, "
                "then from 3 seeds the mean with its interval over seeds and examples "
                "(two-level bootstrap), else how many seeds' intervals exclude 0")


def pooled_line(columns: Sequence[Column], pooled: PooledRow) -> Line:
    """A method's line pooled over its training seeds: each column's `Column.pooled_text`,
    or the error in the first cell."""
    run = f"over {len(pooled.seeds)} seeds"
    if pooled.error is not None:
        cells = [Cell(pooled.error), *(Cell("") for _ in columns[1:])]
        return Line(pooled.method, pooled.label, run, "", cells)
    cells = [Cell(c.pooled_text(found, pooled.seeds), pooled.significant(c.key))
             if (found := pooled.cells.get(c.key)) is not None else Cell(MISSING)
             for c in columns]
    return Line(pooled.method, pooled.label, run, "", cells)


def with_pooled(lines: list[Line], columns: Sequence[Column], pooled: Sequence[PooledRow]
                ) -> list[Line]:
    """`lines` (grouped by method) with each method's pooled line after its last one."""
    out = list(lines)
    for found in pooled:
        at = max((i for i, line in enumerate(out) if line.method == found.method),
                 default=len(out) - 1)
        out.insert(at + 1, pooled_line(columns, found))
    return out


def change_grid(table: MethodTable) -> Grid | None:
    """Each run's paired change against its baseline (with n and the distinct completions
    of both), and each method's pooled over its seeds; None when no run has one."""
    changed = tuple(c for c in table.columns
                    if any(c.key in row.changes for row in table.rows)
                    or any(c.key in p.cells for p in table.pooled))
    if not changed:
        return None
    lines = []
    for row in table.rows:
        cells = []
        for c in changed:
            found = row.changes.get(c.key)
            cells.append(Cell(MISSING) if found is None else Cell(
                c.text(found[0], found[1:], signed=True,
                       size=row.size_text(c.key, against_baseline=True)),
                row.significant(c.key)))
        lines.append(Line(row.method, _seed(row.seed), row.run, row.path, cells))
    intro = CHANGE_INTRO + (POOLED_INTRO if table.pooled else "")
    return Grid(changed, with_pooled(lines, changed, table.pooled), intro)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def grid_markdown(grid: Grid) -> list[str]:
    """The grid as GitHub markdown table lines (bold where a cell is `strong`)."""
    out = ["| method | seed | run | " + " | ".join(c.header for c in grid.columns) + " |",
           "|---|---:|---|" + "---:|" * len(grid.columns)]
    for line in grid.lines:
        cells = [line.method, line.seed, line.run,
                 *(f"**{c.text}**" if c.strong else c.text for c in line.cells)]
        out.append("| " + " | ".join(_cell(cell) for cell in cells) + " |")
    return out


def to_markdown(table: MethodTable) -> str:
    """The table as a GitHub markdown table ("—" for a missing value), the changes against
    the baseline, then the notes as a list."""
    lines = grid_markdown(value_grid(table))
    changes = change_grid(table)
    if changes is not None:
        lines += ["", changes.intro + ":", "", *grid_markdown(changes)]
    if table.notes:
        lines.append("")
        lines.extend(f"- {_cell(note)}" for note in table.notes)
    return "\n".join(lines) + "\n"


def legend_markdown(columns: Sequence[Column]) -> str:
    """One line per column: its header and what it means."""
    return "".join(f"- **{c.header}**: {c.description}\n" for c in columns)


def to_dict(table: MethodTable) -> dict[str, Any]:
    """The table as plain data: the columns (key, header, unit, digits, description), one
    object per row with each column's key holding the shown value (rounded, in the column's
    unit; null where missing), its interval, change against the baseline and size, each
    method's change pooled over its seeds, and the notes."""
    columns, rows, notes, pooled = table
    return {
        "format": 1,
        "columns": [{"key": c.key, "header": c.header, "task": c.task,
                     "unit": "%" if c.scale == 100 else "", "digits": c.digits,
                     "description": c.description} for c in columns],
        "rows": [{"method": row.method, "seed": row.seed, "run": row.run, "run_dir": row.path,
                  **{c.key: c.display(row.values.get(c.key)) for c in columns},
                  "intervals": {k: [c.display(v) for v in row.intervals[k]]
                                for c in columns if (k := c.key) in row.intervals},
                  "vs_baseline": {k: {"value": c.display(row.changes[k][0]),
                                      "interval": [c.display(v) for v in row.changes[k][1:]],
                                      "significant": row.significant(k)}
                                  for c in columns if (k := c.key) in row.changes},
                  "sizes": {k: asdict(size) for k, size in row.sizes.items()}}
                 for row in rows],
        "pooled_vs_baseline": [_pooled_dict(columns, found) for found in pooled],
        "notes": list(notes),
    }


def _pooled_dict(columns: Sequence[Column], pooled: PooledRow) -> dict[str, Any]:
    """A method's change over seeds as data, in the columns' units: per column key the
    per-seed values, the pooled value and interval (null below 3 seeds) and the verdict."""
    out: dict[str, Any] = {"method": pooled.method, "seeds": list(pooled.seeds)}
    if pooled.error is not None:
        return {**out, "error": pooled.error}
    for c in columns:
        found = pooled.cells.get(c.key)
        if found is None:
            continue
        whole = found.pooled
        out[c.key] = {"per_seed": [c.display(i.value) for i in found.per_seed],
                      "pooled": None if whole is None else {
                          "value": c.display(whole.value),
                          "interval": [c.display(whole.low), c.display(whole.high)]},
                      "verdict": found.verdict(c.direction())}
    return out


def to_json(table: MethodTable) -> str:
    """`to_dict` as indented JSON text (ending in a newline)."""
    return json.dumps(to_dict(table), indent=1, ensure_ascii=False) + "\n"
