"""The RL loop: `train(config)` runs an experiment.

Around the steps (`train.step.rl_step`: `start_step` then `finish_step`, sharing a
`RunContext` and changing a `LoopState`) `train` validates the config, claims the run
directory (or resumes it), sets up data, models and engine, runs the SFT warm start, and
writes metrics, rollouts, checkpoints and the HF export; a stop signal checkpoints and returns
`interrupted` (`EXIT_REQUEUE`). The step, `rollout.max_staleness`, stop requests and the run
directory: docs/training.md.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from hargo_hpc.algorithms.presets import ResolvedAlgorithm
from hargo_hpc.algorithms.weighting import make_weighting
from hargo_hpc.config import ExperimentConfig, generation_budget, save_resolved
from hargo_hpc.errors import EXIT_DEADLINE, EXIT_REQUEUE
from hargo_hpc.files import write_atomic
from hargo_hpc.runs import RunLayout
from hargo_hpc.tasks.registry import get_task
from hargo_hpc.tasks.split import MixtureSampler
from hargo_hpc.train import metrics as m
from hargo_hpc.train.backend import checkpoint as ckpt
from hargo_hpc.train.backend import distributed
from hargo_hpc.train.checkpoint_hf import HF
from hargo_hpc.train.deadline import REASON as DEADLINE_REASON
from hargo_hpc.train.deadline import Deadline, lead_advice
from hargo_hpc.train.rollout.generate import HFGenerateBackend, SamplingParams, eos_ids_of
from hargo_hpc.train.run import (
    Data,
    DiscardWriter,
    Log,
    LoopState,
    RunContext,
    StepInterrupted,
    StopSignals,
    TrainError,
    TrainResult,
    quiet,
)
from hargo_hpc.train.setup import (
    build_run_engine,
    check_references,
    claim_run_dir,
    drop_long_prompts,
    export_model,
    load_data,
    load_models,
    place_reference,
    prompt_format_of,
    resolve,
    seed_everything,
)
from hargo_hpc.train.sft_run import sft_run, sft_sample_texts, warm_start
from hargo_hpc.train.sqd_run import SqdRun
from hargo_hpc.train.step import Rollout, finish_step, resume_rollout, start_step

if TYPE_CHECKING:
    from hargo_hpc.train.rollout.local_workers import LocalWorkers

# the entry points (the CLI, evaluation, tests); one step is train.step, the set-up train.setup
__all__ = ["EXIT_DEADLINE", "EXIT_REQUEUE", "TrainError", "TrainResult", "export_model", "sft_run",
           "sft_sample_texts", "train"]


def train(config: ExperimentConfig, *, resume: bool = False, log: Log = print,
          on_step: Callable[[dict[str, Any]], object] | None = None,
          progress: bool = True) -> TrainResult:
    """Run (or, with `resume`, continue) the experiment (docs/training.md). Under
    several ranks (WORLD_SIZE > 1) every rank calls it; it creates the process group unless
    one exists (and then destroys it at the end); docs/training.md, "Several ranks"."""
    paths = config.layout()
    env = distributed.detect()
    algorithm, accum = resolve(config, env.world_size)
    own_group = env.world_size > 1 and not torch.distributed.is_initialized()
    if own_group:  # ranks >= 1 wait in a broadcast while rank 0 waits for the bench
        remote = any(get_task(spec.name).remote for spec in config.data.tasks)
        distributed.init(env, timeout_s=distributed.group_timeout_s(
            config.handoff.step_timeout_s if remote else None))
    try:
        return _train(config, paths, algorithm, accum, env, resume=resume,
                      log=log if env.is_main else quiet, on_step=on_step, progress=progress)
    finally:
        if own_group:
            distributed.teardown()


def _trackers(config: ExperimentConfig, paths: RunLayout, log: Log) -> list[Any]:
    """Rank 0's trackers (`logging.report_to`), and where to look at each, said once."""
    from hargo_hpc.train.trackers import TrackerError, make_trackers, where_to_look

    try:
        made = make_trackers(config, paths)
    except TrackerError as err:
        raise TrainError(str(err)) from None
    for line in where_to_look(config, paths):
        log(f"metrics: {line}")
    return made


