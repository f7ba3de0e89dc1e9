"""What sharing a mixed step over the ranks by generation budget saves: two ranks (torchrun,
gloo, one torch thread each) train the tiny model (or SmolLM2) on a mix of a long-answer task
and a yes/no task, with `rollout.balance_ranks` true and false alternately (false, true, true,
false, ...), each run in its own processes. Printed per setting: the median step time over
the measured steps of every run (the first step of a run dropped: start-up) with its range,
the median generation time, then the ratio of the medians (false / true).

The default mix is PLP QA (a 96-token budget) and data race (8 tokens); `--long gemm` puts
GEMM (rollout.max_new_tokens, with a local bench worker) in PLP's place.

Run: .venv/bin/python benchmarks/rank_balance.py [--rounds 2] [--steps 5] [--long gemm]
     [--model smollm2] [--tokens 256]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path


def experiment_toml(work: Path, name: str, balance: bool, args: argparse.Namespace) -> str:
    long_task = ('name = "gemm"' if args.long == "gemm"
                 else 'name = "plp_qa"\nmax_new_tokens = 96')
    return f"""
[run]
name = "{name}"
dir = "{work}"
seed = 0

[model]
path = "{args.model}"
cache_dir = "{work / 'models'}"

[[data.tasks]]
{long_task}

[[data.tasks]]
name = "data_race_c"

[data]
eval_fraction = 0.0

[algorithm]
name = "grpo"

[rollout]
num_generations = {args.generations}
prompts_per_step = {args.prompts}
max_new_tokens = {args.tokens}
balance_ranks = {str(balance).lower()}

[training]
lr = 1e-5
steps = {args.steps}
micro_batch_size = {args.generations}
save_every = 0

[handoff]
local_workers = {1 if args.long == "gemm" else 0}
"""


def run_once(work: Path, name: str, balance: bool, args: argparse.Namespace) -> list[dict]:
    job = work / f"{name}.toml"
    job.write_text(experiment_toml(work, name, balance, args))
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    env.update(OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", XDG_CACHE_HOME=str(work / "cache"))
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                    "--nproc-per-node=2", "-m", "hargo_hpc", "train", str(job)],
                   check=True, env=env, capture_output=True, text=True)
    lines = (work / name / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines][1:]  # the first step: start-up


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--generations", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--long", choices=("plp", "gemm"), default="plp")
    parser.add_argument("--model", default="tiny", help="tiny or smollm2")
    args = parser.parse_args(argv)
    step: dict[bool, list[float]] = {False: [], True: []}
    gen: dict[bool, list[float]] = {False: [], True: []}
    with tempfile.TemporaryDirectory(prefix="hargo-rank-balance-") as tmp:
        work = Path(tmp)
        for round_ in range(args.rounds):
            for balance in ((False, True) if round_ % 2 == 0 else (True, False)):
                records = run_once(work, f"r{round_}-{balance}", balance, args)
                step[balance] += [r["timing_s/step"] for r in records]
                gen[balance] += [r["timing_s/gen"] for r in records]
    print(f"two ranks, {args.model}, {args.long} + data race, {args.prompts} prompts x G "
          f"{args.generations} a step, {args.rounds} runs x {args.steps - 1} measured steps a "
          "setting:")
    for balance in (False, True):
        times = step[balance]
        print(f"  balance_ranks {str(balance).lower():<5}  step {statistics.median(times):.2f} s "
              f"(range {min(times):.2f}-{max(times):.2f}), generation "
              f"{statistics.median(gen[balance]):.2f} s")
    print(f"  step time, false / true: "
          f"{statistics.median(step[False]) / statistics.median(step[True]):.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
