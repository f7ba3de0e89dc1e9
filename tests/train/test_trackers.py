"""Training you can watch: `logging.report_to` sends each step's numbers to TensorBoard, W&B
(offline) and MLflow (a file store), each read back with its own library; a tracker of the
user's own by `module:factory`; a bad name refused in one line; `hargo status` says where."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from waiting import wait_until

from hargo_hpc.config import ConfigError, load_config
from hargo_hpc.examples import example_jobs
from hargo_hpc.runs import RunLayout
from hargo_hpc.train import metrics as m
from hargo_hpc.train.backend.distributed import STANDARD
from hargo_hpc.train.trackers import where_to_look

TINY = Path(str(next(job for job in example_jobs() if job.name == "tiny.toml")))


def train(run_dir: Path, *overrides: str, path: Path | None = None
          ) -> subprocess.CompletedProcess[str]:
    """`hargo train` of 2 steps of the tiny model in its own process (W&B's service and all);
    `path` goes first on its PYTHONPATH."""
    env = {k: v for k, v in os.environ.items() if k not in STANDARD and
           not k.startswith("WANDB")}
    env.update(OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    if path is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(path), *filter(None, [env.get("PYTHONPATH")])])
    return subprocess.run(
        [sys.executable, "-m", "hargo_hpc", "train", str(TINY), f"run.dir={run_dir.parent}",
         f"run.name={run_dir.name}", "training.steps=2", "training.save_every=0",
         "rollout.max_new_tokens=8", 'data.tasks=[{name="plp_qa", max_items=5}]',
         'rewards.similarity_baseline="none"',
         *overrides], capture_output=True, text=True, timeout=600, env=env)


def wandb_processes(run_dir: Path) -> list[str]:
    done = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True, check=True)
    return [line for line in done.stdout.splitlines() if "wandb" in line.lower()
            and str(run_dir) in line]


def test_tensorboard_wandb_and_mlflow_each_get_every_step(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # to read the run's file store
    run_dir = tmp_path / "watched"
    done = train(run_dir, 'logging.report_to=["tensorboard", "wandb", "mlflow"]')
    assert done.returncode == 0, done.stderr[-3000:]
    records = m.read_records(run_dir / "metrics.jsonl")
    assert [r["step"] for r in records] == [1, 2]
    losses = [r["loss"] for r in records]
    per_step = [r["tokens/step"] for r in records]  # TRL's num_tokens: the running total
    assert [r["num_tokens"] for r in records] == [per_step[0], per_step[0] + per_step[1]]
    said = [line for line in done.stderr.splitlines() if line.startswith("metrics: ")]
    assert len(said) == 3 and "wandb sync" in said[1] and "mlflow ui" in said[2], said

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(RunLayout(run_dir).tensorboard))
    events.Reload()
    scalars = events.Scalars("loss")
    assert [s.step for s in scalars] == [1, 2]
    assert [s.value for s in scalars] == pytest.approx(losses, rel=1e-6)  # stored as float32

    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=(run_dir / "mlruns").as_uri())
    run_id = (run_dir / "mlflow_run_id").read_text().strip()
    history = client.get_metric_history(run_id, "loss")
    assert [(h.step, h.value) for h in history] == list(zip([1, 2], losses, strict=True))
    assert client.get_run(run_id).info.status == "FINISHED"

    offline = list((run_dir / "wandb").glob("offline-run-*"))
    assert len(offline) == 1, list((run_dir / "wandb").iterdir())
    (log,) = offline[0].glob("run-*.wandb")  # W&B's own record log, what `wandb sync` sends
    assert b"loss" in log.read_bytes() and b"timing_s/step" in log.read_bytes()
    wait_until(lambda: not wandb_processes(run_dir), 60, "W&B's service to end")


def test_a_tracker_of_ones_own_and_a_bad_one(tmp_path: Path) -> None:
    (tmp_path / "mytracker.py").write_text(
        "import json\n"
        "class Lines:\n"
        "    def __init__(self, config, layout):\n"
        "        self.file = open(layout.root / 'lines.jsonl', 'a')\n"
        "    def log(self, metrics, step):\n"
        "        self.file.write(json.dumps({'step': step, **metrics}) + '\\n')\n"
        "    def close(self):\n"
        "        self.file.close()\n")
    done = train(tmp_path / "own", 'logging.report_to=["mytracker:Lines"]', path=tmp_path)
    missing = train(tmp_path / "missing", 'logging.report_to=["nowhere:Lines"]')
    assert done.returncode == 0, done.stderr[-3000:]
    lines = m.read_records(tmp_path / "own" / "lines.jsonl")
    assert [r["step"] for r in lines] == [1, 2] and all("loss" in r for r in lines)
    assert missing.returncode == 2
    assert "error: logging.report_to 'nowhere:Lines': No module named 'nowhere'" in \
        missing.stderr
    with pytest.raises(ConfigError, match="unknown tracker 'tensorbord'"):
        load_config(TINY, ['logging.report_to=["tensorbord"]'])


def test_where_to_look_names_each_trackers_place(tmp_path: Path) -> None:
    config = load_config(TINY, ['logging.report_to=["tensorboard", "wandb", "mlflow"]'])
    lines = where_to_look(config, RunLayout(tmp_path / "r"))
    assert lines == [
        f"tensorboard --logdir {tmp_path / 'r' / 'tensorboard'}",
        f"wandb (offline): {tmp_path / 'r' / 'wandb'}; from a login node: wandb sync "
        f"{tmp_path / 'r' / 'wandb'}/offline-run-*",
        f"mlflow ui --backend-store-uri {(tmp_path / 'r' / 'mlruns').as_uri()}"]
