"""A task from a data file and a reward function (`kind = "generic"`): examples/own_task trains
with HARGO beside a shipped task and is evaluated with intervals; a None reward leaves its row
unscored; a reward that does not import, is not a function or returns the wrong length is one
line each."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hargo_hpc.config import ConfigError, load_config
from hargo_hpc.tasks import registry
from hargo_hpc.tasks.base import DataError, Example
from hargo_hpc.tasks.generic import generic_task
from hargo_hpc.train import metrics as m
from hargo_hpc.train.backend.distributed import STANDARD
from hargo_hpc.train.rollout.rewards import RewardRouter

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "own_task"


def hargo(*args: str, cwd: Path = EXAMPLE) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in STANDARD}
    env.update(OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1",
               PYTHONPATH=os.pathsep.join([str(EXAMPLE), *filter(None, [
                   os.environ.get("PYTHONPATH")])]))
    return subprocess.run([sys.executable, "-m", "hargo_hpc", *args], capture_output=True,
                          text=True, timeout=600, env=env, cwd=cwd)


def test_the_example_trains_with_hargo_beside_a_shipped_task_and_is_evaluated(
        tmp_path: Path) -> None:
    done = hargo("train", "arith.toml", f"run.dir={tmp_path}")
    assert done.returncode == 0, done.stderr[-3000:]
    run = tmp_path / "arith"
    records = m.read_records(run / "metrics.jsonl")
    assert [r["step"] for r in records] == [1, 2]
    assert all(r["hargo/weight_mean"] is not None for r in records)  # HARGO's weights
    rows = [json.loads(line) for step in (1, 2) for line in
            (run / "rollouts" / f"step_{step:06d}.jsonl").read_text().splitlines()]
    assert {row["task"] for row in rows} <= {"arith", "data_race_c"}
    assert any(row["task"] == "arith" for row in rows)
    assert all(row["reward"] in (0.0, 1.0) for row in rows if row["task"] == "arith")
    done = hargo("eval", "model", str(run), "-n", "6")
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads((run / "eval" / "metrics.json").read_text())["tasks"]["arith"]
    interval = found["intervals"]["reward_mean"]
    assert interval["n"] == 6 and interval["low"] <= interval["value"] <= interval["high"]


def test_a_none_reward_leaves_its_row_unscored(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLE))
    task = generic_task("arith_t", prompt_field="question", reference_field="answer",
                        reward="arith_rewards:exact")()
    examples = [task.from_record({"question": "What is 2 + 2?", "answer": "4"}, 0),
                task.from_record({"question": "Sum of nothing, in words?", "answer": "zero"}, 1)]
    assert all(isinstance(e, Example) for e in examples)
    assert task.reward(examples, ["4", "zero"]) == [1.0, None]
    router = RewardRouter({"arith_t": task}, handoff_dir=None, progress=False)
    batch = router.collect(router.submit(1, examples, ["it is 5", "zero"]))
    assert batch.rewards[0] == 0.0 and batch.scored == [True, False]
    assert task.metrics(examples, ["4", "zero"]) == {"n": 2, "reward_mean": 1.0,
                                                    "scored_share": 0.5}
    assert task.from_record({"question": "no answer field"}, 2) is None  # dropped, counted


def test_bad_rewards_are_one_line_each(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "bad_rewards.py").write_text(
        "NOT_A_FUNCTION = 3\n"
        "def short(prompts, completions, references, **kwargs):\n"
        "    return [1.0]\n"
        "def words(prompts, completions, references, **kwargs):\n"
        "    return ['good'] * len(completions)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    monkeypatch.setattr(registry, "_LOADED", dict(registry._LOADED))
    monkeypatch.setattr(registry, "_GENERIC", dict(registry._GENERIC))
    data = EXAMPLE / "arith.jsonl"

    def entry(name: str, reward: str) -> list[str]:
        return [f'data.tasks=[{{kind="generic", name="{name}", path="{data}", '
                f'prompt_field="question", reference_field="answer", reward="{reward}"}}]']

    for name, reward, said in (
            ("a1", "nowhere:exact", "ModuleNotFoundError: No module named 'nowhere'"),
            ("a2", "bad_rewards:NOT_A_FUNCTION", "is not a function"),
            ("plp_qa", "bad_rewards:short", "task name 'plp_qa' is taken")):
        with pytest.raises(ConfigError) as caught:
            load_config(EXAMPLE / "arith.toml", entry(name, reward))
        assert "\n" not in str(caught.value) and said in str(caught.value), caught.value
    examples = [Example("a3", f"a3:{i}", f"q{i}", "", "1") for i in range(3)]
    for reward, said in (("bad_rewards:short", "returned 1 values for 3 completions"),
                         ("bad_rewards:words", "returned 'good', not a number or None")):
        task = registry.task_class(load_config(EXAMPLE / "arith.toml", entry(
            f"w{reward[-1]}", reward)).data.tasks[0].name)()
        with pytest.raises(DataError, match=said):
            task.reward(examples, ["1", "2", "3"])


def test_a_saved_hf_dataset_is_a_generic_tasks_data(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """`path` may be a dataset saved with `save_to_disk` (a Dataset, or a DatasetDict's train
    split); its records keep whatever fields the entry names."""
    import datasets

    from hargo_hpc.tasks.data import load_examples

    monkeypatch.syspath_prepend(str(EXAMPLE))
    rows = [{"q": f"What is {i} + 1?", "a": str(i + 1)} for i in range(5)]
    datasets.Dataset.from_list(rows).save_to_disk(str(tmp_path / "flat"))
    datasets.DatasetDict({"train": datasets.Dataset.from_list(rows[:3]),
                          "test": datasets.Dataset.from_list(rows[3:])}).save_to_disk(
        str(tmp_path / "splits"))
    task = generic_task("arith_hf", prompt_field="q", reference_field="a",
                        reward="arith_rewards:exact")()
    flat = load_examples(task, str(tmp_path / "flat"))
    assert [(e.instruction, e.output) for e in flat] == [(r["q"], r["a"]) for r in rows]
    assert [e.output for e in load_examples(task, str(tmp_path / "splits"))] == ["1", "2", "3"]
