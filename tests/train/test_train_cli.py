"""`hargo train`: the shipped jobs/tiny.toml end to end (progress lines, metrics, checkpoint, an
HF export transformers loads), and bad input as one `error:` line with exit 2, nothing
overwritten."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner, Result
from waiting import wait_until

from hargo_hpc.cli import main
from hargo_hpc.train import metrics as m
from hargo_hpc.train.backend.distributed import STANDARD

torch.set_num_threads(1)
REPO = Path(__file__).resolve().parents[2]
HARGO = str(Path(sys.executable).parent / "hargo")
TINY = REPO / "jobs" / "tiny.toml"


def invoke(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, float]:
    """`hargo train jobs/tiny.toml run.dir=<tmp>` as a user runs it: (run dir, stdout, s)."""
    runs = tmp_path_factory.mktemp("runs")
    # not this process's rendezvous variables: its in-process engines exported them
    env = {k: v for k, v in os.environ.items() if k not in STANDARD}
    env["OMP_NUM_THREADS"] = "1"
    start = time.monotonic()
    done = subprocess.run([HARGO, "train", str(TINY), f"run.dir={runs}"], capture_output=True,
                          text=True, timeout=300, env=env, cwd=REPO)
    seconds = time.monotonic() - start
    assert done.returncode == 0, done.stderr[-3000:]
    return runs / "tiny", done.stdout, seconds


def test_tiny_job_trains_end_to_end(tiny_run: tuple[Path, str, float],
                                    summary_line: Callable[[str], None]) -> None:
    run_dir, out, seconds = tiny_run
    summary_line(f"hargo train jobs/tiny.toml: {seconds:.1f} s")
    assert seconds < 120  # "well under two minutes": about 15 s on 2 idle cores
    lines = out.splitlines()
    steps = [line for line in lines if line.startswith("step ")]
    assert [line.split()[1] for line in steps] == [f"{i}/8" for i in range(1, 9)]
    assert all(" reward " in line and " kl " in line and line.endswith(" s") for line in steps)
    assert lines[-3:] == [f"metrics: {run_dir / 'metrics.jsonl'}",
                          f"checkpoint: {run_dir / 'checkpoints' / 'step_000008'}",
                          f"export: {run_dir / 'export'}"]
    records = m.read_records(run_dir / "metrics.jsonl")
    assert [r["step"] for r in records] == list(range(1, 9))
    assert {r["step"] for r in records} and all(set(m.STEP_KEYS) <= r.keys() for r in records)
    assert (run_dir / "checkpoints" / "latest").read_text() == "step_000008"
    assert (run_dir / "checkpoints" / "step_000004").is_dir()  # save_every = 4
    assert (run_dir / "deepspeed_config.json").is_file() and (run_dir / "config.toml").is_file()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(run_dir / "export")
    tokenizer = AutoTokenizer.from_pretrained(run_dir / "export")
    ids = tokenizer("Does the following code contain a data race?", return_tensors="pt")
    out_ids = model.generate(**ids, max_new_tokens=4, do_sample=False)
    assert out_ids.shape[1] == ids["input_ids"].shape[1] + 4 or tokenizer.eos_token_id in \
        out_ids[0].tolist()


def test_a_finished_run_dir_is_refused_and_left_alone(tiny_run: tuple[Path, str, float]) -> None:
    run_dir = tiny_run[0]
    before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    done = invoke("train", str(TINY), f"run.dir={run_dir.parent}")
    assert done.exit_code == 2
    assert done.stderr.startswith(f"error: run directory {run_dir} holds a finished run")
    assert len(done.stderr.splitlines()) == 1
    mismatch = invoke("train", str(TINY), f"run.dir={run_dir.parent}", "training.lr=3e-4",
                      "--resume")
    assert mismatch.exit_code == 2
    assert mismatch.stderr.startswith("error: refusing to resume: ")
    assert len(mismatch.stderr.splitlines()) == 1
    again = invoke("train", str(TINY), f"run.dir={run_dir.parent}", "--resume")
    assert again.exit_code == 0, again.stderr
    assert f"run {run_dir} finished already at step 8" in again.stdout
    assert before == {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}


@pytest.mark.parametrize(("overrides", "message"), [
    (["model.path=/nowhere/model"], "error: model path /nowhere/model: no such directory"),
    (["training.micro_batch_size=5"], "error: rollout.prompts_per_step x "
                                      "rollout.num_generations = 16 rows"),
    (["rollout.num_generations=1", "rollout.prompts_per_step=8"],
     "error: algorithm hargo: estimator 'grpo' compares"),
    (["training.lr=fast"], "error: "),
])
def test_bad_input_exits_2_with_one_line(tmp_path: Path, overrides: list[str],
                                         message: str) -> None:
    done = invoke("train", str(TINY), f"run.dir={tmp_path}", *overrides)
    assert done.exit_code == 2, done.output
    assert done.stderr.startswith(message), done.stderr
    assert len(done.stderr.splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


SIGNALLED = """
[run]
name = "sig"
dir = "{dir}"
[model]
path = "tiny"
[[data.tasks]]
name = "mlperf_qa"
max_items = 8
[rollout]
num_generations = 2
prompts_per_step = 2
max_new_tokens = 8
[training]
lr = 1e-3
steps = 12
micro_batch_size = 4
"""


def _stop_with(sig: signal.Signals, args: list[str], env: dict[str, str], metrics: Path,
               after: int) -> tuple[int, str, str]:
    """Start `hargo train ARGS`, send `sig` once metrics.jsonl has `after` records; returns
    (exit code, stdout, stderr)."""
    proc = subprocess.Popen([HARGO, "train", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    def written() -> bool:
        if proc.poll() is not None:
            pytest.fail(f"hargo train ended before {after} records: {proc.stderr.read()}")
        return metrics.is_file() and metrics.read_text().count("\n") >= after

    wait_until(written, 120, f"{after} records in {metrics}", poll=0.005)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=120)
    return proc.returncode, out, err


def test_stop_signals_checkpoint_and_exit_75_then_resume_finishes(tmp_path: Path) -> None:
    """SIGUSR1 stops a run after a checkpoint (exit 75); SIGTERM stops its resumed run the
    same way; a second --resume finishes: every step logged once."""
    job = tmp_path / "sig.toml"
    job.write_text(SIGNALLED.format(dir=tmp_path))
    env = {k: v for k, v in os.environ.items() if k not in STANDARD}
    env["OMP_NUM_THREADS"] = "1"
    metrics = tmp_path / "sig" / "metrics.jsonl"
    stopped = 0
    for sig, args in ((signal.SIGUSR1, [str(job)]), (signal.SIGTERM, [str(job), "--resume"])):
        code, out, err = _stop_with(sig, args, env, metrics, stopped + 1)
        assert code == 75, err[-2000:]
        found = re.search(r"stopped at step (\d+); continue with: hargo train (\S+) --resume",
                          out)
        assert found and found.group(2) == str(job)
        assert stopped < int(found.group(1)) < 12
        if stopped:
            assert out.startswith(f"step {stopped + 1}/12 ")  # continued where it stopped
        stopped = int(found.group(1))
        # after a step's update, or (a signal during the next generation) with that step in
        # flight: either way the checkpoint holds the steps done
        assert re.search(rf"{sig.name}: (stopped in step \d+; )?checkpoint ", err), err[-2000:]
        latest = tmp_path / "sig" / "checkpoints" / "latest"
        assert latest.read_text() == f"step_{stopped:06d}"
        assert [r["step"] for r in m.read_records(metrics)] == list(range(1, stopped + 1))
        assert not (tmp_path / "sig" / "finished.json").exists()
    done = subprocess.run([HARGO, "train", str(job), "--resume"], capture_output=True,
                          text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith(f"step {stopped + 1}/12 ")
    assert [r["step"] for r in m.read_records(metrics)] == list(range(1, 13))
