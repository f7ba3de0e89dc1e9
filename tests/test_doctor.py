"""`hargo doctor gpu`: where no GPU is visible it fails at its first check and skips what needs
it; with `--cpu` the same training, evaluation and all-reduce path runs through on the CPU."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from hargo_hpc.doctor import Check, Skip, run_checks
from hargo_hpc.train.backend.distributed import STANDARD


def doctor(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in STANDARD and not k.startswith("SLURM")}
    env.update(CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1")  # no device, whatever the machine
    return subprocess.run([sys.executable, "-m", "hargo_hpc", "doctor", "gpu", *args],
                          capture_output=True, text=True, timeout=900, env=env)


def test_without_a_gpu_it_fails_in_one_line_and_skips_what_needs_one() -> None:
    done = doctor()
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert [line.split()[:2] for line in lines] == [
        ["FAIL", "cuda"], ["skip", "nccl"], ["skip", "bf16"], ["skip", "ranks"],
        ["skip", "zero2"], ["skip", "zero3"], ["skip", "eval"], ["skip", "all-reduce"]], lines
    assert "sees no GPU" in lines[0]


@pytest.mark.slow
def test_the_cpu_path_trains_evaluates_and_all_reduces() -> None:
    done = doctor("--cpu")
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert [line.split()[:2] for line in lines] == [
        ["skip", "cuda"], ["skip", "nccl"], ["skip", "bf16"], ["ok", "ranks"], ["ok", "zero2"],
        ["ok", "zero3"], ["ok", "eval"], ["ok", "all-reduce"]], lines
    assert "rank 0 of 1 (single)" in lines[3]
    assert "ZeRO-2 fp32" in lines[4] and "ZeRO-3 fp32" in lines[5]
    assert "answered 4 held-out prompts" in lines[6]
    assert "2 ranks over gloo: all-reduce gave 3 (expected 3)" in lines[7]


def test_a_failure_is_one_line_and_what_needs_it_is_skipped() -> None:
    def broken() -> str:
        raise ValueError("first line\nsecond line")

    def not_here() -> str:
        raise Skip("not on this machine")

    said: list[str] = []
    ok = run_checks([Check("cuda", broken), Check("nccl", lambda: "fine"),
                     Check("ranks", not_here), Check("eval", lambda: "fine")], said.append)
    assert not ok
    assert said[0].split() == ["FAIL", "cuda", "ValueError:", "first", "line"]
    assert said[1].split()[:2] == ["skip", "nccl"] and "needs cuda" in said[1]
    assert said[2].split()[:2] == ["skip", "ranks"]
    assert said[3].split()[:3] == ["ok", "eval", "fine"]
    assert run_checks([Check("eval", lambda: "fine")], said.append)


def test_a_bad_argument_is_refused() -> None:
    done = subprocess.run([sys.executable, "-m", "hargo_hpc", "doctor", "gpu", "--gpu"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "No such option '--gpu'" in done.stderr


@pytest.mark.slurm
def test_in_every_task_of_a_step_it_checks_the_ranks_across_the_tasks(
        slurm_cluster: dict[str, str]) -> None:
    env = {k: v for k, v in os.environ.items() if k not in STANDARD and not k.startswith("SLURM")}
    env.update(slurm_cluster, CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1")
    done = subprocess.run(
        ["srun", "-p", "cpu", "-n", "2", "-c", "1", "--time=5", "--label", sys.executable, "-m",
         "hargo_hpc", "doctor", "gpu", "--cpu"],
        capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    by_task: dict[str, list[str]] = {"0": [], "1": []}
    for line in done.stdout.splitlines():
        task, _, said = line.partition(": ")
        by_task[task.strip()].append(said)
    for task, lines in by_task.items():
        assert [line.split()[:2] for line in lines] == [
            ["skip", "cuda"], ["skip", "nccl"], ["skip", "bf16"], ["ok", "ranks"],
            ["skip", "zero2"], ["ok", "all-reduce"]], (task, lines)
        assert f"rank {task} of 2 (slurm)" in lines[3]
        assert "2 ranks over gloo: all-reduce gave 3 (expected 3)" in lines[5]


SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


@pytest.mark.slow
def test_the_gpu_check_script_runs_its_path_on_the_cpu(tmp_path: Path) -> None:
    """scripts/gpu_check.py --cpu: random weights of the model's shape, a GRPO step under ZeRO-2
    and ZeRO-3 with the plan's estimate beside it, generation throughput, ZeRO-3 generation
    gathered and by hooks; each part one line, exit 0."""
    from hargo_hpc.train.model.models import tiny_dir

    shape = tiny_dir(tmp_path / "cache")
    env = {k: v for k, v in os.environ.items() if k not in STANDARD and not k.startswith("SLURM")}
    env.update(CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1")
    done = subprocess.run([sys.executable, str(SCRIPTS / "gpu_check.py"), "--model", str(shape),
                           "--cpu"], capture_output=True, text=True, timeout=900, env=env)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    lines = [line for line in done.stdout.splitlines() if not line.startswith("[")]  # logs
    assert [line.split()[:2] for line in lines] == [
        ["grpo", "step"], ["grpo", "step"], ["generate", "8"], ["generate", "16"],
        ["zero3", "gen"], ["zero3", "gen"]], lines
    assert "ZeRO-2 fp32" in lines[0] and "ZeRO-3 fp32" in lines[1] and "estimate" in lines[0]
    assert "gathered" in lines[4] and "hooks" in lines[5]


def test_the_gpu_check_says_what_to_prepare_first(tmp_path: Path) -> None:
    """Without .gpu_check/ (a fresh clone) the device script says how to prepare it."""
    copy = tmp_path / "repo"
    (copy / "scripts").mkdir(parents=True)
    (copy / "scripts" / "gpu_check.sh").write_bytes((SCRIPTS / "gpu_check.sh").read_bytes())
    done = subprocess.run(["bash", str(copy / "scripts" / "gpu_check.sh")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip() == ("error: no .gpu_check/wheels: run scripts/gpu_check.sh "
                                   "prepare first (with network)")
    bad = subprocess.run(["bash", str(copy / "scripts" / "gpu_check.sh"), "nonsense"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "usage: scripts/gpu_check.sh [prepare|run]" in bad.stderr
