"""`hargo doctor gpu`: a GPU node's first check, in the Python the user already has.

`gpu_checks(cpu=...)` lists the checks (CUDA and driver, NCCL, bf16, where each rank of this
allocation lands, a bf16 ZeRO-2 and a ZeRO-3 RL step of the tiny model, `hargo eval` of its
export, an all-reduce across the allocation's GPUs); `run_checks` runs them in order, one line
each, and says whether all passed. `cpu=True` runs the same path on the CPU (gloo, fp32), so a
machine without a GPU keeps it working. docs/cluster.md, "1. First run on a GPU node".
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hargo_hpc.errors import HargoError
from hargo_hpc.examples import example_jobs

ALL_REDUCE_FLAG = "--all-reduce-rank"  # how `run_all_reduce` starts each rank of its check


class Skip(HargoError):
    """Raised by a check that does not apply here; its message says why."""


@dataclass(frozen=True)
class Check:
    name: str
    run: Callable[[], str]  # returns what it saw; raises Skip, or anything for a failure


def say(status: str, name: str, detail: str, out: Callable[[str], object] = print) -> None:
    out(f"{status:<5} {name:<10} {detail}")


def run_checks(checks: list[Check], out: Callable[[str], object] = print) -> bool:
    """Each check in turn, one line each (`ok`, `FAIL` or `skip`, with what it saw and how
    long it took); a check that needs one that failed is skipped. True when none failed."""
    failed: set[str] = set()
    for check in checks:
        needs = NEEDS.get(check.name, ())
        if failed & set(needs):
            say("skip", check.name, f"needs {', '.join(sorted(failed & set(needs)))}", out)
            failed.add(check.name)
            continue
        started = time.monotonic()
        try:
            detail = check.run()
        except Skip as why:
            say("skip", check.name, str(why), out)
            continue
        except Exception as err:  # every failure is one line, whatever raised it
            first = str(err).strip().splitlines()[0] if str(err).strip() else ""
            say("FAIL", check.name, f"{type(err).__name__}: {first}", out)
            failed.add(check.name)
            continue
        say("ok", check.name, f"{detail} ({time.monotonic() - started:.1f} s)", out)
    return not failed


NEEDS = {"nccl": ("cuda",), "bf16": ("cuda",), "ranks": ("cuda",), "zero2": ("cuda", "bf16"),
         "zero3": ("cuda", "bf16"), "eval": ("zero2",), "all-reduce": ("cuda", "ranks")}


# ---------------------------------------------------------------- the device


def cuda_check() -> str:
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError(f"torch {torch.__version__} (CUDA {torch.version.cuda}) sees no GPU: "
                           "a CPU-only torch, no driver, or CUDA_VISIBLE_DEVICES empty")
    names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    memory = torch.cuda.get_device_properties(0).total_memory / 2**30
    return (f"{len(names)} GPU(s): {', '.join(sorted(set(names)))}, {memory:.0f} GiB each; "
            f"torch {torch.__version__}, CUDA {torch.version.cuda}, driver {driver_version()}")


def driver_version() -> str:
    """The NVIDIA driver's version as nvidia-smi reports it ("unknown" without nvidia-smi)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return "unknown (no nvidia-smi on PATH)"
    done = subprocess.run([smi, "--query-gpu=driver_version", "--format=csv,noheader"],
                          capture_output=True, text=True, timeout=60)
    lines = done.stdout.strip().splitlines()
    return lines[0].strip() if done.returncode == 0 and lines else "unknown (nvidia-smi failed)"


def nccl_check() -> str:
    import torch

    version = torch.cuda.nccl.version()
    shown = ".".join(map(str, version)) if isinstance(version, tuple) else str(version)
    return f"NCCL {shown} (torch's own; a site plugin is loaded by NCCL at run time)"


