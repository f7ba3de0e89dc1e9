"""One seam for a task: a `Task` written outside the package is a module of its own and one
registration line; the config accepts its name and the trainer trains on it like a shipped
task (docs/tasks.md, "Adding a task")."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

from hargo_hpc.config import ConfigError, validate_config
from hargo_hpc.tasks import registry
from hargo_hpc.train import loop
from hargo_hpc.train import metrics as m

torch.set_num_threads(1)

OWN = '''
"""A user's own task, outside hargo_hpc: name the MPI routine that does what is asked."""
from hargo_hpc.tasks.base import Example, Task


class MpiRoutine(Task):
    name = "mpi_routine"
    max_new_tokens = 8
    headline = ("accuracy",)

    def from_record(self, record, index):
        answer = str(record.get("output", "")).strip()
        if not answer.startswith("MPI_"):
            return None  # not a record of this task: dropped and counted
        return Example(task=self.name, id=f"{self.name}:{index}",
                       instruction=record["instruction"], input="", output=answer)

    def extract(self, completion):
        words = completion.split()
        return words[0].strip(".,") if words else ""

    def reward(self, examples, completions):
        return [float(self.extract(c) == e.output) for e, c in zip(examples, completions)]

    def metrics(self, examples, predictions):
        hits = self.reward(examples, predictions)
        return {"n": len(hits), "accuracy": sum(hits) / len(hits) if hits else 0.0}
'''
ROUTINES = ("MPI_Allreduce", "MPI_Bcast", "MPI_Gather", "MPI_Scatter", "MPI_Barrier",
            "MPI_Reduce", "MPI_Send", "MPI_Recv")


@pytest.fixture
def own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """`my_tasks` on sys.path, registered as mpi_routine; the registry restored afterwards."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "my_tasks.py").write_text(OWN)
    monkeypatch.syspath_prepend(str(tmp_path / "pkg"))
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    monkeypatch.delitem(sys.modules, "my_tasks", raising=False)
    registry.register("mpi_routine", "my_tasks:MpiRoutine")
    return importlib.import_module("my_tasks")


def data_file(tmp_path: Path) -> Path:
    records = [{"instruction": f"Which MPI routine is number {i}?", "input": "",
                "output": ROUTINES[i % len(ROUTINES)]} for i in range(16)]
    records.append({"instruction": "Not one of them", "input": "", "output": "a loop"})
    path = tmp_path / "mpi.json"
    path.write_text(json.dumps(records))
    return path


def config(tmp_path: Path, task: str = "mpi_routine") -> object:
    return validate_config({
        "run": {"name": "own", "dir": str(tmp_path), "seed": 0},
        "model": {"path": "tiny"},
        "data": {"tasks": [{"name": task, "path": str(data_file(tmp_path))}],
                 "eval_fraction": 0.0},
        "rollout": {"num_generations": 4, "prompts_per_step": 2, "max_new_tokens": 16},
        "training": {"lr": 1e-3, "steps": 2, "micro_batch_size": 4, "zero_stage": 0},
        "algorithm": {"name": "grpo"},
    })


def test_a_task_of_your_own_trains_like_a_shipped_one(own: ModuleType, tmp_path: Path) -> None:
    result = loop.train(config(tmp_path), log=lambda _: None, progress=False)
    records = m.read_records(result.metrics)
    assert [r["step"] for r in records] == [1, 2]
    rows = [json.loads(line) for line in
            (result.run_dir / "rollouts" / "step_000001.jsonl").read_text().splitlines()]
    assert {row["task"] for row in rows} == {"mpi_routine"} and len(rows) == 8
    assert all(row["reward"] in (0.0, 1.0) for row in rows)


def test_an_unregistered_task_is_one_line_naming_the_registered(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        config(tmp_path, task="mpi_routine")
    message = str(caught.value)
    assert "\n" not in message and "unknown task 'mpi_routine'" in message
    assert "registered: data_race_c" in message


def test_a_name_is_registered_once(own: ModuleType) -> None:
    with pytest.raises(ValueError, match="already registered"):
        registry.register("mpi_routine", "my_tasks:Other")


def test_a_task_named_module_colon_class_needs_no_registration(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`[[data.tasks]] name = "my_tasks:MpiRoutine"`: imported from the PYTHONPATH when the
    config is read (in every job), its name that spec; a module that does not import and a
    name that is not a Task are one line each."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "my_tasks.py").write_text(OWN + "\nNOT_A_TASK = 3\n")
    monkeypatch.syspath_prepend(str(tmp_path / "pkg"))
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    monkeypatch.setattr(registry, "_LOADED", {})
    monkeypatch.delitem(sys.modules, "my_tasks", raising=False)
    result = loop.train(config(tmp_path, task="my_tasks:MpiRoutine"), log=lambda _: None,
                        progress=False)
    rows = [json.loads(line) for line in
            (result.run_dir / "rollouts" / "step_000001.jsonl").read_text().splitlines()]
    assert {row["task"] for row in rows} == {"my_tasks:MpiRoutine"} and len(rows) == 8
    records = m.read_records(result.metrics)
    assert all(r["tasks/my_tasks:MpiRoutine/count"] == 8 for r in records)
    for spec, said in (("nowhere:MpiRoutine", "ModuleNotFoundError: No module named 'nowhere'"),
                       ("my_tasks:Missing", "AttributeError"),
                       ("my_tasks:NOT_A_TASK", "NOT_A_TASK is not a Task")):
        with pytest.raises(ConfigError) as caught:
            config(tmp_path, task=spec)
        assert "\n" not in str(caught.value) and said in str(caught.value), caught.value
