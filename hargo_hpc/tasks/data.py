"""Loading a task's records: from a directory, one file, the hub, or the shipped sample.

`load_examples(task, path)` reads a task's `path` (a directory of the published HPC-GPT
files, a JSON or JSONL file, the hub id `HPC-GPT/HPC`, or "" for the shipped sample),
validates the records (`validate_records`) and turns each into an `Example` with
`task.from_record`, dropping and counting those that do not fit; `read_records` stops before
`from_record`; `load_tasks` loads every config entry. The forms of `path`, why local files are
read with `json`, and the errors: docs/data.md, "Loading".
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from hargo_hpc.tasks.base import DataError, Example, Task
from hargo_hpc.tasks.settings import RewardSettings

HUB_ID = "HPC-GPT/HPC"
SAMPLES = Path(__file__).resolve().parent / "samples"
REQUIRED = ("instruction", "output")

_LOG = logging.getLogger(__name__)


@dataclass(frozen=True)
class SourceRecords:
    """The validated records of one source: `source` names it in messages (the path, or
    `HPC-GPT/HPC/<file>`), `name` is its short name (the file's) for log lines."""

    source: str
    name: str
    records: list[dict[str, Any]]


class TaskSpecLike(Protocol):
    """What `load_tasks` reads of a task entry (`hargo_hpc.config.TaskSpec` fits)."""

    name: str
    path: str
    max_items: int | None


def validate_records(raw: Any, source: str, *, alpaca: bool = True) -> list[dict[str, Any]]:
    """The records of `raw` (parsed JSON): a list of objects; with `alpaca` (the text tasks,
    whose rewards compare with a reference answer) each has string `instruction` and `output`
    and `input` a string ('' when missing or null). DataError naming `source` and the record
    index for anything else. Without `alpaca` (a remote task: the bench rewards it, there is no
    reference answer) the objects are passed on as they are, for the task's `from_record`."""
    if not isinstance(raw, list):
        raise DataError(f"{source}: expected a JSON list of records, got {_kind(raw)}")
    records = []
    for index, record in enumerate(raw):
        if not isinstance(record, dict):
            raise DataError(f"{source}: record {index} is not an object (got {_kind(record)})")
        if not alpaca:
            records.append(record)
            continue
        for key in REQUIRED:
            if key not in record:
                raise DataError(f"{source}: record {index} has no {key!r}")
            if not isinstance(record[key], str):
                raise DataError(
                    f"{source}: record {index}: {key!r} is not a string (got {_kind(record[key])})"
                )
        extra = record.get("input")
        if extra is not None and not isinstance(extra, str):
            raise DataError(f"{source}: record {index}: 'input' is not a string "
                            f"(got {_kind(extra)})")
        records.append({**record, "input": extra or ""})
    return records


def read_file(path: Path, *, alpaca: bool = True) -> list[dict[str, Any]]:
    """The validated records (`validate_records`) of one JSON (a list) or JSONL (`.jsonl`: one
    object per non-blank line; the record index counts records, the message names the line
    too) file."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise DataError(f"{path}: cannot read: {_first_line(err)}") from None
    if path.suffix == ".jsonl":
        raw = []
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                raw.append(json.loads(line))
            except json.JSONDecodeError as err:
                raise DataError(f"{path}: record {len(raw)} (line {number}) is not valid "
                                f"JSON: {err.msg} (column {err.colno})") from None
        return validate_records(raw, str(path), alpaca=alpaca)
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as err:
        raise DataError(f"{path}: not valid JSON: {err.msg} (line {err.lineno} column "
                        f"{err.colno})") from None
    return validate_records(raw, str(path), alpaca=alpaca)


def read_records(task: Task, path: str = "") -> SourceRecords:
    """The validated records of `task` at `path` (its four forms: docs/data.md, "Loading"),
    before `from_record`: what `load_examples` and `hargo data stats` start from. Alpaca
    records for the text tasks, any objects for a remote one (`validate_records`)."""
    alpaca = task.alpaca and not task.remote
    if path == "":
        if not task.sample:
            raise DataError(f"task {task.name!r} ships no sample; give its data path")
        file = SAMPLES / task.sample
        if not file.is_file():
            raise DataError(f"{file}: the shipped sample of task {task.name!r} is missing")
        return SourceRecords(str(file), file.name, read_file(file, alpaca=alpaca))
    local = Path(path)
    if path == HUB_ID and not local.exists():
        return _hub_records(task)
    if local.is_dir() and any((local / n).is_file() for n in DATASET_MARKERS):
        return _saved_dataset(local, alpaca)
    if local.is_dir():
        file = next((local / n for n in task.files if (local / n).is_file()), None)
        if file is None:
            wanted = " or ".join(task.files) or "(the task has no published file)"
            raise DataError(f"{local}: no file of task {task.name!r} in it (looked for {wanted})")
        return SourceRecords(str(file), file.name, read_file(file, alpaca=alpaca))
    if local.is_file():
        return SourceRecords(str(local), local.name, read_file(local, alpaca=alpaca))
    raise DataError(f"{path}: no such file or directory (data of task {task.name!r})")


DATASET_MARKERS = ("dataset_info.json", "dataset_dict.json")  # what `save_to_disk` writes


def _saved_dataset(directory: Path, alpaca: bool) -> SourceRecords:
    """The records of an HF dataset saved with `save_to_disk` (a DatasetDict: its "train"
    split, else its only one)."""
    import datasets  # heavy: only on this path

    try:
        found = datasets.load_from_disk(str(directory))
    except Exception as err:  # a damaged or foreign directory: one line for the user
        raise DataError(f"{directory}: not a readable HF dataset: {_first_line(err)}") from None
    if isinstance(found, datasets.DatasetDict):
        if "train" not in found and len(found) != 1:
            raise DataError(f"{directory}: a dataset of splits {sorted(found)}: no 'train'")
        found = found["train"] if "train" in found else next(iter(found.values()))
    return SourceRecords(str(directory), directory.name,
                         validate_records(found.to_list(), str(directory), alpaca=alpaca))


def _hub_records(task: Task) -> SourceRecords:
    """The task's published file from the hub dataset `HPC-GPT/HPC` (needs the network, or
    `datasets`' cache; offline it fails with a DataError)."""
    if not task.files:
        raise DataError(f"task {task.name!r} has no file in {HUB_ID}")
    name = task.files[0]
    source = f"{HUB_ID}/{name}"
    import datasets  # heavy: only on this path

    try:
        rows = datasets.load_dataset(HUB_ID, data_files=name, split="train").to_list()
    except Exception as err:  # network, offline mode, a missing file: one line for the user
        raise DataError(f"{source}: cannot load from the Hugging Face hub: "
                        f"{_first_line(err)}") from None
    return SourceRecords(source, source, validate_records(rows, source, alpaca=not task.remote))


def examples_of(
    task: Task, records: SourceRecords, *, max_items: int | None = None,
    log: Callable[[str], None] | None = None,
) -> list[Example]:
    """The examples of `records`: `task.from_record(record, index)` for each (index = the
    record's position in its source, so ids are `<task>:<index>`), records that do not fit
    dropped and counted in one log line; then the first `max_items` of them. DataError when
    none fits."""
    examples = []
    for index, record in enumerate(records.records):
        example = task.from_record(record, index)
        if example is not None:
            examples.append(example)
    total, dropped = len(records.records), len(records.records) - len(examples)
    if not examples:
        raise DataError(f"{records.source}: no record fits task {task.name!r} "
                        f"({total} records, all dropped)")
    if dropped:
        (log or _LOG.info)(f"{task.name}: dropped {dropped} of {total} records of "
                           f"{records.name} that do not fit the task")
    if max_items is not None:
        if max_items <= 0:
            raise ValueError(f"max_items must be positive, got {max_items}")
        examples = examples[:max_items]
    return examples


def load_examples(
    task: Task, path: str = "", *, max_items: int | None = None,
    log: Callable[[str], None] | None = None,
) -> list[Example]:
    """The examples of `task` at `path` (a directory, a file, `HPC-GPT/HPC` or '' = the shipped
    sample): the first `max_items` usable ones when given. `log` gets the dropped-records line
    (default: this module's logger at INFO)."""
    return examples_of(task, read_records(task, path), max_items=max_items, log=log)


def load_tasks(
    specs: Iterable[TaskSpecLike], rewards: RewardSettings | None = None,
    log: Callable[[str], None] | None = None,
) -> dict[str, list[Example]]:
    """The examples of each task entry (config `[[data.tasks]]`), keyed by task name in the
    entries' order; DataError for an unknown or repeated task name."""
    from hargo_hpc.tasks.registry import get_task

    loaded: dict[str, list[Example]] = {}
    for spec in specs:
        if spec.name in loaded:
            raise DataError(f"task {spec.name!r} is listed twice in the data tasks")
        try:
            task = get_task(spec.name, rewards)
        except ValueError as err:
            raise DataError(str(err)) from None
        loaded[spec.name] = load_examples(task, spec.path, max_items=spec.max_items, log=log)
    return loaded


def _kind(value: Any) -> str:
    """A JSON-ish name of `value`'s type for messages."""
    names: Mapping[type, str] = {dict: "an object", list: "a list", str: "a string",
                                 bool: "a boolean", int: "a number", float: "a number"}
    return "null" if value is None else names.get(type(value), type(value).__name__)


def _first_line(err: BaseException) -> str:
    text = str(err).strip() or type(err).__name__
    return text.splitlines()[0]

