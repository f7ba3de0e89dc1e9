"""The SFT warm start before RL (`sft.steps` at `sft.lr`) and `hargo sft` (`sft_run`): SFT steps
on the tasks' reference answers and GEMM's corpus (the batches and the loss: `train.sft`).

`hargo sft` stops on SIGUSR1/SIGUSR2/SIGTERM after the step in progress, writes a checkpoint
(`<run dir>/sft/checkpoints/`: the engine, the RNG states, the step and the row sampler's
position) and returns `interrupted`; `sft_run(..., resume=True)` continues from it to the same
end as an uninterrupted run, and ends at once when the SFT has finished.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from hargo_hpc.config import ExperimentConfig, save_resolved, token_budgets
from hargo_hpc.config.training import check_batch_shape
from hargo_hpc.files import write_atomic
from hargo_hpc.runs import RunLayout
from hargo_hpc.train import metrics as m
from hargo_hpc.train.backend import checkpoint as ckpt
from hargo_hpc.train.backend import distributed
from hargo_hpc.train.rollout.generate import HFGenerateBackend, SamplingParams
from hargo_hpc.train.run import (
    Data,
    DiscardWriter,
    Log,
    RunContext,
    StopSignals,
    TrainError,
    TrainResult,
    quiet,
)
from hargo_hpc.train.setup import (
    build_run_engine,
    export_model,
    load_data,
    load_models,
    prompt_format_of,
    seed_everything,
)
from hargo_hpc.train.sft import (
    SftItem,
    SftSampler,
    build_sft_batch,
    fitting,
    sft_items,
    sft_update,
    split,
)
from hargo_hpc.train.updates import training_mode


def sft_data(data: Data, config: ExperimentConfig, tokenizer: Any, log: Log) -> list[SftItem]:
    """Every task's SFT rows (reference answers; GEMM's corpus) over the training split. Of a
    corpus, only the answers that fit the task's generation budget (`sft.fitting`): a corpus
    answer is a whole program, which the rollout, cut at that budget, could never finish (with
    the tiny model's tokenizer 30 of GEMM's 46 kernels are over 320 tokens; a warm start taught
    them sampled kernels cut short, 83 of 96 compile errors). When none fits (a pipeline check
    with a few tokens), all are kept, cut short, and a warning says so. With
    `sft.stage_prompts` (None: when `sqd.enabled`) a staged task's corpus pairs come twice, the
    second time under an SQD stage prompt the kernel keeps (`tasks.corpus.sft_examples`), so
    the warm start can read the prompts SQD will ask."""
    items: list[SftItem] = []
    budgets = token_budgets(config)
    staged = config.sft.stage_prompts
    stages = config.sqd.stages if (config.sqd.enabled if staged is None else staged) else None
    try:
        for name, examples in data.train.items():
            task = data.tasks[name]
            rows = sft_items(task, examples, stages)
            if task.sft_corpus:
                budget = budgets[name]
                kept = fitting(rows, tokenizer, budget)
                if not kept:
                    log(f"warning: {name}: no answer of its SFT corpus fits its {budget}-token "
                        "generation budget; SFT on them cut short (sampled, such a kernel never "
                        "compiles: raise rollout.max_new_tokens or the task's max_new_tokens)")
                elif len(kept) < len(rows):
                    log(f"{name}: SFT on {len(kept)} of {len(rows)} corpus rows, those whose "
                        f"answer fits the {budget}-token generation budget")
                    rows = kept
                if stages and task.staged:
                    plain = {task.user_text(e) for e in examples}
                    log(f"{name}: {sum(r.user_text not in plain for r in rows)} of {len(rows)} "
                        "SFT rows under an SQD stage prompt (sft.stage_prompts)")
            items.extend(rows)
    except ValueError as err:
        raise TrainError(str(err)) from None
    return items


def warm_start(ctx: RunContext, data: Data, path: Path, steps: int, stop: StopSignals,
               log: Log) -> bool:
    """`steps` SFT optimizer steps (sft.steps) before RL, logged to `path`; the engine's
    schedule runs them at sft.lr (`build_run_engine`). Whether all ran (False: stopped, the
    same answer on every rank)."""
    done, _ = sft_loop(ctx.engine, ctx.tokenizer, ctx.prompt_format,
                       sft_data(data, ctx.config, ctx.tokenizer, log),
                       seed=ctx.config.run.seed, steps=steps, accum=ctx.accum,
                       micro_batch_size=ctx.config.training.micro_batch_size,
                       budgets=token_budgets(ctx.config), path=path, stop=stop)
    log(f"SFT warm start: {done} of {steps} steps done ({path})")
    return done == steps


def sft_loop(engine: Any, tokenizer: Any, prompt_format: str, items: list[SftItem], *,
             seed: int, steps: int, accum: int, micro_batch_size: int,
             budgets: Mapping[str, int], path: Path, stop: StopSignals | None = None,
             on_step: Callable[[dict[str, Any]], object] | None = None,
             sampler: SftSampler | None = None, done: int = 0) -> tuple[int, SftSampler]:
    """SFT steps `done`+1 .. `steps` of W × accum × micro_batch_size rows each (W ranks, every
    one drawing the same rows and training on its contiguous share; `sampler` continues a
    stopped run's rows; each target cut at its task's budget in `budgets`, `token_budgets`),
    one metrics line per step from rank 0. Returns the last step done (fewer than `steps`
    after a stop) and the sampler."""
    sampler = sampler or SftSampler(items, seed)
    world, rank = distributed.world_size(), distributed.rank()
    main = rank == 0
    with m.MetricsWriter(path) if main else contextlib.nullcontext(DiscardWriter()) as writer:
        for step in range(done + 1, steps + 1):
            start, lr = time.perf_counter(), engine.lr
            rows = split(sampler.batch(world * accum * micro_batch_size), world)[rank]
            batch = build_sft_batch(rows, tokenizer, prompt_format, max_target_tokens=budgets,
                                    device=engine.device)
            with training_mode(engine):
                stats = sft_update(engine, batch, accum=accum)
            record = {"step": step, **stats, "grad_norm": engine.grad_norm,
                      "learning_rate": lr,
                      "timing_s/step": time.perf_counter() - start}
            writer.write(record)
            done = step
            if on_step is not None and main:
                on_step(record)
            if stop is None:
                continue
            stopping = stop.requested  # one decision per step, every rank: any rank's request
            if world > 1:
                stopping = next((s for s in distributed.gather_objects(stopping) if s), None)
            if stopping:
                stop.requested = stopping
                break
    return done, sampler


def sft_run(config: ExperimentConfig, *, resume: bool = False, log: Log = print,
            on_step: Callable[[dict[str, Any]], object] | None = None) -> TrainResult:
    """`hargo sft`: sft.steps SFT steps at sft.lr from model.path into `<run dir>/sft/`
    (metrics.jsonl, config.toml, the HF export in export/); `resume`: continue a stopped one
    (module docstring). Under several ranks every rank calls it (the process group as in
    `train`)."""
    if config.sft.steps < 1:
        raise TrainError("sft.steps is 0: set it to the number of SFT steps")
    env = distributed.detect()
    try:
        accum = check_batch_shape(config.rollout, config.training, env.world_size)
    except ValueError as err:
        raise TrainError(str(err)) from None
    own_group = env.world_size > 1 and not torch.distributed.is_initialized()
    if own_group:
        distributed.init(env)
    try:
        return _sft_run(config, accum, resume=resume, log=log if env.is_main else quiet,
                        on_step=on_step)
    finally:
        if own_group:
            distributed.teardown()


def _sft_run(config: ExperimentConfig, accum: int, *, resume: bool, log: Log,
             on_step: Callable[[dict[str, Any]], object] | None) -> TrainResult:
    t = config.training
    paths = RunLayout(config.run_dir()).sft
    config_hash = ckpt.config_hash(config.to_toml())
    finished = paths.finished.is_file()
    checkpoint = ckpt.latest_checkpoint(paths.checkpoints)
    # a checkpoint alone counts too (written by a run stopped as its directory was removed)
    taken = finished or paths.metrics.is_file() or checkpoint is not None
    distributed.barrier()  # every rank has looked at the directory before rank 0 writes to it
    if finished and resume:
        done = json.loads(paths.finished.read_text())
        return TrainResult(paths.root, paths.metrics, int(done["step"]), None,
                           Path(done["export"]), already_finished=True)
    if taken and not resume:
        raise TrainError(f"{paths.root} holds an SFT run already; continue it with --resume, "
                         "or set another run.name / run.dir")
    if checkpoint is not None:
        try:
            ckpt.check_resume(paths.checkpoints, config_hash, paths.root)
        except ckpt.CheckpointError as err:
            raise TrainError(str(err)) from None
    seed_everything(config.run.seed)
    data = load_data(config, log)
    policy, tokenizer, _ = load_models(config, needs_reference=False)
    prompt_format = prompt_format_of(config, tokenizer)
    items = sft_data(data, config, tokenizer, log)
    main = distributed.is_main()
    if main:
        save_resolved(config, paths.root)
    engine = build_run_engine(config, policy, accum, config.sft.steps, paths.root, sft_only=True)
    sampler, done = SftSampler(items, config.run.seed), 0
    if checkpoint is not None:
        saved = engine.load_checkpoint(paths.checkpoints, checkpoint.name)
        sampler.load_state_dict(saved["sampler"])
        done = int(saved["step"])
        log(f"SFT resumes after step {done} ({checkpoint})")
    if main:
        m.truncate_after(paths.metrics, done)
    with StopSignals() as stop:
        done, sampler = sft_loop(
            engine, tokenizer, prompt_format, items, seed=config.run.seed,
            steps=config.sft.steps, accum=accum, micro_batch_size=t.micro_batch_size,
            budgets=token_budgets(config), path=paths.metrics, stop=stop,
            on_step=on_step, sampler=sampler, done=done)
    if done < config.sft.steps:  # stopped (the ranks agreed in sft_loop)
        saved_at = engine.save_checkpoint(paths.checkpoints, f"step_{done:06d}", {
            "step": done, "sampler": sampler.state_dict(), "config_hash": config_hash})
        log(f"{stop.requested}: SFT checkpoint {saved_at} written; continue with --resume")
        return TrainResult(paths.root, paths.metrics, done, saved_at, None, interrupted=True)
    export = export_model(engine, tokenizer, paths.export, lora=bool(config.model.lora_r))
    if main:
        write_atomic(paths.finished, json.dumps({"step": done, "export": str(export),
                                                 "metrics": str(paths.metrics)}, indent=1) + "\n")
    distributed.barrier()
    return TrainResult(paths.root, paths.metrics, done, None, export)


def sft_sample_texts(model: Any, tokenizer: Any, prompts: Sequence[str], max_new_tokens: int,
                     seed: int = 0) -> list[str]:
    """Greedy completions of `prompts` (for checks after SFT)."""
    backend = HFGenerateBackend(model, tokenizer)
    params = SamplingParams(max_new_tokens=max_new_tokens, do_sample=False, seed=seed)
    return backend.generate(list(prompts), 1, params).texts
