"""Step time of this trainer against TRL's GRPOTrainer on the same RL step, on CPU.

Both run GRPO as DeepSeekMath writes it (group-normalised advantages, per-sequence token mean,
clip 0.2, k3 KL at beta 0.04 against a frozen reference), one process each, on the same model,
the same prompts in the same order (this project's task mixture on its shipped samples, drawn
by its sampler), the same batch (4 prompts x G = 4 completions, one optimizer step of 16 rows
in one micro-batch), 32 new tokens at temperature 1, learning rate 1e-6, the same in-process
task rewards, the same number of torch threads.

Each run is its own process; runs alternate (hargo, TRL, hargo, TRL, ...), the first `--warmup`
steps of each run are dropped, and the figure is the median step time over every kept step of
every run of a trainer (a step's time: from the end of the previous step to the end of this
one, as each trainer's own step callback sees it). Printed per model size:

    step time ratio (hargo / TRL), tiny: 0.73x

with both medians and their spread, the phase breakdown (generate, reference, reward, update),
and each trainer's peak resident memory (the child's ru_maxrss).

TRL is a benchmark-only dependency: `pip install -e .[bench]` (or `.venv/bin/pip install
trl==1.16.0`). Models are built or converted into a temporary directory, nothing is cached.

Run: .venv/bin/python benchmarks/trainer_vs_trl.py [--model tiny|smollm2|both] [--rounds 3]
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

PROMPTS, G, NEW_TOKENS, LR, BETA = 4, 4, 32, 1e-6, 0.04
TASKS = ("data_race_c", "data_race_fortran", "mlperf_qa", "plp_qa")


def experiment_toml(model_dir: str, run_dir: str, steps: int) -> str:
    """Our side of the comparison: the grpo preset, one micro-batch per step."""
    tasks = "".join(f'\n[[data.tasks]]\nname = "{t}"\n' for t in TASKS)
    return f"""
[run]
name = "bench"
dir = "{run_dir}"
seed = 0

[model]
path = "{model_dir}"
{tasks}
[algorithm]
name = "grpo"

[rollout]
num_generations = {G}
prompts_per_step = {PROMPTS}
max_new_tokens = {NEW_TOKENS}
temperature = 1.0

