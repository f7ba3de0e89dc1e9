"""The baseline's answers are computed once and reused: by key, under a claim with a lease
(no lock), atomically."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from hargo_hpc.config import validate_config
from hargo_hpc.eval import baseline_answers
from hargo_hpc.eval.baseline_answers import answers_key, cache_root, cached_answers
from hargo_hpc.eval.evaluate import Answers, TaskPlan
from hargo_hpc.runs import RunLayout
from hargo_hpc.tasks.base import Example

CONFIG = validate_config({"data": {"tasks": [{"name": "mlperf_qa"}]}})


def plans(tokens: int = 48) -> dict[str, TaskPlan]:
    examples = [Example("mlperf_qa", f"mlperf_qa:{i}", f"q{i}", "", f"a{i}") for i in range(3)]
    return {"mlperf_qa": TaskPlan(examples, 1, tokens, (), do_sample=False)}


def run_export(root: Path) -> Path:
    """A run directory with an export (what the SFT job leaves)."""
    layout = RunLayout(root)
    layout.export.mkdir(parents=True)
    (layout.export / "config.json").write_text("{}")
    layout.config.write_text("")
    return layout.export


def test_only_a_runs_export_has_a_cache(tmp_path: Path) -> None:
    export = run_export(tmp_path / "sft")
    assert cache_root(str(export)) == RunLayout(tmp_path / "sft").baseline_answers
    assert cache_root("tiny") is None and cache_root("smollm2") is None
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "config.json").write_text("{}")
    assert cache_root(str(tmp_path / "ckpt")) is None  # a checkpoint: not ours to write into


def test_the_key_follows_the_model_files_and_the_decoding(tmp_path: Path) -> None:
    export = str(run_export(tmp_path / "sft"))
    key = answers_key(export, CONFIG, plans(), "eval")
    assert answers_key(export, CONFIG, plans(), "eval") == key
    assert answers_key(export, CONFIG, plans(tokens=8), "eval") != key
    assert answers_key(export, CONFIG, plans(), "all") != key
    weights = Path(export) / "config.json"
    os.utime(weights, ns=(1, 1))  # a retrained export: same names, other files
    assert answers_key(export, CONFIG, plans(), "eval") != key


def test_two_evaluations_at_once_compute_the_answers_once(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    """The second waits on the lock (it says so at once: WAIT_LOG_S 0) while the first
    computes; then it reads what the first wrote."""
    monkeypatch.setattr(baseline_answers, "WAIT_LOG_S", 0.0)
    monkeypatch.setattr(baseline_answers, "POLL_S", 0.01)
    export = str(run_export(tmp_path / "sft"))
    waiting, calls, results = threading.Event(), [], {}

    def compute() -> Answers:
        calls.append(1)
        assert waiting.wait(timeout=60), "the second evaluation never waited on the lock"
        return Answers({"mlperf_qa": ["x", "y", "z"]})

    def log(line: str) -> None:
        if line.startswith("waiting for another evaluation"):
            waiting.set()

    def evaluation(name: str) -> None:
        results[name] = cached_answers(export, CONFIG, plans(), split="eval", log=log,
                                       compute=compute)

    first = threading.Thread(target=evaluation, args=("first",))
    first.start()
    while not calls and first.is_alive():  # the first holds the lock and computes
        first.join(timeout=0.01)
    second = threading.Thread(target=evaluation, args=("second",))
    second.start()
    first.join(timeout=60)
    second.join(timeout=60)
    assert len(calls) == 1
    assert results["first"].texts == results["second"].texts == {"mlperf_qa": ["x", "y", "z"]}
    key = answers_key(export, CONFIG, plans(), "eval")
    stored = RunLayout(tmp_path / "sft").baseline_answers / key / baseline_answers.ANSWERS
    assert json.loads(stored.read_text())["texts"] == {"mlperf_qa": ["x", "y", "z"]}


def test_a_damaged_or_short_entry_is_computed_again(tmp_path: Path) -> None:
    export = str(run_export(tmp_path / "sft"))
    key = answers_key(export, CONFIG, plans(), "eval")
    stored = RunLayout(tmp_path / "sft").baseline_answers / key / baseline_answers.ANSWERS
    stored.parent.mkdir(parents=True)
    for bad in ("{not json", json.dumps({"texts": {"mlperf_qa": ["only one"]}})):
        stored.write_text(bad)
        found = cached_answers(export, CONFIG, plans(), split="eval", log=lambda _: None,
                               compute=lambda: Answers({"mlperf_qa": ["a", "b", "c"]}))
        assert found.texts == {"mlperf_qa": ["a", "b", "c"]}
    assert json.loads(stored.read_text())["texts"]["mlperf_qa"] == ["a", "b", "c"]


def test_a_model_without_a_cache_is_answered_each_time() -> None:
    calls = []
    for _ in range(2):
        cached_answers("tiny", CONFIG, plans(), split="eval", log=lambda _: None,
                       compute=lambda: calls.append(1) or Answers({"mlperf_qa": ["a"] * 3}))
    assert len(calls) == 2


def test_a_dead_evaluations_claim_is_taken_over_after_its_lease(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A claim nobody renews (its evaluation was killed) stands still for a lease: the next
    evaluation takes the next attempt's claim, computes, writes, and removes its claim."""
    monkeypatch.setattr(baseline_answers, "POLL_S", 0.01)
    export = str(run_export(tmp_path / "sft"))
    key = answers_key(export, CONFIG, plans(), "eval")
    root = RunLayout(tmp_path / "sft").baseline_answers
    root.mkdir(parents=True)
    (root / f"{key}.claim.1").write_text("{}")  # its holder is gone
    said: list[str] = []
    found = cached_answers(export, CONFIG, plans(), split="eval", log=said.append,
                           compute=lambda: Answers({"mlperf_qa": ["a", "b", "c"]}),
                           lease_s=0.3)
    assert found.texts == {"mlperf_qa": ["a", "b", "c"]}
    assert sorted(p.name for p in root.iterdir()) == [key, f"{key}.claim.1"]  # 2: removed
    assert said[-1].startswith("the baseline's answers: written to")