def _train(config: ExperimentConfig, paths: RunLayout, algorithm: ResolvedAlgorithm, accum: int,
           env: distributed.DistEnv, *, resume: bool, log: Log,
           on_step: Callable[[dict[str, Any]], object] | None, progress: bool) -> TrainResult:
    config_hash = ckpt.config_hash(config.to_toml())
    checkpoint = claim_run_dir(paths, config_hash, resume)
    distributed.barrier()  # every rank has looked at the directory before rank 0 writes to it
    if paths.finished.is_file():  # resume of a finished run: nothing to do
        done = json.loads(paths.finished.read_text())
        return TrainResult(paths.root, paths.metrics, int(done["step"]),
                           Path(done["checkpoint"]), Path(done["export"]),
                           already_finished=True)
    seed_everything(config.run.seed)
    data = load_data(config, log)
    stop = StopSignals()
    ctx, state, workers = _start(config, paths, algorithm, accum, env, data, checkpoint,
                                 stop=stop, log=log, progress=progress)
    t, main = config.training, env.is_main
    saved: Path | None = checkpoint
    writing = (m.MetricsWriter(paths.metrics, _trackers(config, paths, log),
                               running={"tokens/step": "num_tokens"}) if main
               else contextlib.nullcontext(DiscardWriter()))
    engine_of_rollouts = (contextlib.closing(ctx.backend) if hasattr(ctx.backend, "close")
                          else contextlib.nullcontext())  # vLLM's: shut down with the run
    with workers or contextlib.nullcontext(), stop, writing as writer, engine_of_rollouts:
        if state.step == 0 and config.sft.steps and not warm_start(
                ctx, data, paths.sft.metrics, config.sft.steps, stop, log):
            return TrainResult(paths.root, paths.metrics, 0, None, None, interrupted=True)
        in_flight = _in_flight(ctx, state, data, checkpoint)  # a step saved in flight
        step_s = save_s = 0.0  # the last step's and save's times: what a stop must cover
        advise = bool(os.environ.get("SLURM_JOB_ID"))  # once, in a Slurm job
        deadline = Deadline.of_job(config.slurm.train.signal_lead_s) if main else None

        def save(loop_state: dict[str, Any] | None = None) -> Path:
            """Checkpoint the steps done (and a step in flight); keep the newest
            `save_total_limit`; say when a step and a save outlast the time-limit signal's
            lead."""
            nonlocal advise, save_s
            started = time.monotonic()
            path = ctx.engine.save_checkpoint(paths.checkpoints, f"step_{state.step:06d}",
                                              state.trainer_state(config_hash).to_dict(),
                                              loop_state)
            if t.export_checkpoints:  # every rank (the export gathers under ZeRO-3)
                export_model(ctx.engine, ctx.tokenizer, path / HF,
                             lora=bool(config.model.lora_r))
            save_s = time.monotonic() - started
            if main:
                for name in ckpt.prune(paths.checkpoints, t.save_total_limit):
                    log(f"checkpoint {name} removed (training.save_total_limit "
                        f"{t.save_total_limit})")
                advice = lead_advice(config.slurm.train.signal_lead_s, step_s, save_s)
                if advise and advice is not None:
                    log(advice)
                    advise = False
            return path

        def stop_in_flight(rollout: Rollout) -> TrainResult:
            """Checkpoint the steps done and `rollout` in flight (resumed from its rewards)."""
            saved = save(rollout.state_dict())
            log(f"{stop.requested}: stopped in step {rollout.step}; checkpoint {saved} "
                "written; continue with --resume")
            return TrainResult(paths.root, paths.metrics, state.step, saved, None,
                               interrupted=True, stopped_by=stop.requested)

        for step in range(state.step + 1, t.steps + 1):
            rollout = in_flight if in_flight is not None else start_step(ctx, state, step)
            in_flight = (start_step(ctx, state, step + 1)  # overlaps the bench's work on `step`
                         if config.rollout.max_staleness and step < t.steps else None)
            if in_flight is None and _agreed(stop, env):  # between its phases: generated
                return stop_in_flight(rollout)
            try:
                record, rows = finish_step(ctx, state, rollout)
            except StepInterrupted:  # the reward wait, cut short (only with nothing else in flight)
                return stop_in_flight(rollout)
            state.step = step
            step_s = float(record.get("timing_s/step") or 0.0)
            writer.write(record)
            if main:
                m.write_rollouts(paths.rollouts(step), rows)
            if on_step is not None and main:
                on_step(record)
            if deadline is not None and stop.requested is None and \
                    deadline.reached(step_s, save_s):  # before the job's end, on its own
                stop.requested = DEADLINE_REASON
            stopping = _agreed(stop, env)  # one decision for the step's end, every rank
            if (t.save_every and step % t.save_every == 0) or stopping:
                saved = save(None if in_flight is None else in_flight.state_dict())
            if stopping:
                log(f"{stopping}: checkpoint {saved} written; continue with --resume")
                return TrainResult(paths.root, paths.metrics, step, saved, None,
                                   interrupted=True, stopped_by=stopping)
        state.step = max(state.step, t.steps)
        if saved is None or saved.name != f"step_{state.step:06d}":
            saved = save()
    export = export_model(ctx.engine, ctx.tokenizer, paths.export, lora=bool(config.model.lora_r))
    if main:
        write_atomic(paths.finished, json.dumps({
            "step": state.step, "checkpoint": str(saved), "export": str(export),
            "metrics": str(paths.metrics)}, indent=1) + "\n")
    distributed.barrier()
    return TrainResult(paths.root, paths.metrics, state.step, saved, export)


