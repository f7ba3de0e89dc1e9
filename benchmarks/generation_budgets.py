#!/usr/bin/env python3
"""RL step time with per-task generation budgets against one budget for every task.

The same experiment twice: a mix of the yes/no data-race task and MLPerf QA (the project's
samples), GRPO, `--prompts` prompts x G completions a step, the same seed (the same prompts
in the same order):

  budgets   each task within its own budget (`config.generation_budget`: yes/no 8 tokens,
            MLPerf 48), the default;
  uniform   every task at rollout.max_new_tokens (`--tokens`), as before issue Q (each task's
            max_new_tokens set to it).

Runs alternate (budgets, uniform, budgets, ...), each in its own process; the first `--warmup`
steps of each run are dropped; printed: the median step time of each with its spread (min-max
over the kept steps), the ratio, and the medians of the generation phase and of the mean
completion length.

Run: .venv/bin/python benchmarks/generation_budgets.py [--model tiny|smollm2] [--rounds 2]
Everything runs in a temporary directory; nothing is written elsewhere.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

from _runs import job_toml, train

TASKS = ("data_race_c", "mlperf_qa")


def experiment_toml(run_dir: Path, name: str, args: argparse.Namespace) -> str:
    own = {} if name == "budgets" else {"max_new_tokens": args.tokens}
    return job_toml(run_dir, name, args.model, [{"name": t, **own} for t in TASKS], {
        "algorithm": {"name": "grpo"},
        "rollout": {"num_generations": args.G, "prompts_per_step": args.prompts,
                    "max_new_tokens": args.tokens},
        "training": {"lr": 1e-6, "steps": args.steps, "micro_batch_size": args.G,
                     "zero_stage": 0, "save_every": 0}})


def summary(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} s [{min(values):.2f}, {max(values):.2f}]"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="tiny", help="tiny, smollm2 or a checkpoint dir")
    parser.add_argument("--rounds", type=int, default=2, help="runs of each configuration")
    parser.add_argument("--steps", type=int, default=6, help="RL steps per run")
    parser.add_argument("--warmup", type=int, default=1, help="steps dropped per run")
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--G", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=192, help="rollout.max_new_tokens")
    args = parser.parse_args()
    records: dict[str, list[dict]] = {"budgets": [], "uniform": []}
    with tempfile.TemporaryDirectory(prefix="hargo-budgets-") as tmp:
        for index in range(args.rounds):
            for name in records:
                records[name] += train(Path(tmp), f"{name}-{index}",
                                       experiment_toml(Path(tmp) / f"{name}-{index}", name, args),
                                       args.warmup)
    print(f"model {args.model}, tasks {', '.join(TASKS)}, {args.prompts} prompts x G {args.G}, "
          f"rollout.max_new_tokens {args.tokens}, {args.rounds} runs x {args.steps - args.warmup}"
          " kept steps each")
    for name, found in records.items():
        print(f"  {name:8s} step {summary([r['timing_s/step'] for r in found])}  gen "
              f"{summary([r['timing_s/gen'] for r in found])}  mean length "
              f"{statistics.median(r['completions/mean_length'] for r in found):.1f} tokens")
    ratio = (statistics.median(r["timing_s/step"] for r in records["budgets"])
             / statistics.median(r["timing_s/step"] for r in records["uniform"]))
    print(f"step time ratio (budgets / uniform): {ratio:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