def bf16_check() -> str:
    import torch

    if not torch.cuda.is_bf16_supported():
        raise RuntimeError(f"{torch.cuda.get_device_name(0)} has no bf16: set "
                           "training.precision = \"fp16\" and model.dtype = \"float16\"")
    x = torch.ones(64, 64, device="cuda", dtype=torch.bfloat16)
    if float((x @ x)[0, 0]) != 64.0:
        raise RuntimeError("a bf16 matmul on the GPU gave a wrong result")
    return "bf16 supported; a bf16 matmul on the GPU is exact"


def ranks_check(cpu: bool) -> str:
    """Where this process would train: its rank (Slurm's, torchrun's or one process) and the
    device its local rank maps to among the devices Slurm's binding left it."""
    from hargo_hpc.train.backend import distributed

    env = distributed.detect()
    visible = 0 if cpu else distributed.visible_devices()
    device = distributed.device_index(env.local_rank, visible)
    if not cpu and device >= visible:
        raise RuntimeError(f"local rank {env.local_rank} maps to device {device} of {visible}")
    where = "the CPU" if cpu else f"cuda:{device} of {visible} visible"
    return (f"rank {env.rank} of {env.world_size} ({env.source}), local rank "
            f"{env.local_rank} -> {where}")


# ---------------------------------------------------------------- training and evaluation


def tiny_job() -> Path:
    job = next(item for item in example_jobs() if item.name == "tiny.toml")
    return Path(str(job))


def train_checks(work: Path, cpu: bool) -> list[Check]:
    """One RL step of the tiny model under ZeRO-2 and under ZeRO-3 (bf16 on a GPU, fp32 with
    `cpu`), then `hargo eval` of the ZeRO-2 run's export on 4 held-out examples."""
    import torch

    from hargo_hpc.config import load_config
    from hargo_hpc.eval.evaluate import evaluate, resolve_target
    from hargo_hpc.train.loop import train

    precision, dtype = ("fp32", "float32") if cpu else ("bf16", "bfloat16")

    def config(stage: int) -> Any:
        return load_config(tiny_job(), [
            f"run.dir={work}", f"run.name=zero{stage}", "training.steps=1",
            "training.save_every=0", f"training.zero_stage={stage}",
            f"training.precision={precision}", f"model.dtype={dtype}",
            'data.tasks=[{name="data_race_c"}]', "rollout.max_new_tokens=16",
            f"model.cache_dir={work / 'models'}"])

    def peak_mib() -> float:
        return 0.0 if cpu else torch.cuda.max_memory_allocated() / 2**20

    def on_device(what: str) -> str:
        used = peak_mib()
        if not cpu and used <= 0:
            raise RuntimeError(f"{what} allocated no GPU memory: it ran on the CPU")
        return f"peak {used:.0f} MiB on the GPU" if not cpu else "on the CPU (--cpu)"

    def step(stage: int) -> Callable[[], str]:
        def run() -> str:
            if not cpu:
                torch.cuda.reset_peak_memory_stats()
            result = train(config(stage), log=lambda _line: None, progress=False)
            return (f"1 RL step (generation, reward, update), ZeRO-{stage} {precision}, "
                    f"export {result.export.name}/, {on_device('the step')}")
        return run

    def evaluation() -> str:
        if not cpu:
            torch.cuda.reset_peak_memory_stats()
        metrics = evaluate(resolve_target(str(config(2).run_dir())), limit=4, baseline="",
                           log=lambda _line: None)
        n = metrics["tasks"]["data_race_c"]["n"]
        return f"hargo eval answered {n} held-out prompts, {on_device('hargo eval')}"

    return [Check("zero2", step(2)), Check("zero3", step(3)), Check("eval", evaluation)]


# ---------------------------------------------------------------- all-reduce


