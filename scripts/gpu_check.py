"""The GPU part of scripts/gpu_check.sh: SmolLM2-135M's shape with random bf16 weights, one bf16
GRPO step under ZeRO-2 and ZeRO-3 (time, peak GPU memory against `hargo config check`'s
estimate), generation throughput at 64 to 256 rows, and ZeRO-3 generation with and without the
parameters gathered once around the call. `--cpu` runs the same path small on the CPU (fp32), so
it is kept working where no GPU is.

Run: python3 scripts/gpu_check.py --model .gpu_check/smollm2 [--cpu]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import torch

from hargo_hpc.config import load_config
from hargo_hpc.examples import example_jobs


def random_model(shape_dir: Path, out: Path, dtype: torch.dtype) -> Path:
    """`shape_dir`'s config and tokenizer with random weights (seed 0) in `dtype`, saved."""
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(shape_dir), dtype=dtype)
    model.save_pretrained(out)
    for file in shape_dir.iterdir():
        if file.is_file() and not (out / file.name).exists():
            shutil.copy(file, out / file.name)
    return out


def job(model: Path, work: Path, stage: int, cpu: bool, rows: int) -> Any:
    precision, dtype = ("fp32", "float32") if cpu else ("bf16", "bfloat16")
    tiny = next(item for item in example_jobs() if item.name == "tiny.toml")
    return load_config(Path(str(tiny)), [
        f"run.dir={work}", f"run.name=zero{stage}", f"model.path={model}",
        f"model.dtype={dtype}", f"training.precision={precision}", "algorithm.name=grpo",
        f"training.zero_stage={stage}", "training.steps=1", "training.save_every=0",
        'data.tasks=[{name="data_race_c"}]', f"rollout.prompts_per_step={rows // 4}",
        "rollout.num_generations=4", "rollout.max_new_tokens=64",
        "training.micro_batch_size=4", "model.gradient_checkpointing=true"])


def rl_steps(model: Path, work: Path, cpu: bool) -> None:
    from hargo_hpc.algorithms.presets import resolve_algorithm
    from hargo_hpc.train.loop import train
    from hargo_hpc.train.memory import architecture_of, memory_plan, size

    for stage in (2, 3):
        config = job(model, work, stage, cpu, rows=16)
        plan = memory_plan(config, architecture_of(str(model)),
                           resolve_algorithm(config.algorithm).needs_reference)
        if not cpu:
            torch.cuda.reset_peak_memory_stats()
        started = time.perf_counter()
        train(config, log=lambda _line: None, progress=False)
        took = time.perf_counter() - started
        peak = 0.0 if cpu else float(torch.cuda.max_memory_allocated())
        print(f"grpo step  ZeRO-{stage} {config.training.precision}: {took:.1f} s (model load, "
              f"engine, 16 rows x 64 tokens, update, export); peak GPU {size(peak)}, "
              f"estimate {size(plan.peak)} ({plan.peak_phase})", flush=True)


def throughput(model: Path, cpu: bool) -> None:
    """Rows x new tokens a second of `HFGenerateBackend` at 64, 128 and 256 rows."""
    from hargo_hpc.train.model.models import load_policy
    from hargo_hpc.train.rollout.generate import HFGenerateBackend, SamplingParams

    device = "cpu" if cpu else "cuda"
    policy, tokenizer = load_policy(str(model), dtype="float32" if cpu else "bfloat16")
    policy.to(device).eval()
    backend = HFGenerateBackend(policy, tokenizer)
    new = 16 if cpu else 256
    params = SamplingParams(max_new_tokens=new, seed=0)
    prompt = "Does this loop have a data race? for (i = 0; i < n; i++) a[i] = a[i + 1];"
    for rows in (8, 16) if cpu else (64, 128, 256):
        prompts = [f"{prompt} ({i})" for i in range(rows // 4)]
        backend.generate(prompts[:1], 4, params)  # warm-up
        _sync(cpu)
        started = time.perf_counter()
        out = backend.generate(prompts, 4, params)
        _sync(cpu)
        took = time.perf_counter() - started
        tokens = int(out.completion_mask.sum())
        print(f"generate   {rows:>3} rows x {new} new tokens: {took:.2f} s, "
              f"{tokens / took:,.0f} tokens/s ({tokens} tokens)", flush=True)
    del policy


def zero3_generation(model: Path, work: Path, cpu: bool) -> None:
    """One ZeRO-3 engine's generation, its parameters gathered once around the call (what the
    trainer does) against layer by layer by ZeRO's hooks."""
    from hargo_hpc.train.backend.engine import build_engine
    from hargo_hpc.train.model.models import load_policy
    from hargo_hpc.train.rollout.generate import HFGenerateBackend, SamplingParams

    policy, tokenizer = load_policy(str(model), dtype="float32" if cpu else "bfloat16")
    engine = build_engine(policy, zero_stage=3, precision="fp32" if cpu else "bf16")
    new, rows = (8, 8) if cpu else (128, 64)
    params = SamplingParams(max_new_tokens=new, seed=0)
    prompts = [f"Explain OpenMP reductions, case {i}." for i in range(rows // 4)]
    for name, gather in (("gathered", engine.gathered_parameters), ("hooks", None)):
        backend = HFGenerateBackend(engine.module, tokenizer, gather=gather,
                                    synced_gpus=False if gather else None)
        backend.generate(prompts[:1], 4, params)  # warm-up
        _sync(cpu)
        started = time.perf_counter()
        backend.generate(prompts, 4, params)
        _sync(cpu)
        print(f"zero3 gen  {name:<8} {rows} rows x {new} tokens: "
              f"{time.perf_counter() - started:.2f} s", flush=True)


def _sync(cpu: bool) -> None:
    if not cpu:
        torch.cuda.synchronize()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True,
                        help="a directory with the model's config.json and tokenizer")
    parser.add_argument("--cpu", action="store_true", help="the same path, small, on the CPU")
    args = parser.parse_args(argv)
    if not (args.model / "config.json").is_file():
        print(f"error: --model {args.model}: no config.json there", file=sys.stderr)
        return 2
    if not args.cpu and not torch.cuda.is_available():
        print("error: no GPU visible (use --cpu to run the path on the CPU)", file=sys.stderr)
        return 1
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # the script's own lines, not the loaders' bars
    warnings.filterwarnings("ignore", category=FutureWarning)  # DeepSpeed's calls into torch
    with tempfile.TemporaryDirectory(prefix="hargo-gpu-check-") as tmp:
        work = Path(tmp)
        dtype = torch.float32 if args.cpu else torch.bfloat16
        model = random_model(args.model, work / "model", dtype)
        failed = 0
        for name, part in (("grpo steps", lambda: rl_steps(model, work / "runs", args.cpu)),
                           ("throughput", lambda: throughput(model, args.cpu)),
                           ("zero3 generation", lambda: zero3_generation(model, work, args.cpu))):
            try:
                part()
            except Exception as err:  # one line, and on to the next part
                print(f"FAIL {name}: {type(err).__name__}: {str(err).strip()[:300]}", flush=True)
                failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