def _start(config: ExperimentConfig, paths: RunLayout, algorithm: ResolvedAlgorithm, accum: int,
           env: distributed.DistEnv, data: Data, checkpoint: Path | None, *, stop: StopSignals,
           log: Log, progress: bool) -> tuple[RunContext, LoopState, LocalWorkers | None]:
    """Models, the engine, the sampler, the weighting and SQD (their state from `checkpoint`
    on resume), rank 0's reward router and local bench workers (not started yet): what the
    steps share (`RunContext`), what they change (`LoopState`), and the workers."""
    from hargo_hpc.train.rollout.rewards import RewardRouter

    t, r = config.training, config.rollout
    policy, tokenizer, reference = load_models(config, algorithm.needs_reference)
    prompt_format = prompt_format_of(config, tokenizer)
    drop_long_prompts(data, tokenizer, prompt_format, config.model.max_prompt_tokens, log)
    if algorithm.loss == "sft":
        check_references(data)
    micro_batches = r.prompts_per_step * r.num_generations // env.world_size // t.micro_batch_size
    opt_steps = micro_batches // accum
    if env.is_main:
        save_resolved(config, paths.root)
    engine = build_run_engine(config, policy, accum, t.steps * t.num_iterations * opt_steps,
                              paths.root, sft_steps=config.sft.steps)
    reference = place_reference(config, reference, engine.device)
    weights = {spec.name: spec.weight for spec in config.data.tasks}
    try:
        sampler = MixtureSampler(data.train, weights, seed=config.run.seed)
    except ValueError as err:
        raise TrainError(str(err)) from None
    state = LoopState(step=0, sampler=sampler, weighting=make_weighting(algorithm),
                      sqd=SqdRun.of(config.sqd, data.train, data.tasks, paths.sqd,
                                    config.bench.stage_penalty(), log))
    if checkpoint is not None:
        saved = engine.load_checkpoint(paths.checkpoints, checkpoint.name)
        state.restore(ckpt.TrainerState.from_dict(saved), checkpoint)
    if env.is_main:
        m.truncate_after(paths.metrics, state.step)
        if state.step == 0 and config.sft.steps:  # the warm start logs afresh (not `hargo sft`'s)
            m.truncate_after(paths.sft.metrics, 0)
        if state.sqd is not None:
            state.sqd.truncate_after(state.step)
    handoff_dir = (config.handoff_dir() if any(task.remote for task in data.tasks.values())
                   else None)
    workers = _local_workers(config, handoff_dir, log) if env.is_main else None
    router = RewardRouter(  # rank 0 scores every rank's completions (finish_step)
        data.tasks, handoff_dir=handoff_dir, log=log, progress=progress,
        handoff_settings=config.handoff, liveness=None if workers is None else workers.check,
        # a stop cuts the reward wait short only when no later step is in flight already
        should_stop=None if r.max_staleness else lambda: stop.requested is not None,
    ) if env.is_main else None
    sampling = SamplingParams(max_new_tokens=r.max_new_tokens, temperature=r.temperature,
                              top_p=r.top_p, stop=tuple(r.stop))
    budgets = {spec.name: dataclasses.replace(sampling, max_new_tokens=budget.max_new_tokens,
                                              stop=budget.stop)
               for spec in config.data.tasks
               for budget in [generation_budget(spec, r)]}
    ctx = RunContext(
        config=config, algorithm=algorithm, engine=engine, tokenizer=tokenizer,
        reference=reference,
        backend=rollout_backend(config, engine, tokenizer),
        router=router, tasks=data.tasks, prompt_format=prompt_format,
        sampling=sampling, budgets=budgets,
        accum=accum, opt_steps=opt_steps, logprob_micro=r.logprob_micro_batch or t.micro_batch_size,
        needs_old=(t.num_iterations > 1 or opt_steps > 1 or r.max_staleness > 0
                   or (algorithm.kl_in_reward and algorithm.kl_coef > 0)
                   or r.backend != "hf"),  # another engine's samples: the trainer rescores
    )
    return ctx, state, workers