def all_reduce_check(cpu: bool) -> str:
    """Inside a multi-task step: every task all-reduces its rank + 1 over the job's group.
    Alone: the visible GPUs (two processes on the CPU) under torchrun do the same."""
    from hargo_hpc.train.backend import distributed

    env = distributed.detect()
    if env.world_size > 1:
        return all_reduce_rank(cpu)
    ranks = 2 if cpu else distributed.visible_devices()
    if ranks < 2:
        raise Skip("one GPU: an all-reduce needs two (ask for two, or run under srun -n 2)")
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={ranks}",
         "--standalone", "-m", "hargo_hpc.doctor", ALL_REDUCE_FLAG, "cpu" if cpu else "gpu"],
        capture_output=True, text=True, timeout=600,
        env={**os.environ, "OMP_NUM_THREADS": "1"})
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    if done.returncode != 0:
        raise RuntimeError(lines[-1] if lines else f"torchrun exited {done.returncode}")
    return next(line for line in done.stdout.splitlines() if "all-reduce" in line)


def all_reduce_rank(cpu: bool) -> str:
    """This rank's part: the group (NCCL, gloo with `cpu`), one all-reduce, checked."""
    import torch

    from hargo_hpc.train.backend import distributed

    env = distributed.detect()
    created = not torch.distributed.is_initialized()
    if created:
        if cpu:
            env.export(visible=0)
            torch.distributed.init_process_group("gloo", rank=env.rank,
                                                 world_size=env.world_size)
        else:
            distributed.init(env, backend="nccl")
    try:
        device = "cpu" if cpu else f"cuda:{torch.cuda.current_device()}"
        value = torch.tensor([env.rank + 1.0], device=device)
        torch.distributed.all_reduce(value)
        want = env.world_size * (env.world_size + 1) / 2
        if float(value.item()) != want:
            raise RuntimeError(f"all-reduce gave {value.item():g}, expected {want:g}")
        backend = torch.distributed.get_backend()
        return (f"{env.world_size} ranks over {backend}: all-reduce gave {value.item():g} "
                f"(expected {want:g})")
    finally:
        if created:
            torch.distributed.destroy_process_group()


# ---------------------------------------------------------------- the list


def gpu_checks(work: Path, cpu: bool = False) -> list[Check]:
    """Every check of `hargo doctor gpu`, in order; `cpu` skips the CUDA ones and runs the
    rest on the CPU."""
    from hargo_hpc.train.backend import distributed

    def skipped() -> str:
        raise Skip("--cpu")

    device: list[Check] = ([Check("cuda", skipped), Check("nccl", skipped),
                            Check("bf16", skipped)] if cpu else
                           [Check("cuda", cuda_check), Check("nccl", nccl_check),
                            Check("bf16", bf16_check)])
    checks = [*device, Check("ranks", lambda: ranks_check(cpu))]
    if distributed.detect().world_size == 1:
        checks += train_checks(work, cpu)
    else:  # every task of the step runs this; training is checked once, alone
        checks.append(Check("zero2", alone_only))
    checks.append(Check("all-reduce", lambda: all_reduce_check(cpu)))
    return checks


def alone_only() -> str:
    raise Skip("inside a multi-task step: run it once with one task for the training checks")


def doctor_gpu(cpu: bool = False, out: Callable[[str], object] = print) -> bool:
    """Run every check in a temporary directory (removed after); True when none failed."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    if cpu:
        os.environ["DS_ACCELERATOR"] = "cpu"  # said, so DeepSpeed need not probe and warn
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # one line per check, not the loaders' bars
    warnings.filterwarnings("ignore", category=FutureWarning)  # DeepSpeed's calls into torch
    with tempfile.TemporaryDirectory(prefix="hargo-doctor-") as work:
        return run_checks(gpu_checks(Path(work), cpu), out)


def _rank_main(argv: list[str]) -> int:
    """One rank of `all_reduce_check`'s torchrun: rank 0 prints the line; a failure raises."""
    if len(argv) != 2 or argv[0] != ALL_REDUCE_FLAG or argv[1] not in ("cpu", "gpu"):
        print(f"usage: python -m hargo_hpc.doctor {ALL_REDUCE_FLAG} cpu|gpu", file=sys.stderr)
        return 2
    line = all_reduce_rank(argv[1] == "cpu")
    if os.environ.get("RANK") == "0":
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(_rank_main(sys.argv[1:]))
