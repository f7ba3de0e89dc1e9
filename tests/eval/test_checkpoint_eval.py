"""`hargo eval CHECKPOINT`: a run's checkpoint evaluated on the run's tasks and split, its ZeRO
shards consolidated into an HF directory (or the one the trainer wrote with
`training.export_checkpoints`); the last checkpoint's weights are the run's export's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from hargo_hpc.examples import example_jobs
from hargo_hpc.train.backend.distributed import STANDARD
from hargo_hpc.train.checkpoint_hf import checkpoint_of

TINY = Path(str(next(job for job in example_jobs() if job.name == "tiny.toml")))


def hargo(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in STANDARD}
    env.update(OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    return subprocess.run([sys.executable, "-m", "hargo_hpc", *args], capture_output=True,
                          text=True, timeout=600, env=env)


def trained(run_dir: Path, *overrides: str) -> Path:
    done = hargo("train", str(TINY), f"run.dir={run_dir.parent}", f"run.name={run_dir.name}",
                 "training.steps=2", "training.save_every=1", "rollout.max_new_tokens=8",
                 'data.tasks=[{name="data_race_c"}]', "logging.report_to=[]", *overrides)
    assert done.returncode == 0, done.stderr[-3000:]
    return run_dir


def same_weights(a: Path, b: Path) -> bool:
    wa, wb = load_file(a / "model.safetensors"), load_file(b / "model.safetensors")
    return wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


@pytest.mark.parametrize("stage", [2, 3])
def test_a_checkpoints_shards_are_consolidated_and_evaluated(tmp_path: Path, stage: int) -> None:
    run = trained(tmp_path / f"z{stage}", f"training.zero_stage={stage}")
    last, first = run / "checkpoints" / "step_000002", run / "checkpoints" / "step_000001"
    assert checkpoint_of(run / "checkpoints") == (run, last)  # its `latest`
    assert checkpoint_of(first) == (run, first) and checkpoint_of(run) is None
    done = hargo("eval", "model", str(first), "-n", "2")
    assert done.returncode == 0, done.stderr[-3000:]
    metrics = json.loads((run / "eval-step_000001" / "metrics.json").read_text())
    assert "data_race_c" in metrics["tasks"]
    assert (first / "hf" / "config.json").is_file()  # consolidated once, kept
    done = hargo("eval", "model", str(run / "checkpoints"), "-n", "2")
    assert done.returncode == 0, done.stderr[-3000:]
    assert same_weights(last / "hf", run / "export")  # the last step's weights, exactly


def test_checkpoints_exported_by_the_trainer_are_evaluated_as_they_are(tmp_path: Path) -> None:
    run = trained(tmp_path / "exported", "training.export_checkpoints=true")
    for step in (1, 2):
        assert (run / "checkpoints" / f"step_{step:06d}" / "hf" / "config.json").is_file()
    assert same_weights(run / "checkpoints" / "step_000002" / "hf", run / "export")
    done = hargo("eval", "model", str(run / "checkpoints" / "step_000002"), "-n", "2")
    assert done.returncode == 0, done.stderr[-3000:]


def test_a_directory_that_is_none_of_them_is_one_line(tmp_path: Path) -> None:
    done = hargo("eval", "model", str(tmp_path))
    assert done.returncode == 2
    assert done.stderr.strip().endswith("a run's checkpoint, a model directory (no "
                                        "config.json), nor 'tiny' or 'smollm2'")
