"""`hargo train` under two ranks (torchrun, gloo on CPU), ZeRO-2 and ZeRO-3: after two HARGO
steps the parameters are the same on both ranks and equal to a one-process run of the same
global batch (the same prompts, the same completions through `GenerationDouble`), and rank 0's
metrics and rollouts describe the whole batch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

from hargo_hpc.train import loop
from hargo_hpc.train import metrics as m
from hargo_hpc.train.distributed import STANDARD
from hargo_hpc.train.models import tiny_dir

from ._two_rank_train import GenerationDouble, config

torch.set_num_threads(1)
STAGES = (2, 3)
SAME = ("rewards/scored", "rows/in_loss", "completions/mean_length", "num_tokens",
        "optimizer_steps")
CLOSE = ("reward", "reward_std", "loss", "pg_loss", "kl", "entropy", "grad_norm",
         "hargo/contrast_ref", "hargo/weight_mean", "advantages/abs_mean")


LR, STEPS = 1e-3, 2


def assert_same_update(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor],
                       before: dict[str, torch.Tensor], stage: int) -> None:
    """The two-rank update equals the one-process one within float tolerance: summed in
    another order, the gradients differ by rounding, which Adam (m / (sqrt(v) + eps)) turns
    into visible differences only in the few elements whose gradient is itself rounding-sized
    (at most 2·lr per step). So: ||Δgot − Δwant|| ≤ 1 % of ||Δwant|| over all parameters,
    99.9 % of the elements within 1e-5, none further than 2·lr·steps."""
    diff = torch.cat([(got[k] - want[k]).flatten().double() for k in want])
    moved = torch.cat([(want[k] - before[k]).flatten().double() for k in want])
    assert moved.norm() > 0.1 * LR  # the steps trained
    assert diff.norm() <= 1e-2 * moved.norm(), (stage, float(diff.norm()), float(moved.norm()))
    assert float((diff.abs() <= 1e-5).double().mean()) >= 0.999, stage
    assert float(diff.abs().max()) <= 2 * LR * STEPS, stage


def one_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> loop.TrainResult:
    # the environment as it is: WORLD_SIZE unset, or 1 after an earlier in-process engine
    monkeypatch.setattr(loop, "HFGenerateBackend", GenerationDouble)
    return loop.train(config(tmp_path, "one", 2), log=lambda _: None, progress=False)


def test_two_ranks_train_like_one_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          summary_line: Any, repo_root: Path) -> None:
    single = one_process(tmp_path, monkeypatch)  # also builds the tiny model's cache first
    want = load_file(single.export / "model.safetensors")
    want_records = m.read_records(single.metrics)

    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(repo_root)}
    for name in STANDARD:
        env.pop(name, None)
    script = Path(__file__).with_name("_two_rank_train.py")
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
         str(script), str(tmp_path), *map(str, STAGES)],
        capture_output=True, text=True, timeout=300, env=env,
    )
    elapsed = time.monotonic() - started
    assert done.returncode == 0, done.stderr[-3000:]
    summary_line(f"hargo train under two ranks, ZeRO-2 and ZeRO-3, 2 HARGO steps: "
                 f"{elapsed:.1f} s")

    before = load_file(tiny_dir() / "model.safetensors")
    for stage in STAGES:
        ranks = [torch.load(tmp_path / f"stage{stage}_rank{r}.pt") for r in (0, 1)]
        assert ranks[0].keys() == ranks[1].keys()
        for name, value in ranks[0].items():
            assert torch.equal(value, ranks[1][name]), (stage, name)
        run_dir = tmp_path / f"two_ranks_z{stage}"
        got = load_file(run_dir / "export" / "model.safetensors")
        assert got.keys() == want.keys() == before.keys()
        for name, value in got.items():
            assert torch.equal(value, ranks[0][name]), (stage, name)  # rank 0 exported these
        assert_same_update(got, want, before, stage)

        records = m.read_records(run_dir / "metrics.jsonl")
        assert [r["step"] for r in records] == [1, 2]
        for got_r, want_r in zip(records, want_records, strict=True):
            assert got_r["rewards/scored"] == 8
            for key in SAME:
                assert got_r[key] == want_r[key], (stage, key)
            for key in CLOSE:
                assert got_r[key] == pytest.approx(want_r[key], rel=1e-3, abs=1e-6), (stage, key)
        rollouts = [json.loads(line) for line in
                    (run_dir / "rollouts" / "step_000002.jsonl").read_text().splitlines()]
        assert [r["completion"] for r in rollouts] == [
            r["completion"] for r in (json.loads(line) for line in (
                tmp_path / "one" / "rollouts" / "step_000002.jsonl").read_text().splitlines())]
        assert [r["group"] for r in rollouts] == [0, 0, 1, 1, 2, 2, 3, 3]
        assert (run_dir / "finished.json").is_file()


def test_several_ranks_refuse_what_does_not_work_yet(tmp_path: Path) -> None:
    with pytest.raises(loop.TrainError, match="2 ranks: the sft preset") as refused:
        loop.resolve(config(tmp_path, "sft", 2, "sft"), world_size=2)
    assert "\n" not in str(refused.value)
    assert loop.resolve(config(tmp_path, "ok", 2), world_size=2)[1] == 2  # 4 rows / 2 per micro