def rollout_backend(config: ExperimentConfig, engine: Any, tokenizer: Any) -> Any:
    """`rollout.backend`'s GenerationBackend: HF generate on the policy itself (ZeRO-3: its
    weights gathered once a call), or a vLLM engine beside it (`vllm_backend.Colocated`)."""
    if config.rollout.backend == "hf":
        return HFGenerateBackend(engine.module, tokenizer, gather=engine.gathered_parameters,
                                 synced_gpus=False)
    from hargo_hpc.train.model.models import model_directory
    from hargo_hpc.train.rollout.vllm_backend import Colocated, VLLMBackend, VLLMUnavailable

    r, model = config.rollout, config.model
    try:
        directory = model_directory(model.path, model.cache_dir or None, model.revision)
        backend = VLLMBackend(
            str(directory), tokenizer, dtype=model.dtype, seed=config.run.seed,
            max_model_len=r.vllm_max_model_len or None,
            gpu_memory_utilization=r.vllm_gpu_memory_utilization,
            kv_cache_gib=r.vllm_kv_cache_gib, device=engine.device,
            eos_token_ids=eos_ids_of(engine.module, tokenizer))  # as the HF backend ends rows
    except (VLLMUnavailable, ValueError) as err:
        raise TrainError(f"rollout.backend = \"vllm\": {err}") from None
    return Colocated(backend, engine)


def _local_workers(config: ExperimentConfig, handoff_dir: Path | None,
                   log: Log) -> LocalWorkers | None:
    """Rank 0's handoff.local_workers bench workers on the run's handoff (None: none)."""
    if handoff_dir is None or not config.handoff.local_workers:
        return None
    from hargo_hpc.train.rollout.local_workers import LocalWorkers

    return LocalWorkers(handoff_dir, config.handoff.local_workers, bench=config.bench,
                        handoff=config.handoff, log=log)


def _agreed(stop: StopSignals, env: distributed.DistEnv) -> str | None:
    """Whether to stop here, decided once for every rank: any rank's request, gathered (a
    signal seen by one rank stops them all at the same point). The decision is returned and
    kept in `stop.requested`; callers act on the returned value, never on the attribute a
    signal may set again meanwhile on one rank."""
    agreed = stop.requested
    if env.world_size > 1:
        agreed = next((s for s in distributed.gather_objects(agreed) if s), None)
    stop.requested = stop.requested or agreed
    return agreed


def _in_flight(ctx: RunContext, state: LoopState, data: Data,
               checkpoint: Path | None) -> Rollout | None:
    """The step a checkpoint saved in flight (with rollout.max_staleness 1, or stopped between
    its phases), its rewards submitted again; None without one."""
    saved = None if checkpoint is None else ckpt.read_loop_state(checkpoint, distributed.rank())
    if saved is None:
        return None
    examples = {(e.task, e.id): e for items in data.train.values() for e in items}
    return resume_rollout(ctx, state, saved, examples)
