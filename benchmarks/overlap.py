"""What `rollout.max_staleness = 1` saves: rewards computed by real bench workers while the
next step is generated.

The GEMM task with the tiny model, warm-started by SFT on the project's GEMM corpus (so its
completions are C that compiles and runs, and the bench has real work), and real `hargo
worker` processes on the run's handoff (`handoff.local_workers`). The same run is trained
with `max_staleness` 0 and 1, alternately (0, 1, 1, 0, ...), each in its own process with one
torch thread (the bench workers have the other core). Printed per setting: the wall time of
the measured steps (the first step of a run is dropped: start-up), the share of the
trainer's time spent waiting for rewards (`timing_s/reward_wait` over the wall time), and the
mean generation and bench time per step, medians over the runs with their spread; then

    wall time ratio (max_staleness 0 / 1): 1.45x   (goal >= 1.3x)

Run: .venv/bin/python benchmarks/overlap.py [--rounds 2] [--steps 6]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def experiment_toml(work: Path, name: str, model: str, steps: int, staleness: int,
                    args: argparse.Namespace) -> str:
    return f"""
[run]
name = "{name}"
dir = "{work}"
seed = 0

[model]
path = "{model}"

[[data.tasks]]
name = "gemm"

[data]
eval_fraction = 0.0

[algorithm]
name = "grpo"

[rollout]
num_generations = {args.generations}
prompts_per_step = {args.prompts}
max_new_tokens = {args.tokens}
temperature = {args.temperature}
max_staleness = {staleness}

[training]
lr = 1e-5
steps = {steps}
micro_batch_size = {args.generations}
save_every = 0
log_every = 1000

[sft]
steps = {args.sft_steps if name == "sft" else 0}
lr = 1e-5
check_examples = 0

