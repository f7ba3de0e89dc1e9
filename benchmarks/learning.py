#!/usr/bin/env python3
"""Does RL make the model better? Held-out metrics from one warm start, several seeds.

Two suites, each: one SFT warm start (`hargo sft`, in process), then per seed one RL run of
each method from it, each evaluated (`hargo eval`) on examples held out from all training, SFT
included (`data.split_seed` 0 for every run: the same held-out examples, so the warm start's
answers are computed once and shared), against the warm start on the same examples.

  gemm   the project's tiny model on GEMM with the real bench (one local worker: the real
         compiler, verification and timer), on the shipped 48 problem shapes
         (scripts/make_task_samples.py), a quarter held out; methods plain
         GRPO and GRPO with SQD (`sqd.enabled`). Held-out metrics: the ok share, compiled share
         and mean reward of `--samples` kernels sampled per problem. SQD against GRPO: the
         distinct technique sets of ok kernels, and the best GFLOPS, on the held-out problems.
  text   SmolLM2-135M-Instruct on the HPC-GPT text mix (data race C, MLPerf QA, PLP QA from
         `--data`, default ../shared/data/hpc-gpt; the project's samples when absent, whose
         held-out splits are small); methods HARGO and GRPO. Held-out metrics: mean reward,
         data-race support and F1, MLPerf share over 40 characters and F1, PLP similarity.

Printed per method and seed: each task's metrics at the start (the SFT model) and the end,
the paired change with its 95 % interval (examples resampled, a GEMM problem's kernels
together), `*` where it excludes 0. Then pooled over the seeds (per example, every seed's
answers together, against the start: one paired bootstrap over the held-out examples), and
the difference between the two methods the same way (second − first), whatever its sign.

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
    "gemm": ("ok_share", "compiled_share", "reward_mean"),
    "data_race_c": ("reward_mean", "support_rate", "f1", "accuracy"),
    "mlperf_qa": ("reward_mean", "share_over_40", "f1"),
    "plp_qa": ("reward_mean", "similarity", "mean_chars"),
}
HPCGPT_FILES = {"data_race_c": "task2_c_c++.json", "mlperf_qa": "task1_ml_perf.json",
                "plp_qa": "task1_plp.json"}


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
    if args.suite == "gemm":
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
    raw["algorithm"] = {"name": "grpo" if method == "sqd" else method}
    raw["sft"] = {"steps": 0}
    if method == "sqd":
        raw["sqd"] = {"enabled": True}
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


def interval_text(found: Any) -> str:
    from hargo_hpc.eval.intervals import Interval

    if not found or found.get("value") is None:
        return "—"
    return Interval.from_json(found).change_text("+.3f")


def value_text(value: Any) -> str:
    return "—" if value is None else f"{value:.3f}"


def curve_text(curve: list[float]) -> str:
    """Mean train reward over the first and the last fifth of the steps."""
    fifth = max(1, len(curve) // 5)
    first, last = curve[:fifth], curve[-fifth:]
    return f"{sum(first) / len(first):.3f} -> {sum(last) / len(last):.3f}"


def pooled_answers(runs: list[dict[str, Any]], task_name: str, baseline: bool) -> Any:
    """(plan, answers) of one task with every run's answers to each example side by side
    (example u: run 0's samples, then run 1's, ...); `baseline`: the start's answers (the
    same in every run: the first run's)."""
    from hargo_hpc.eval.evaluate import Answers, TaskPlan
    from hargo_hpc.eval.paired_runs import plan_and_answers, read_predictions
    from hargo_hpc.tasks.registry import get_task

    task = get_task(task_name)
    name = f"{task_name}.baseline.jsonl" if baseline else f"{task_name}.jsonl"
    chosen = runs[:1] if baseline else runs
    parts = [plan_and_answers(task, read_predictions(r["run_dir"] / "eval" / "predictions" /
                                                      name)) for r in chosen]
    plan = parts[0][0]
    samples = plan.samples * len(parts)
    texts: list[str] = []
    records: list[Any] = []
    for u in range(len(plan.examples)):
        for part_plan, answers in parts:
            rows = slice(u * part_plan.samples, (u + 1) * part_plan.samples)
            texts += answers.texts[task_name][rows]
            if task.remote:
                records += answers.records[task_name][rows]
    answers = Answers({task_name: texts}, {task_name: records} if task.remote else {})
    return task, TaskPlan(plan.examples, samples, 1, (), do_sample=samples > 1), answers


def pooled_change(a_runs: list[dict[str, Any]], b_runs: list[dict[str, Any]] | None,
                  task_name: str, seed: int = 0) -> dict[str, Any]:
    """B − A per metric, one paired bootstrap over the held-out examples; A = the start's
    answers when `b_runs` is None (then B = `a_runs`)."""
    from hargo_hpc.eval import compare
    from hargo_hpc.eval.evaluate import unit_metrics

    if b_runs is None:
        task, plan_a, ans_a = pooled_answers(a_runs, task_name, baseline=True)
        _, plan_b, ans_b = pooled_answers(a_runs, task_name, baseline=False)
    else:
        task, plan_a, ans_a = pooled_answers(a_runs, task_name, baseline=False)
        _, plan_b, ans_b = pooled_answers(b_runs, task_name, baseline=False)
    of_a, of_b = unit_metrics(task, plan_a, ans_a), unit_metrics(task, plan_b, ans_b)
    n = len(plan_a.examples)
    everything = list(range(n))
    keys = [k for k in METRICS[task_name] if k in of_a(everything)]
    changes = compare.paired(of_a, of_b, n, keys, seed=seed)
    return {"n": n, "a": of_a(everything), "b": of_b(everything),
            "changes": {k: v.to_json() for k, v in changes.items()}}


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


def line_of(found: dict[str, Any], keys: tuple[str, ...], a: str, b: str) -> str:
    return "  ".join(f"{k} {value_text(found[a].get(k))} -> {value_text(found[b].get(k))} "
                     f"({interval_text(found['changes'].get(k))})"
                     for k in keys if k in found["changes"])


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("suite", nargs="?", default="gemm", choices=["gemm", "text"],
                        help="default gemm (what `make benchmarks` runs)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--methods", nargs="+", default=None,
                        help="default: grpo sqd (gemm), grpo hargo (text)")
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
    defaults = {"methods": ["grpo", "sqd"] if gemm else ["grpo", "hargo"],
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
                for name, values in run["metrics"]["tasks"].items():
                    found = {"a": values["baseline"], "b": values,
                             "changes": values["vs_baseline"]}
                    print(f"{method} s{seed} {name} (n={values['n']}): "
                          f"{line_of(found, METRICS[name], 'a', 'b')}", flush=True)
                print(f"{method} s{seed}: train reward {curve_text(run['curve'])}; train "
                      f"{run['train_s']:.0f} s, eval {run['eval_s']:.0f} s", flush=True)
        tasks = list(results[args.methods[0]][0]["metrics"]["tasks"])
        print(f"\npooled over seeds {args.seeds}: end - start, paired over the held-out "
              "examples, 95 % interval, * excludes 0")
        for method, runs in results.items():
            for name in tasks:
                found = pooled_change(runs, None, name)
                print(f"  {method} {name} (n={found['n']}): "
                      f"{line_of(found, METRICS[name], 'a', 'b')}")
        if len(args.methods) == 2:
            first, second = args.methods
            print(f"\n{second} - {first}, pooled over the seeds, paired:")
            for name in tasks:
                found = pooled_change(results[first], results[second], name)
                print(f"  {name} (n={found['n']}): {line_of(found, METRICS[name], 'a', 'b')}")
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
