#!/usr/bin/env python3
"""`make gpu-smoke`: an operator's first look at a GPU node, one line per check.

    cuda      torch sees the GPUs (count, name, memory)
    zero      one bf16 ZeRO-2 RL step of the project's tiny model (`train`), on the GPU
    generate  the step's generation and `hargo eval`'s answers ran on the GPU (CUDA memory used)
    nccl      a 2-rank all-reduce over NCCL (torchrun, two GPUs; skipped with one)

Each line is `ok`, `FAIL` or `skip`, the check and what it saw; the exit status is 1 when
any check failed. Where torch sees no GPU it prints one plain line and exits 0. `--cpu` runs
the same train and eval checks on the CPU (the suite uses it to keep this script working on
machines without a GPU; nothing then says anything about a GPU).

Usage: scripts/gpu_smoke.py [--cpu]
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
JOB = REPO / "jobs" / "tiny.toml"
NCCL_RANK = "--nccl-rank"  # the torchrun worker's flag (the all-reduce check)


def say(status: str, check: str, detail: str) -> None:
    print(f"{status:<5} {check:<9} {detail}", flush=True)


def timed(check: str, run: Callable[[], str]) -> bool:
    started = time.monotonic()
    try:
        detail = run()
    except Exception as err:  # every failure is one line, whatever raised it
        say("FAIL", check, f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}")
        return False
    say("ok", check, f"{detail} ({time.monotonic() - started:.1f} s)")
    return True


def cuda_line() -> str:
    import torch

    names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    memory = torch.cuda.get_device_properties(0).total_memory / 2**30
    return (f"{len(names)} GPU(s): {', '.join(sorted(set(names)))}, {memory:.0f} GiB each; "
            f"torch {torch.__version__}, CUDA {torch.version.cuda}")


def train_and_eval(work: Path, device: str) -> tuple[Callable[[], str], Callable[[], str]]:
    """The `zero` and `generate` checks: one RL step of the tiny model (ZeRO-2, bf16 on a
    GPU), then `hargo eval` of its export on 4 held-out examples of one task."""
    import torch

    from hargo_hpc.config import load_config
    from hargo_hpc.eval.evaluate import evaluate, resolve_target
    from hargo_hpc.train.loop import train

    gpu = device == "cuda"
    config = load_config(JOB, [
        f"run.dir={work}", "run.name=smoke", "training.steps=1", "training.save_every=0",
        "training.zero_stage=2", f"training.precision={'bf16' if gpu else 'fp32'}",
        'data.tasks=[{name="data_race_c"}]', "rollout.max_new_tokens=16"])
    quiet = lambda _line: None  # noqa: E731

    def zero() -> str:
        if gpu:
            torch.cuda.reset_peak_memory_stats()
        result = train(config, log=quiet, progress=False)
        used = torch.cuda.max_memory_allocated() / 2**20 if gpu else 0.0
        if gpu and used <= 0:
            raise RuntimeError("the step allocated no CUDA memory: it ran on the CPU")
        return (f"1 step, ZeRO-2 {config.training.precision}, export {result.export.name}/"
                + (f", peak {used:.0f} MiB on the GPU" if gpu else ", on the CPU (--cpu)"))

    def generate() -> str:
        run_dir = config.run_dir()
        if gpu:
            torch.cuda.reset_peak_memory_stats()
        metrics = evaluate(resolve_target(str(run_dir)), limit=4, baseline="", log=quiet)
        used = torch.cuda.max_memory_allocated() / 2**20 if gpu else 0.0
        if gpu and used <= 0:
            raise RuntimeError("hargo eval allocated no CUDA memory: it answered on the CPU")
        n = metrics["tasks"]["data_race_c"]["n"]
        return (f"hargo eval answered {n} held-out prompts"
                + (f", peak {used:.0f} MiB on the GPU" if gpu else " on the CPU (--cpu)"))

    return zero, generate


def nccl_line() -> str:
    """Two ranks under torchrun, each on its own GPU, all-reduce their rank + 1."""
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
         "--standalone", __file__, NCCL_RANK],
        capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        lines = [ln for ln in (done.stderr or done.stdout).splitlines() if ln.strip()]
        raise RuntimeError(lines[-1] if lines else f"torchrun exited {done.returncode}")
    return done.stdout.strip().splitlines()[-1]


def nccl_rank() -> int:
    import torch
    import torch.distributed as dist

    rank = int(os.environ["RANK"])
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl")
    value = torch.tensor([rank + 1.0], device="cuda")
    dist.all_reduce(value)
    if rank == 0:
        print(f"2 ranks over NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}: "
              f"all-reduce gave {value.item():g} (expected 3)")
    ok = value.item() == 3.0
    dist.destroy_process_group()
    return 0 if ok else 1


def main(argv: list[str]) -> int:
    if argv == [NCCL_RANK]:
        return nccl_rank()
    if argv not in ([], ["--cpu"]):
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    if argv == ["--cpu"]:
        os.environ["DS_ACCELERATOR"] = "cpu"  # said, so DeepSpeed need not warn on stdout
    import torch
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # one line per check, not the loaders' bars
    on_cpu = argv == ["--cpu"]
    if not on_cpu and not torch.cuda.is_available():
        print("no GPU here (torch.cuda.is_available() is False): nothing to check")
        return 0
    results = []
    if not on_cpu:
        results.append(timed("cuda", cuda_line))
    with tempfile.TemporaryDirectory(prefix="hargo-gpu-smoke-") as work:
        zero, generate = train_and_eval(Path(work), "cpu" if on_cpu else "cuda")
        trained = timed("zero", zero)
        results.append(trained)
        if trained:
            results.append(timed("generate", generate))
        else:
            say("skip", "generate", "no export to evaluate (the zero check failed)")
    if on_cpu:
        say("skip", "nccl", "--cpu")
    elif torch.cuda.device_count() < 2:
        say("skip", "nccl", "one GPU: a 2-rank all-reduce needs two")
    else:
        results.append(timed("nccl", nccl_line))
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