[handoff]
local_workers = {args.workers}
"""


def sft(work: Path, args: argparse.Namespace) -> Path:
    """The warm start: `hargo sft` of the tiny model on the GEMM corpus (in its own process,
    as every run here); its export."""
    path = work / "sft.toml"
    path.write_text(experiment_toml(work, "sft", "tiny", 0, 0, args).replace(
        "lr = 1e-5", f"lr = {args.sft_lr}"))
    done = subprocess.run([sys.executable, "-m", "hargo_hpc", "sft", str(path)],
                          env=dict(os.environ, OMP_NUM_THREADS="2"), capture_output=True,
                          text=True)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-25:])
        raise SystemExit(f"the SFT warm start failed (exit {done.returncode}):\n{tail}")
    from hargo_hpc.runs import RunLayout

    return RunLayout(work / "sft").sft.export  # run "sft" under work/, its SFT directory


def child(work: Path, model: Path, staleness: int, index: int,
          args: argparse.Namespace) -> dict[str, Any]:
    """One RL run in its own process; its per-step records and wall-clock stamps."""
    name = f"s{staleness}-{index}"
    path = work / f"{name}.toml"
    path.write_text(experiment_toml(work, name, str(model), args.steps, staleness, args))
    out = work / f"{name}.json"
    env = dict(os.environ, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    done = subprocess.run([sys.executable, __file__, "--child", str(path), "--out", str(out)],
                          env=env, capture_output=True, text=True)
    if done.returncode != 0 or not out.is_file():
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-25:])
        raise SystemExit(f"run {name} failed (exit {done.returncode}):\n{tail}")
    return json.loads(out.read_text())


def run_child(config_path: str, out: str) -> None:
    import torch

    from hargo_hpc.config import load_config
    from hargo_hpc.train.loop import train

    torch.set_num_threads(1)
    stamps: list[float] = []
    records: list[dict[str, Any]] = []

    def on_step(record: dict[str, Any]) -> None:
        stamps.append(time.perf_counter())
        records.append(record)

    train(load_config(config_path), log=lambda _: None, on_step=on_step, progress=False)
    Path(out).write_text(json.dumps({"stamps": stamps, "records": records}))


def measure(result: dict[str, Any]) -> dict[str, Any]:
    """Steps 2..N: their wall time (stamp of the last minus stamp of the first), the share of
    it spent waiting for rewards, generation seconds per step, the bench statuses."""
    stamps, records = result["stamps"], result["records"][1:]
    wall = stamps[-1] - stamps[0]
    wait = sum(r["timing_s/reward_wait"] for r in records)
    statuses: dict[str, int] = {}
    for r in records:
        for key, value in r.items():
            if key.startswith("bench/status/") and value:
                name = key.removeprefix("bench/status/")
                statuses[name] = statuses.get(name, 0) + int(value)
    phases = {key.removeprefix("timing_s/"): statistics.mean(r[key] for r in records)
              for key in records[0] if key.startswith("timing_s/")}
    return {"wall": wall, "wait_share": wait / wall if wall > 0 else 0.0,
            "gen": phases["gen"], "phases": phases, "statuses": statuses}


def spread(values: list[float]) -> str:
    return f"{min(values):.2f}-{max(values):.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2, help="runs of each setting")
    parser.add_argument("--steps", type=int, default=6, help="RL steps per run (first dropped)")
    parser.add_argument("--prompts", type=int, default=2, help="rollout.prompts_per_step")
    parser.add_argument("--generations", type=int, default=4, help="rollout.num_generations")
    parser.add_argument("--tokens", type=int, default=256, help="rollout.max_new_tokens")
    parser.add_argument("--temperature", type=float, default=0.3)
    parser.add_argument("--workers", type=int, default=1, help="handoff.local_workers")
    parser.add_argument("--sft-steps", type=int, default=300)
    parser.add_argument("--sft-lr", type=float, default=3e-3)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        run_child(args.child, args.out)
        return
    if args.steps < 3:
        raise SystemExit("--steps must be at least 3 (the first step is dropped)")

    with tempfile.TemporaryDirectory(prefix="hargo-overlap-") as tmp:
        work = Path(tmp)
        os.environ.update(HOME=str(work), XDG_CACHE_HOME=str(work / "cache"),
                          HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
        started = time.perf_counter()
        model = sft(work, args)
        print(f"SFT warm start: {args.sft_steps} steps on the GEMM corpus in "
              f"{time.perf_counter() - started:.0f} s")
        print(f"{args.prompts} prompts x G={args.generations}, {args.tokens} new tokens at "
              f"T={args.temperature}, {args.workers} bench worker(s), {args.steps} steps "
              f"(first dropped), {args.rounds} runs per setting, alternating")
        found: dict[int, list[dict[str, Any]]] = {0: [], 1: []}
        for round_ in range(args.rounds):
            for staleness in ((0, 1) if round_ % 2 == 0 else (1, 0)):
                figures = measure(child(work, model, staleness, round_, args))
                found[staleness].append(figures)
                print(f"  run {round_ + 1}, max_staleness {staleness}: wall "
                      f"{figures['wall']:.2f} s, waiting {100 * figures['wait_share']:.0f} %, "
                      f"generation {figures['gen']:.2f} s/step, bench statuses "
                      + ", ".join(f"{k} {v}" for k, v in sorted(figures["statuses"].items())),
                      flush=True)
        medians = {}
        for staleness, runs in found.items():
            walls = [r["wall"] for r in runs]
            waits = [100 * r["wait_share"] for r in runs]
            medians[staleness] = statistics.median(walls)
            print(f"max_staleness {staleness}: wall {medians[staleness]:.2f} s "
                  f"({spread(walls)}), waiting for rewards "
                  f"{statistics.median(waits):.0f} % ({spread(waits)}) of the trainer's time")
            phases = {k: statistics.median(r["phases"][k] for r in runs)
                      for k in runs[0]["phases"]}
            print("  seconds per step: " + ", ".join(f"{k} {v:.2f}" for k, v in phases.items()))
        sync_wait = statistics.median(r["wait_share"] * r["wall"] for r in found[0])
        gen = statistics.median(r["gen"] for r in found[0]) * (args.steps - 1)
        print(f"bench wait without overlap {sync_wait:.2f} s vs generation {gen:.2f} s over "
              "the measured steps")
        print(f"wall time ratio (max_staleness 0 / 1): {medians[0] / medians[1]:.2f}x "
              "(goal >= 1.3x)")


if __name__ == "__main__":
    main()
