"""Loading task records: the four path forms, validation errors, dropping, max_items, load_tasks.

The tasks here are test doubles (the real ones live in their own modules); each test writes its
own small files in tmp_path.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from hargo_hpc.tasks import data, registry
from hargo_hpc.tasks.base import DataError, Example, Task
from hargo_hpc.tasks.data import load_examples, load_tasks, read_records


class YesNoTaskDouble(Task):
    """A test double: keeps records whose answer is yes/no (labelled by it), drops the rest."""

    name = "yes_no_double"
    files = ("double_yes_no.json",)
    sample = "double_sample.json"

    def from_record(self, record: Mapping[str, Any], index: int) -> Example | None:
        answer = record["output"].strip().lower()
        if answer not in ("yes", "no"):
            return None
        return Example(self.name, f"{self.name}:{index}", record["instruction"],
                       record["input"], record["output"], label=answer)

    def extract(self, completion: str) -> str:
        return completion.strip()

    def metrics(self, examples: Sequence[Example], predictions: Sequence[str]) -> dict[str, Any]:
        return {}


class AnyTaskDouble(YesNoTaskDouble):
    """A test double: keeps every record; two published names, no shipped sample."""

    name = "any_double"
    files = ("double_any.json", "double_any_alt.json")
    sample = ""

    def from_record(self, record: Mapping[str, Any], index: int) -> Example | None:
        return Example(self.name, f"{self.name}:{index}", record["instruction"],
                       record["input"], record["output"])


class RemoteTaskDouble(AnyTaskDouble):
    """A test double of a remote task (like GEMM): its records are not Alpaca records, its
    from_record reads them."""

    name = "remote_double"
    remote = True

    def from_record(self, record: Mapping[str, Any], index: int) -> Example | None:
        return Example(self.name, f"{self.name}:{record['name']}", f"size {record['n']}", "", "")


def record(output: str, instruction: str = "Is there a race?", **extra: Any) -> dict[str, Any]:
    return {"instruction": instruction, "input": "", "output": output, **extra}


def write(path: Path, content: Any) -> Path:
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return path


FIVE = [record("yes"), record("maybe"), record(" No "), record("yes\n\ncode"), record("no")]


def test_file_ids_labels_and_the_dropped_line(tmp_path: Path) -> None:
    lines: list[str] = []
    file = write(tmp_path / "d.json", FIVE)
    examples = load_examples(YesNoTaskDouble(), str(file), log=lines.append)
    # records 1 ('maybe') and 3 ('yes' + code) do not fit: 5 - 2 = 3 kept, ids by source index
    assert [e.id for e in examples] == ["yes_no_double:0", "yes_no_double:2", "yes_no_double:4"]
    assert [e.label for e in examples] == ["yes", "no", "no"]
    assert lines == ["yes_no_double: dropped 2 of 5 records of d.json that do not fit the task"]


def test_no_line_when_nothing_is_dropped(tmp_path: Path) -> None:
    lines: list[str] = []
    file = write(tmp_path / "d.json", [record("yes"), record("no")])
    assert len(load_examples(YesNoTaskDouble(), str(file), log=lines.append)) == 2
    assert lines == []


def test_max_items_keeps_the_first_usable(tmp_path: Path) -> None:
    lines: list[str] = []
    file = write(tmp_path / "d.json", FIVE)
    examples = load_examples(YesNoTaskDouble(), str(file), max_items=2, log=lines.append)
    assert [e.id for e in examples] == ["yes_no_double:0", "yes_no_double:2"]
    # the count is over the whole file, not the kept head
    assert lines == ["yes_no_double: dropped 2 of 5 records of d.json that do not fit the task"]


def test_a_missing_input_is_empty(tmp_path: Path) -> None:
    file = write(tmp_path / "d.json", [{"instruction": "q", "output": "yes"},
                                       {"instruction": "q", "input": None, "output": "no"}])
    assert [e.input for e in load_examples(YesNoTaskDouble(), str(file))] == ["", ""]


def test_directory_reads_the_published_name(tmp_path: Path) -> None:
    write(tmp_path / "double_yes_no.json", [record("yes")])
    write(tmp_path / "double_any_alt.json", [record("a"), record("b")])
    write(tmp_path / "other.json", [record("no")] * 4)
    assert [e.id for e in load_examples(YesNoTaskDouble(), str(tmp_path))] == ["yes_no_double:0"]
    # the second published name, when the first is absent
    got = read_records(AnyTaskDouble(), str(tmp_path))
    assert got.name == "double_any_alt.json" and len(got.records) == 2


def test_directory_without_the_file(tmp_path: Path) -> None:
    write(tmp_path / "other.json", [record("no")])
    with pytest.raises(DataError) as caught:
        load_examples(AnyTaskDouble(), str(tmp_path))
    assert str(caught.value) == (f"{tmp_path}: no file of task 'any_double' in it (looked for "
                                 "double_any.json or double_any_alt.json)")


def test_jsonl(tmp_path: Path) -> None:
    file = write(tmp_path / "d.jsonl", "\n".join(json.dumps(r) for r in FIVE[:3]) + "\n\n")
    assert [e.id for e in load_examples(YesNoTaskDouble(), str(file))] == [
        "yes_no_double:0", "yes_no_double:2"]
    # line 3 is blank; the broken line is line 4, the record's index 2
    write(file, json.dumps(record("yes")) + "\n" + json.dumps(record("no")) + "\n\n{oops\n")
    with pytest.raises(DataError, match=r"d\.jsonl: record 2 \(line 4\) is not valid JSON"):
        load_examples(YesNoTaskDouble(), str(file))


def test_the_shipped_sample(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(data, "SAMPLES", tmp_path)
    with pytest.raises(DataError, match=r"double_sample\.json: the shipped sample of task "
                                        "'yes_no_double' is missing"):
        load_examples(YesNoTaskDouble())
    write(tmp_path / "double_sample.json", [record("no"), record("yes")])
    assert [e.label for e in load_examples(YesNoTaskDouble())] == ["no", "yes"]
    with pytest.raises(DataError, match="task 'any_double' ships no sample; give its data path"):
        load_examples(AnyTaskDouble(), "")


@pytest.mark.parametrize(("content", "message"), [
    ('{"instruction": "q"}', "expected a JSON list of records, got an object"),
    ('[{"instruction": "q", "output": "yes"}, ["a"]]', "record 1 is not an object (got a list)"),
    ('[{"instruction": "q", "output": "yes"}, {"output": "no"}]', "record 1 has no 'instruction'"),
    ('[{"instruction": "q"}]', "record 0 has no 'output'"),
    ('[{"instruction": "q", "output": 3}]', "record 0: 'output' is not a string (got a number)"),
    ('[{"instruction": "q", "output": null}]', "record 0: 'output' is not a string (got null)"),
    ('[{"instruction": ["q"], "output": "no"}]',
     "record 0: 'instruction' is not a string (got a list)"),
    ('[{"instruction": "q", "input": 7, "output": "no"}]',
     "record 0: 'input' is not a string (got a number)"),
    ('[{"instruction": "q",\n "output": }]', "not valid JSON: Expecting value (line 2 column 12)"),
])
def test_bad_records_are_one_line_naming_file_and_record(
    tmp_path: Path, content: str, message: str
) -> None:
    file = write(tmp_path / "bad.json", content)
    with pytest.raises(DataError) as caught:
        load_examples(AnyTaskDouble(), str(file))
    assert str(caught.value) == f"{file}: {message}"


def test_no_usable_record(tmp_path: Path) -> None:
    file = write(tmp_path / "d.json", [record("maybe"), record("perhaps")])
    with pytest.raises(DataError) as caught:
        load_examples(YesNoTaskDouble(), str(file))
    assert str(caught.value) == (f"{file}: no record fits task 'yes_no_double' "
                                 "(2 records, all dropped)")


def test_missing_path(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"nope\.json: no such file or directory"):
        load_examples(YesNoTaskDouble(), str(tmp_path / "nope.json"))


def _snapshot(*directories: str) -> set[str]:
    return {str(p) for d in directories for p in Path(d).rglob("*")}


def test_loading_writes_no_cache(tmp_path: Path) -> None:
    """Local files leave $HOME and $XDG_CACHE_HOME (the suite's private ones) as they were."""
    places = (os.environ["HOME"], os.environ["XDG_CACHE_HOME"])
    before = _snapshot(*places)
    write(tmp_path / "double_yes_no.json", FIVE)
    load_examples(YesNoTaskDouble(), str(tmp_path))
    load_examples(YesNoTaskDouble(), str(tmp_path / "double_yes_no.json"))
    assert _snapshot(*places) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["double_yes_no.json"]


def test_hub_id_offline_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The hub path is real (datasets.load_dataset of HPC-GPT/HPC); offline (the suite sets
    HF_DATASETS_OFFLINE=1) it fails with one line naming the hub file, writing nothing."""
    monkeypatch.chdir(tmp_path)  # no local 'HPC-GPT/HPC' directory shadows the hub id
    places = (os.environ["HOME"], os.environ["XDG_CACHE_HOME"])
    before = _snapshot(*places)
    with pytest.raises(DataError) as caught:
        load_examples(YesNoTaskDouble(), "HPC-GPT/HPC")
    message = str(caught.value)
    assert message.startswith("HPC-GPT/HPC/double_yes_no.json: cannot load from the Hugging "
                              "Face hub: ")
    assert "\n" not in message and "offline" in message.lower()
    assert _snapshot(*places) == before
    assert list(tmp_path.iterdir()) == []


@dataclass
class SpecDouble:
    """A config task entry (TaskSpec's fields that load_tasks reads)."""

    name: str
    path: str
    max_items: int | None = None


@pytest.fixture
def doubles_registered(monkeypatch: pytest.MonkeyPatch) -> None:
    """The two doubles in the registry for this test only."""
    monkeypatch.setitem(registry._REGISTRY, "yes_no_double", f"{__name__}:YesNoTaskDouble")
    monkeypatch.setitem(registry._REGISTRY, "any_double", f"{__name__}:AnyTaskDouble")


def test_load_tasks(tmp_path: Path, doubles_registered: None) -> None:
    write(tmp_path / "double_yes_no.json", FIVE)
    other = write(tmp_path / "any.json", [record("a"), record("b"), record("c")])
    lines: list[str] = []
    loaded = load_tasks([SpecDouble("any_double", str(other), max_items=2),
                         SpecDouble("yes_no_double", str(tmp_path))], log=lines.append)
    assert list(loaded) == ["any_double", "yes_no_double"]
    assert [e.id for e in loaded["any_double"]] == ["any_double:0", "any_double:1"]
    assert len(loaded["yes_no_double"]) == 3
    assert lines == ["yes_no_double: dropped 2 of 5 records of double_yes_no.json that do not "
                     "fit the task"]


def test_load_tasks_unknown_and_repeated(tmp_path: Path, doubles_registered: None) -> None:
    write(tmp_path / "double_yes_no.json", FIVE)
    with pytest.raises(DataError, match=r"unknown task 'no_such_task' \(registered: data_race_c"):
        load_tasks([SpecDouble("no_such_task", str(tmp_path))])
    with pytest.raises(DataError, match="task 'yes_no_double' is listed twice"):
        load_tasks([SpecDouble("yes_no_double", str(tmp_path))] * 2)


def test_the_real_data_race_task_on_the_shared_data(hpc_gpt: Path) -> None:
    from hargo_hpc.config import TaskSpec
    from hargo_hpc.tasks.registry import get_task
    from hargo_hpc.tasks.split import split_examples

    lines: list[str] = []
    examples = load_examples(get_task("data_race_c"), str(hpc_gpt), log=lines.append)
    # 1858 records, 21 of them answers that are not yes/no: 1837 kept (853 yes, 984 no)
    assert len(examples) == 1837
    assert lines == ["data_race_c: dropped 21 of 1858 records of task2_c_c++.json that do not "
                     "fit the task"]
    assert Counter(e.label for e in examples) == {"yes": 853, "no": 984}
    assert examples[0].id == "data_race_c:0" and examples[0].label == "yes"
    _, evaluation = split_examples(examples, 0.1, seed=0)
    # per label: floor(85.3 + 0.5) = 85 yes, floor(98.4 + 0.5) = 98 no
    assert Counter(e.label for e in evaluation) == {"yes": 85, "no": 98}
    # the config's own TaskSpec through load_tasks
    loaded = load_tasks([TaskSpec(name="data_race_c", path=str(hpc_gpt), max_items=100)],
                        log=lines.append)
    assert len(loaded["data_race_c"]) == 100


def test_a_remote_task_reads_its_own_records(tmp_path: Path) -> None:
    file = write(tmp_path / "problems.json", [{"name": "p1", "n": 8}, {"name": "p2", "n": 16}])
    examples = load_examples(RemoteTaskDouble(), str(file))
    assert [(e.id, e.instruction) for e in examples] == [("remote_double:p1", "size 8"),
                                                         ("remote_double:p2", "size 16")]
    write(file, [{"name": "p1", "n": 8}, 3])
    with pytest.raises(DataError, match=r"problems\.json: record 1 is not an object"):
        load_examples(RemoteTaskDouble(), str(file))


def test_the_real_gemm_task_through_load_tasks() -> None:
    from hargo_hpc.config import TaskSpec

    # the config's default path '' = the shipped problem file (5 written by hand, the paper's
    # 256^3 first, and 43 drawn by scripts/make_task_samples.py)
    loaded = load_tasks([TaskSpec(name="gemm")])
    assert len(loaded["gemm"]) == 48 and loaded["gemm"][0].id == "gemm:dgemm-256"
