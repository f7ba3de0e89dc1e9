"""scripts/gpu_smoke.py (`make gpu-smoke`): a plain line where there is no GPU, and its train
and eval checks kept working through the same code on the CPU (`--cpu`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "gpu_smoke.py"


def smoke(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=600, env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})


def test_without_a_gpu_it_says_so_and_succeeds() -> None:
    done = smoke()  # no device visible, whatever the machine has
    assert done.returncode == 0, done.stderr
    assert done.stdout == ("no GPU here (torch.cuda.is_available() is False): "
                           "nothing to check\n")


@pytest.mark.slow
def test_the_train_and_eval_checks_run_through_on_the_cpu() -> None:
    done = smoke("--cpu")
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert [line.split()[:2] for line in lines] == [["ok", "zero"], ["ok", "generate"],
                                                    ["skip", "nccl"]], lines
    assert "ZeRO-2 fp32" in lines[0] and "answered 4 held-out prompts" in lines[1]


def test_a_bad_argument_is_refused() -> None:
    done = smoke("--gpu")
    assert done.returncode == 2 and "Usage: scripts/gpu_smoke.py [--cpu]" in done.stderr
    assert torch  # the suite's interpreter has torch (the script imports it lazily)