[training]
lr = {LR}
steps = {steps}
micro_batch_size = {PROMPTS * G}
save_every = 0
log_every = 1000
"""


# --------------------------------------------------------------------------- the two children


def run_hargo(model_dir: str, steps: int, work: Path) -> dict[str, Any]:
    from hargo_hpc.config import load_config
    from hargo_hpc.train.loop import train

    path = work / "bench.toml"
    path.write_text(experiment_toml(model_dir, str(work / "runs"), steps))
    config = load_config(path)
    stamps: list[float] = []
    phases: list[dict[str, float]] = []

    def on_step(record: dict[str, Any]) -> None:
        stamps.append(time.perf_counter())
        phases.append({
            "generate": record["timing_s/gen"],
            "reference": record["timing_s/ref"] + record["timing_s/old_log_prob"],
            "reward": record["timing_s/reward"],
            "update": record["timing_s/update_actor"] + record["timing_s/adv"],
        })

    start = time.perf_counter()
    train(config, log=lambda _: None, on_step=on_step, progress=False)
    return {"step_s": _intervals(start, stamps), "phases": phases}


def trl_inputs(model_dir: str, steps: int, work: Path) -> tuple[Any, Any, list[dict[str, Any]],
                                                                 Any, list[Any]]:
    """(model, tokenizer, dataset rows, tasks, examples): the model and tokenizer as our trainer
    loads them (pad token, left padding), the prompts it draws, in its order, as TRL rows."""
    from hargo_hpc.config import load_config
    from hargo_hpc.tasks import build_prompt
    from hargo_hpc.tasks.split import MixtureSampler
    from hargo_hpc.train.model.models import load_policy
    from hargo_hpc.train.setup import drop_long_prompts, load_data, prompt_format_of

    path = work / "bench.toml"
    path.write_text(experiment_toml(model_dir, str(work / "runs"), steps))
    config = load_config(path)
    data = load_data(config, lambda _: None)
    model, tokenizer = load_policy(model_dir, dtype="float32", trust_remote_code=False)
    fmt = prompt_format_of(config, tokenizer)
    drop_long_prompts(data, tokenizer, fmt, config.model.max_prompt_tokens, lambda _: None)
    sampler = MixtureSampler(data.train, {t: None for t in TASKS}, seed=0)
    examples = sampler.batch(PROMPTS * steps)
    rows = [{"prompt": build_prompt(data.tasks[e.task].user_text(e), fmt, tokenizer),
             "index": i} for i, e in enumerate(examples)]
    return model, tokenizer, rows, data.tasks, examples


def run_trl(model_dir: str, steps: int, work: Path) -> dict[str, Any]:
    import torch
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    model, tokenizer, rows, tasks, examples = trl_inputs(model_dir, steps, work)

    def task_reward(prompts: list[str], completions: list[str], index: list[int],
                    **_: Any) -> list[float]:
        out = [0.0] * len(completions)
        by_task: dict[str, list[int]] = {}
        for i, k in enumerate(index):
            by_task.setdefault(examples[k].task, []).append(i)
        for name, picked in by_task.items():
            values = tasks[name].reward([examples[index[i]] for i in picked],
                                        [completions[i] for i in picked])
            for i, v in zip(picked, values, strict=True):
                out[i] = float(v)
        return out

    args = GRPOConfig(
        output_dir=str(work / "trl"), use_cpu=True, bf16=False, fp16=False, seed=0,
        per_device_train_batch_size=PROMPTS * G, gradient_accumulation_steps=1,
        num_generations=G, max_completion_length=NEW_TOKENS, temperature=1.0, top_p=1.0,
        learning_rate=LR, lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0,
        max_grad_norm=1.0, beta=BETA, loss_type="grpo", scale_rewards="group", epsilon=0.2,
        num_iterations=1, max_steps=steps, shuffle_dataset=False, logging_steps=1,
        report_to="none", save_strategy="no", disable_tqdm=True, dataloader_num_workers=0,
        log_completions=False,
    )
    stamps: list[float] = []

    class Stamp(TrainerCallback):
        def on_step_end(self, *_: Any, **__: Any) -> None:
            stamps.append(time.perf_counter())

    trainer = GRPOTrainer(model=model, reward_funcs=task_reward, args=args,
                          train_dataset=Dataset.from_list(rows), processing_class=tokenizer,
                          callbacks=[Stamp()])
    phases: list[dict[str, float]] = []
    current: dict[str, float] = {}
    timed(trainer, "_generate", lambda *a: "generate", current)
    timed(trainer, "_calculate_rewards", lambda *a: "reward", current)
    timed(trainer, "_get_per_token_logps_and_entropies",
          lambda model, *a: ("reference" if model is trainer.ref_model or not
                             torch.is_grad_enabled() else "update_forward"), current)

    class Phases(TrainerCallback):
        def on_step_end(self, *_: Any, **__: Any) -> None:
            phases.append(dict(current))
            current.clear()

    trainer.add_callback(Phases())
    start = time.perf_counter()
    trainer.train()
    step_s = _intervals(start, stamps)
    for p, total in zip(phases, step_s, strict=True):  # update: what the other phases leave
        p.pop("update_forward", None)
        p["update"] = total - sum(p.get(k, 0.0) for k in ("generate", "reference", "reward"))
    return {"step_s": step_s, "phases": phases}


def timed(obj: Any, name: str, phase_of: Any, into: dict[str, float]) -> None:
    """Wrap the bound method `obj.name` so its time is added to `into[phase_of(*args)]`
    (outermost call only: a phase that calls itself is not counted twice)."""
    inner = getattr(obj, name)
    depth = [0]

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        depth[0] += 1
        t0 = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            depth[0] -= 1
            if depth[0] == 0:
                key = phase_of(*args)
                into[key] = into.get(key, 0.0) + time.perf_counter() - t0

    setattr(obj, name, wrapper)


def _intervals(start: float, stamps: list[float]) -> list[float]:
    edges = [start, *stamps]
    return [b - a for a, b in itertools.pairwise(edges)]


# --------------------------------------------------------------------------- the parent


def child(trainer: str, model_dir: str, steps: int, threads: int) -> dict[str, Any]:
    """Run one trainer in its own process; its JSON result plus its peak RSS (MiB)."""
    with tempfile.TemporaryDirectory(prefix=f"hargo-vs-trl-{trainer}-") as work:
        out = Path(work) / "result.json"
        env = dict(os.environ, OMP_NUM_THREADS=str(threads), HF_HUB_OFFLINE="1",
                   HF_DATASETS_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
                   HOME=work, XDG_CACHE_HOME=str(Path(work) / "cache"),
                   HF_HOME=str(Path(work) / "hf"), TRANSFORMERS_VERBOSITY="error",
                   DS_ACCELERATOR="cpu")
        proc = subprocess.Popen(
            [sys.executable, __file__, "--child", trainer, "--model-dir", model_dir,
             "--steps", str(steps), "--threads", str(threads), "--out", str(out)],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        output = proc.stdout.read() if proc.stdout else ""
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0 or not out.is_file():
            tail = "\n".join(output.splitlines()[-25:])
            raise SystemExit(f"{trainer} run failed (exit {proc.returncode}):\n{tail}")
        result = json.loads(out.read_text())
    result["peak_rss_mib"] = usage.ru_maxrss / 1024
    return result


def prepare_model(size: str, cache: Path) -> str:
    from hargo_hpc.train.model.models import smollm2_dir, tiny_dir

    return str(tiny_dir(cache) if size == "tiny" else smollm2_dir(cache))


def summarise(size: str, results: dict[str, list[dict[str, Any]]], warmup: int) -> None:
    def kept(name: str) -> list[float]:
        return [s for r in results[name] for s in r["step_s"][warmup:]]

    def phase(name: str, key: str) -> float:
        return statistics.median(p.get(key, 0.0) for r in results[name]
                                 for p in r["phases"][warmup:])

    ours, theirs = kept("hargo"), kept("trl")
    mo, mt = statistics.median(ours), statistics.median(theirs)
    print(f"\n== {size}: {len(ours)} and {len(theirs)} kept steps "
          f"({len(results['hargo'])} runs each, first {warmup} of each dropped)")
    for name, values, med in (("hargo", ours, mo), ("TRL  ", theirs, mt)):
        rss = max(r["peak_rss_mib"] for r in results[name.strip().lower()])
        print(f"  {name} median step {med:7.3f} s (min {min(values):.3f}, max {max(values):.3f});"
              f" peak RSS {rss:7.0f} MiB")
    print("  phase medians (s)      generate  reference  reward   update")
    for name in ("hargo", "trl"):
        cells = "".join(f"{phase(name, k):10.3f}" for k in ("generate", "reference", "reward",
                                                           "update"))
        print(f"  {name:22s}{cells}")
    print(f"step time ratio (hargo / TRL), {size}: {mo / mt:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=("tiny", "smollm2", "both"), default="both")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each trainer per size")
    parser.add_argument("--steps", type=int, default=0,
                        help="steps per run, warm-up included (0: 6 tiny, 4 smollm2)")
    parser.add_argument("--warmup", type=int, default=1, help="first steps of a run dropped")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--child", choices=("hargo", "trl"), help=argparse.SUPPRESS)
    parser.add_argument("--model-dir", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.child:
        import torch

        torch.set_num_threads(args.threads)
        with tempfile.TemporaryDirectory(prefix="hargo-vs-trl-run-") as work:
            run = run_hargo if args.child == "hargo" else run_trl
            result = run(args.model_dir, args.steps, Path(work))
        Path(args.out).write_text(json.dumps(result))
        return

    if importlib.util.find_spec("trl") is None:
        raise SystemExit("error: TRL, the peer of this benchmark, is not installed: "
                         ".venv/bin/pip install -e '.[bench]' (trl==1.16.0)")
    sizes = ("tiny", "smollm2") if args.model == "both" else (args.model,)
    print(f"{PROMPTS} prompts x G={G}, {NEW_TOKENS} new tokens, GRPO beta={BETA}, "
          f"{args.threads} threads, {args.rounds} interleaved runs per trainer and size")
    with tempfile.TemporaryDirectory(prefix="hargo-vs-trl-models-") as cache:
        for size in sizes:
            model_dir = prepare_model(size, Path(cache))
            steps = args.steps or (6 if size == "tiny" else 4)
            if steps <= args.warmup:
                raise SystemExit(f"--steps ({steps}) must exceed --warmup ({args.warmup})")
            results: dict[str, list[dict[str, Any]]] = {"hargo": [], "trl": []}
            for round_ in range(args.rounds):
                order = ("hargo", "trl") if round_ % 2 == 0 else ("trl", "hargo")
                for name in order:
                    results[name].append(child(name, model_dir, steps, args.threads))
                    print(f"  {size} round {round_ + 1}: {name} steps "
                          + " ".join(f"{s:.2f}" for s in results[name][-1]["step_s"]),
                          flush=True)
            summarise(size, results, args.warmup)


if __name__ == "__main__":
    main()
