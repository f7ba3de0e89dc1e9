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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from hargo_hpc.errors import HargoError
from hargo_hpc.files import read_jsonl
from hargo_hpc.runs import RunLayout
from hargo_hpc.tasks.names import TASK_NAMES

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
class Column:
    """One column of the method table: `key` in JSON, `header` in markdown, `task` the task
    it belongs to (None: the run's own), `scale` from the stored value to the shown one (100
    for a percentage), `digits` after the point, `description` for the legend."""

    key: str
    header: str
    task: str | None
    source: tuple[str, ...]
    scale: float
    digits: int
    description: str

    def display(self, value: float | None) -> float | None:
        """The value in the table's unit, rounded; None stays None."""
        return None if value is None else round(value * self.scale, self.digits)

    def text(self, value: float | None, interval: tuple[float, float] | None = None,
             signed: bool = False) -> str:
        """`57.50`, with an interval `57.50 [43.00, 71.00]`; `signed` writes `+2.50`."""
        shown = self.display(value)
        if shown is None:
            return MISSING
        spec = f"{'+' if signed else ''}.{self.digits}f"
        text = f"{shown:{spec}}"
        if interval is not None:
            low, high = (self.display(v) for v in interval)
            text += f" [{low:{spec}}, {high:{spec}}]"
        return text


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
    Column("gemm_best_gflops", "GEMM best GFLOPS", "gemm", ("gflops_max",), 1.0, 1,
           "GEMM: the best median GFLOPS of an ok, not suspicious kernel"),
    _pct("gemm_best_ratio", "GEMM best of ref. (%)", "gemm", ("ratio_max",),
         "GEMM: the best speed as a share of the reference DGEMM timed in the same bench run"),
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

    def significant(self, key: str) -> bool:
        """Whether the change against the baseline of column `key` excludes 0 (WinRate: its
        interval excludes 0.5, i.e. the change from an even match)."""
        found = self.changes.get(key)
        return found is not None and (found[1] > 0 or found[2] < 0)


class MethodTable(NamedTuple):
    columns: tuple[Column, ...]
    rows: list[Row]
    notes: list[str]


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
    known = [t for t in TASK_NAMES if t in unique]
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
    """The column's 95 % interval in eval/metrics.json (format 2), or None."""
    if column.key == "winrate":
        return _bounds(_dig(run.winrate(), "overall", "interval"))
    if column.task is None or column.task not in run.tasks:
        return None
    return _bounds(_dig(run.eval_task(column.task), "intervals", column.source[-1]))


def _change(run: RunSummary, column: Column) -> tuple[float, float, float] | None:
    """(value, low, high) of the column's paired change against the baseline; WinRate's is
    its distance from an even match, 0.5."""
    if column.key == "winrate":
        rate, bounds = _value(run, column), _interval(run, column)
        if rate is None or bounds is None:
            return None
        return rate - 0.5, bounds[0] - 0.5, bounds[1] - 0.5
    if column.task is None or column.task not in run.tasks:
        return None
    found = _dig(run.eval_task(column.task), "vs_baseline", column.source[-1])
    value, bounds = number(_dig(found, "value")), _bounds(found)
    return None if value is None or bounds is None else (value, *bounds)


def _notes(runs: Sequence[RunSummary], labels: Sequence[str]) -> list[str]:
    notes: list[str] = []
    all_tasks = _task_order(t for run in runs for t in run.tasks)
    table_tasks = [t for t in TASK_NAMES if any(c.task == t for c in COLUMNS)]
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
        rows.append(Row(run.method, run.seed, run.name, str(run.path),
                        {column.key: _value(run, column) for column in COLUMNS},
                        intervals, changes))
    return MethodTable(COLUMNS, rows, [*_sizes(ordered), *_notes(ordered, labels)])


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
    if len(set(sizes.values())) == 1:
        return [f"evaluated on n examples per task: {next(iter(sizes.values()))}; cells show "
                "the value and its 95 % interval over those examples"]
    return [f"{label}: evaluated on {text}" for label, text in sizes.items()]


# ---------------------------------------------------------------- renderings


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def to_markdown(table: MethodTable) -> str:
    """The table as a GitHub markdown table ("—" for a missing value), then the notes as a
    list."""
    columns, rows, notes = table
    header = ["method", "seed", "run", *(c.header for c in columns)]
    lines = ["| " + " | ".join(header) + " |",
             "|---|---:|---|" + "---:|" * len(columns)]
    for row in rows:
        cells = [row.method, MISSING if row.seed is None else str(row.seed), row.run,
                 *(c.text(row.values.get(c.key), row.intervals.get(c.key)) for c in columns)]
        lines.append("| " + " | ".join(_cell(cell) for cell in cells) + " |")
    changed = [c for c in columns if any(c.key in row.changes for row in rows)]
    if changed:
        lines += ["", "Change against the baseline, paired on the same examples (WinRate: "
                  "its distance from 50 %); **bold** where the 95 % interval excludes 0:", "",
                  "| method | seed | run | " + " | ".join(c.header for c in changed) + " |",
                  "|---|---:|---|" + "---:|" * len(changed)]
        for row in rows:
            cells = [row.method, MISSING if row.seed is None else str(row.seed), row.run]
            for c in changed:
                found = row.changes.get(c.key)
                text = MISSING if found is None else c.text(found[0], found[1:], signed=True)
                cells.append(f"**{text}**" if row.significant(c.key) else text)
            lines.append("| " + " | ".join(_cell(cell) for cell in cells) + " |")
    if notes:
        lines.append("")
        lines.extend(f"- {_cell(note)}" for note in notes)
    return "\n".join(lines) + "\n"


def legend_markdown(columns: Sequence[Column]) -> str:
    """One line per column: its header and what it means."""
    return "".join(f"- **{c.header}**: {c.description}\n" for c in columns)


def to_dict(table: MethodTable) -> dict[str, Any]:
    """The table as plain data: the columns (key, header, unit, digits, description), one
    object per row with each column's key holding the shown value (rounded, in the column's
    unit; null where missing), and the notes."""
    columns, rows, notes = table
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
                                  for c in columns if (k := c.key) in row.changes}}
                 for row in rows],
        "notes": list(notes),
    }


def to_json(table: MethodTable) -> str:
    """`to_dict` as indented JSON text (ending in a newline)."""
    return json.dumps(to_dict(table), indent=1, ensure_ascii=False) + "\n"
