#!/usr/bin/env python3
"""Does RL make the model better? Held-out metrics from one warm start, several seeds.

Two suites, each: one SFT warm start (`hargo sft`, in process), then per seed one RL run of
each method from it, each evaluated (`hargo eval`) on examples held out from all training, SFT
included (`data.split_seed` 0 for every run: the same held-out examples, so the warm start's
answers are computed once and shared), against the warm start on the same examples.

  gemm   the project's tiny model on GEMM with the real bench (one local worker: the real
         compiler, verification and timer), on the shipped 48 problem shapes
         (scripts/make_task_samples.py), a quarter held out; methods plain
         GRPO, GRPO with SQD (`sqd.enabled`) and SQD without the archive's bonus
         (`sqd_nobonus`: sqd.bonus = sqd.novelty = 0). Held-out metrics: the ok share,
         compiled share and mean reward of `--samples` kernels sampled per problem. SQD
         against GRPO: the distinct technique sets of ok kernels, and the best GFLOPS, on the
         held-out problems.
  text   SmolLM2-135M-Instruct on the HPC-GPT text mix (data race C, MLPerf QA, PLP QA from
         `--data`, default ../shared/data/hpc-gpt; the project's samples when absent, whose
         held-out splits are small); methods HARGO and GRPO. Held-out metrics: mean reward,
         data-race support and F1, MLPerf share over 40 characters and F1, PLP similarity.

Printed per method and seed: each task's metrics at the start (the SFT model) and the end,
the paired change with its 95 % interval (examples resampled, a GEMM problem's kernels
together), `*` where it excludes 0, n and the distinct completions. Then over the training
seeds, the unit of a claim about a method: each seed's change, and pooled with the two-level
bootstrap over seeds, then each seed's examples (`eval.paired_runs.seed_changes`; 3 seeds or
more, else stated per seed), with a verdict; and each other method − the first, each seed's
two runs paired on the same examples, pooled the same way, whatever its sign. Every sampled
kernel is its own draw (a seed per example and sample), so the counts are what they say.

Everything runs in a temporary directory (or `--keep DIR`); nothing is written elsewhere.
Run: .venv/bin/python benchmarks/learning.py gemm|text [--seeds 0 1 2] [--steps N] ...
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

REPO = Path(__file__).resolve().parents[1]
METRICS = {
    "gemm": ("ok_share", "compiled_share", "reward_mean", "fast_0.5", "log2_ratio_mean"),
    "data_race_c": ("reward_mean", "support_rate", "f1", "accuracy"),
    "mlperf_qa": ("reward_mean", "share_over_40", "f1"),
    "plp_qa": ("reward_mean", "similarity", "mean_chars"),
}
HPCGPT_FILES = {"data_race_c": "task2_c_c++.json", "mlperf_qa": "task1_ml_perf.json",
                "plp_qa": "task1_plp.json"}


# GRPO with SQD, and SQD without the archive's part of the reward (the ablation of issue V)
SQD_METHODS = {"sqd": {"enabled": True},
               "sqd_nobonus": {"enabled": True, "bonus": 0.0, "novelty": 0.0}}

def suite_config(root: Path, args: argparse.Namespace) -> dict[str, Any]:
    """The experiment every run of the suite shares (the SFT's, before a method is set)."""
    common = {
        "run": {"name": "sft", "dir": str(root), "seed": 0},
        "rollout": {"num_generations": args.G, "prompts_per_step": args.prompts,
                    "max_new_tokens": args.max_new_tokens, "temperature": args.temperature},
        "training": {"lr": args.lr, "steps": args.steps, "micro_batch_size": args.micro,
                     "zero_stage": 0},
        "sft": {"steps": args.sft_steps, "lr": args.sft_lr, "check_examples": 0},
    }
    if args.suite == "gemm":  # one warm start for every arm, taught SQD's stage prompts too
        common["sft"] = {**common["sft"], "stage_prompts": True}
        return {**common, "model": {"path": "tiny"}, "handoff": {"local_workers": 1},
                "data": {"tasks": [{"name": "gemm", "eval_fraction": args.eval_fraction,
                                    "eval_samples": args.samples}], "split_seed": 0}}
    tasks = []
    for name, file in HPCGPT_FILES.items():
        spec: dict[str, Any] = {"name": name, "eval_fraction": args.eval_fraction}
        if args.data is not None and (args.data / file).is_file():
            spec["path"] = str(args.data)
        if args.max_items:
            spec["max_items"] = args.max_items
        tasks.append(spec)
    return {**common, "model": {"path": "smollm2", "max_prompt_tokens": 512},
            "data": {"tasks": tasks, "split_seed": 0}}


def warm_start(root: Path, args: argparse.Namespace) -> Path:
    from hargo_hpc.config import validate_config
    from hargo_hpc.train.sft_run import sft_run

    config = validate_config(suite_config(root, args))
    started = time.perf_counter()
    result = sft_run(config, log=lambda _: None)
    assert result.export is not None
    print(f"warm start: {args.sft_steps} SFT steps at lr {args.sft_lr:g}, "
          f"{time.perf_counter() - started:.0f} s -> {result.export}", flush=True)
    return result.export


def rl_run(root: Path, args: argparse.Namespace, start: Path, method: str,
           seed: int) -> dict[str, Any]:
    """Train `method` from `start` with `seed`, evaluate against `start`."""
    from hargo_hpc.config import validate_config
    from hargo_hpc.eval.evaluate import evaluate, resolve_target
    from hargo_hpc.train import loop

    raw = suite_config(root, args)
    raw["run"] = {**raw["run"], "name": f"{method}-s{seed}", "seed": seed}
    raw["model"] = {**raw["model"], "path": str(start)}
    raw["algorithm"] = {"name": "grpo" if method in SQD_METHODS else method}
    raw["sft"] = {"steps": 0}
    if method in SQD_METHODS:
        raw["sqd"] = SQD_METHODS[method]
    config = validate_config(raw)
    started = time.perf_counter()
    result = loop.train(config, log=lambda _: None, progress=False)
    trained = time.perf_counter() - started
    metrics = evaluate(resolve_target(str(result.run_dir)), local_workers=1,
                       log=lambda _: None)
    curve = [json.loads(line)["reward"] for line in
             result.metrics.read_text().splitlines()]
    return {"metrics": metrics, "train_s": trained, "curve": curve,
            "eval_s": time.perf_counter() - started - trained, "run_dir": result.run_dir}


def value_text(value: Any) -> str:
    return "—" if value is None else f"{value:.3f}"


def curve_text(curve: list[float]) -> str:
    """Mean train reward over the first and the last fifth of the steps."""
    fifth = max(1, len(curve) // 5)
    first, last = curve[:fifth], curve[-fifth:]
    return f"{sum(first) / len(first):.3f} -> {sum(last) / len(last):.3f}"


def seed_pooled(a_runs: list[dict[str, Any]], b_runs: list[dict[str, Any]] | None,
                task_name: str) -> dict[str, Any]:
    """B − A per metric, one pair per training seed, pooled over the seeds
    (`eval.paired_runs.seed_changes`: each seed's change paired on its examples, then the
    two-level bootstrap over seeds and examples, from 3 seeds); A = each run's start (its
    baseline answers) when `b_runs` is None (then B = `a_runs`), else A's run of the same
    seed. Returns {key: SeedPooled} of the task's METRICS, and the start and end values
    averaged over the seeds ("a", "b")."""
    from hargo_hpc.eval.paired_runs import Predictions, seed_changes

    if b_runs is None:
        pairs = [(Predictions(r["run_dir"], baseline=True), Predictions(r["run_dir"]))
                 for r in a_runs]
        a_values = [r["metrics"]["tasks"][task_name]["baseline"] for r in a_runs]
        b_values = [r["metrics"]["tasks"][task_name] for r in a_runs]
    else:
        pairs = [(Predictions(a["run_dir"]), Predictions(b["run_dir"]))
                 for a, b in zip(a_runs, b_runs, strict=True)]
        a_values = [r["metrics"]["tasks"][task_name] for r in a_runs]
        b_values = [r["metrics"]["tasks"][task_name] for r in b_runs]
    found = seed_changes(pairs)[task_name]

    def mean(values: list[dict[str, Any]], key: str) -> float | None:
        got = [v.get(key) for v in values if v.get(key) is not None]
        return sum(got) / len(got) if got else None

    keys = [k for k in METRICS[task_name] if k in found]
    return {"changes": {k: found[k] for k in keys}, "a": {k: mean(a_values, k) for k in keys},
            "b": {k: mean(b_values, k) for k in keys}}


def pooled_text(found: dict[str, Any], key: str) -> str:
    """`0.198 -> 0.640: per seed +0.41 [+0.30, +0.52] *, ...; pooled +0.44 [+0.35, +0.52]
    (3 seeds): better`."""
    pooled = found["changes"][key]
    seeds = ", ".join(i.change_text("+.3f") for i in pooled.per_seed)
    text = (f"{key} {value_text(found['a'][key])} -> {value_text(found['b'][key])}: per seed "
            f"{seeds}")
    if pooled.pooled is not None:
        text += f"; pooled {pooled.pooled.change_text('+.3f')} ({pooled.seeds} seeds)"
    return f"{text}: {pooled.verdict()}"


def held_out_archive(run_dir: Path) -> tuple[set[tuple[str, ...]], float | None]:
    """The distinct technique sets of ok kernels on the held-out problems, and the best
    GFLOPS there (from the evaluation's predictions)."""
    sets: set[tuple[str, ...]] = set()
    best = None
    for line in (run_dir / "eval" / "predictions" / "gemm.jsonl").read_text().splitlines():
        record = json.loads(line).get("record") or {}
        if record.get("status") != "ok" or record.get("suspicious"):
            continue
        sets.add(tuple(record.get("techniques") or ()))
        gflops = (record.get("gflops") or {}).get("median")
        if gflops is not None:
            best = gflops if best is None else max(best, gflops)
    return sets, best


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("suite", nargs="?", default="gemm", choices=["gemm", "text"],
                        help="default gemm (what `make benchmarks` runs)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--methods", nargs="+", default=None,
                        help="default: grpo sqd sqd_nobonus (gemm), grpo hargo (text)")
    parser.add_argument("--steps", type=int, default=None, help="RL steps per run")
    parser.add_argument("--prompts", type=int, default=4, help="prompts per RL step")
    parser.add_argument("--G", type=int, default=None, help="completions per prompt")
    parser.add_argument("--micro", type=int, default=None, help="micro-batch rows")
    parser.add_argument("--lr", type=float, default=None, help="RL learning rate")
    parser.add_argument("--temperature", type=float, default=None)
    parser.add_argument("--max-new-tokens", type=int, default=None)
    parser.add_argument("--sft-steps", type=int, default=None)
    parser.add_argument("--sft-lr", type=float, default=None)
    parser.add_argument("--samples", type=int, default=8,
                        help="gemm: kernels sampled per held-out problem")
    parser.add_argument("--eval-fraction", type=float, default=None)
    parser.add_argument("--max-items", type=int, default=0,
                        help="text: at most this many records per task (0 = all)")
    parser.add_argument("--data", type=Path, default=REPO.parent / "shared/data/hpc-gpt",
                        help="text: the HPC-GPT files")
    parser.add_argument("--keep", type=Path, default=None,
                        help="keep the runs in this directory (default: a temporary one)")
    args = parser.parse_args()
    gemm = args.suite == "gemm"
    defaults = {"methods": ["grpo", "sqd", "sqd_nobonus"] if gemm else ["grpo", "hargo"],
                "steps": 40 if gemm else 20, "G": 8 if gemm else 4, "micro": 8 if gemm else 4,
                "lr": 2e-4 if gemm else 1e-5, "temperature": 0.7 if gemm else 1.0,
                "max_new_tokens": 320 if gemm else 96, "sft_steps": 300 if gemm else 40,
                "sft_lr": 3e-3 if gemm else 3e-5, "eval_fraction": 0.25 if gemm else 0.12}
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if not gemm and not args.data.is_dir():
        print(f"note: no HPC-GPT files at {args.data}: the project's samples (small held-out "
              "splits)", flush=True)
        args.data = None
    return args


def main() -> int:
    args = parse_args()
    from transformers.utils import logging as hf_logging

    from hargo_hpc.eval.summary import change_lines

    hf_logging.disable_progress_bar()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="hargo-learning-") as tmp:
        root = args.keep or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        # the converted SmolLM2 and the compile cache live with the runs, not in ~/.cache
        os.environ["XDG_CACHE_HOME"] = str(root / "cache")
        start = warm_start(root, args)
        results: dict[str, list[dict[str, Any]]] = {m: [] for m in args.methods}
        for seed in args.seeds:
            for method in args.methods:  # interleaved: the node's drift hits both alike
                run = rl_run(root, args, start, method, seed)
                results[method].append(run)
                for line in change_lines(run["metrics"], METRICS.__getitem__,
                                         prefix=f"{method} s{seed}  "):
                    print(line, flush=True)
                print(f"{method} s{seed}: train reward {curve_text(run['curve'])}; train "
                      f"{run['train_s']:.0f} s, eval {run['eval_s']:.0f} s", flush=True)
        tasks = list(results[args.methods[0]][0]["metrics"]["tasks"])
        print(f"\nover the training seeds {args.seeds}: end - start per seed (paired over "
              "its held-out examples), then pooled (bootstrap over seeds, then examples; from "
              "3 seeds), 95 % intervals, * excludes 0")
        for method, runs in results.items():
            for name in tasks:
                found = seed_pooled(runs, None, name)
                for key in found["changes"]:
                    print(f"  {method} {name}: {pooled_text(found, key)}")
        first = args.methods[0]
        for second in args.methods[1:]:
            print(f"\n{second} - {first}, each seed's runs paired on the same examples, "
                  "pooled over the seeds:")
            for name in tasks:
                found = seed_pooled(results[first], results[second], name)
                for key in found["changes"]:
                    print(f"  {name}: {pooled_text(found, key)}")
        if {"grpo", "sqd"} <= set(results):
            print("\nSQD against GRPO on the held-out problems (per seed):")
            for a, b in zip(results["grpo"], results["sqd"], strict=True):
                sets_a, best_a = held_out_archive(a["run_dir"])
                sets_b, best_b = held_out_archive(b["run_dir"])
                print(f"  {a['run_dir'].name} / {b['run_dir'].name}: technique sets with an "
                      f"ok kernel {len(sets_a)} / {len(sets_b)}; best GFLOPS "
                      f"{best_a or 0:.2f} / {best_b or 0:.2f}")
    print(f"\n{time.strftime('%Y-%m-%d')}: total {time.perf_counter() - started:.0f} s; "
          f"budget per run: {args.steps} steps x {args.prompts} prompts x G {args.G}, lr "
          f"{args.lr:g}, T {args.temperature:g}, {args.max_new_tokens} tokens; warm start "
          f"{args.sft_steps} SFT steps at {args.sft_lr:g}; seeds {args.seeds}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