COMPUTE_ONCE = """
import sys, time
from pathlib import Path
sys.path.insert(0, {tests!r})
from eval.test_baseline_answers import CONFIG, plans
from hargo_hpc.eval import baseline_answers
from hargo_hpc.eval.evaluate import Answers
baseline_answers.POLL_S = 0.01

def compute():
    with open({marker!r}, "a") as marker:
        marker.write("computed\\n")
    time.sleep(1.0)  # long enough for the other process to find the claim held
    return Answers({{"mlperf_qa": ["x", "y", "z"]}})

found = baseline_answers.cached_answers({export!r}, CONFIG, plans(), split="eval",
                                        log=lambda _: None, compute=compute, lease_s=5.0)
print(found.texts["mlperf_qa"])
"""


def test_two_evaluation_processes_compute_the_answers_once(tmp_path: Path) -> None:
    """Two processes at once (as two eval jobs on two nodes): one claims and computes, the
    other waits and reads; no lock is taken anywhere."""
    import subprocess
    import sys

    export = str(run_export(tmp_path / "sft"))
    marker = tmp_path / "computed.txt"
    script = COMPUTE_ONCE.format(tests=str(Path(__file__).resolve().parents[1]),
                                 marker=str(marker), export=export)
    runs = [subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outputs = [run.communicate(timeout=120) for run in runs]
    for run, (out, err) in zip(runs, outputs, strict=True):
        assert run.returncode == 0, err[-2000:]
        assert out.strip() == "['x', 'y', 'z']"
    assert marker.read_text() == "computed\n"
    key = answers_key(export, CONFIG, plans(), "eval")
    assert not list(RunLayout(tmp_path / "sft").baseline_answers.glob(f"{key}.claim.*"))
