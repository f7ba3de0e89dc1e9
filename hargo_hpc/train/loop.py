"""The RL loop: `train(config)` runs an experiment; `rl_step` is one step, read top to bottom:
`start_step` (gen, and what needs the sampling policy) then `finish_step` (the rest). With
rollout.max_staleness 1 the loop starts step t+1 before it finishes step t, so the bench works
on t's rewards while t+1 is generated (docs/training.md, "Overlapping rewards").

One step, in verl's phase names (each timed as `timing_s/<phase>`):

    gen           draw prompts_per_step prompts (the task mixture), template them (a GEMM
                  problem's at its SQD stage, with sqd.enabled), sample G completions of each
                  (the generation backend; ZeRO-3 weights gathered once)
    reward        the tasks' rewards (in process; GEMM through the handoff, each request with
                  its stage's forbidden techniques); unscored ones are dropped from the loss and
                  counted; SQD sees the results (`_sqd_step`: archive, advancement); DAPO's
                  overlong shaping when the preset has a buffer
    old_log_prob  the sampling policy's token log-probs, when the update is off-policy at all
                  (num_iterations > 1, several optimizer steps per batch, KL in the reward, or
                  max_staleness 1); else the update is exactly on-policy (ratio 1 on its first
                  pass). Taken right after generation, before any later update
    ref           the reference model's token log-probs, when the method needs them
    adv           KL folded into the reward (kl_in_reward presets), DAPO's dynamic sampling,
                  advantages (groups = the prompts), HARGO's weights
    update_actor  num_iterations passes over the batch: micro-batches of micro_batch_size rows,
                  grad_accum of them per optimizer step; each micro-batch loss uses the whole
                  optimizer step's denominators (tokens / sequences), so they add up to that
                  step's full-batch loss (the engine's summed-loss convention)

What the update does comes from the resolved preset (`algorithms.resolve_algorithm`): its
`loss` picks the update (`updates.UPDATES`: ppo/pg policy loss, dpo, sft), its other fields
the estimator, HARGO, KL, dynamic sampling and overlong shaping. Task labels never reach the
algorithms: per-task statistics are computed from the step's rows afterwards, for the log.

Around the steps `train` validates the config (one-line `TrainError`), claims the run directory
(a finished run is refused without `resume`; a resume must have the same config hash), loads
data, models and the engine, runs the SFT warm start (`training.sft_steps`), and writes metrics,
rollouts, checkpoints (every `save_every` steps, at the end, and on SIGUSR1/SIGTERM, after which
it returns `interrupted`: the CLI exits with `EXIT_REQUEUE`) and the HF export. docs/training.md
has the layout of the run directory and every metric.
"""

from __future__ import annotations

import contextlib
import json
import random
import signal
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from hargo_hpc.algorithms.advantages import compute_advantages
from hargo_hpc.algorithms.dapo import dynamic_sampling_filter, overlong_penalty
from hargo_hpc.algorithms.hargo import hargo_weights
from hargo_hpc.algorithms.hargo_labels import task_weight_shares
from hargo_hpc.algorithms.losses import kl_penalized_rewards
from hargo_hpc.algorithms.presets import ResolvedAlgorithm, resolve_algorithm
from hargo_hpc.config import ExperimentConfig, save_resolved
from hargo_hpc.files import write_atomic
from hargo_hpc.sqd import Result, Sqd, SqdError, StageSpec
from hargo_hpc.tasks.base import DataError, Example, Task
from hargo_hpc.tasks.data import load_tasks
from hargo_hpc.tasks.prompts import build_prompt, resolve_format
from hargo_hpc.tasks.registry import get_task
from hargo_hpc.tasks.split import MixtureSampler, split_examples
from hargo_hpc.train import checkpoint as ckpt
from hargo_hpc.train import distributed
from hargo_hpc.train import metrics as m
from hargo_hpc.train.logprobs import token_logprobs
from hargo_hpc.train.rollout import Generations, HFGenerateBackend, SamplingParams
from hargo_hpc.train.settings import check_batch_shape
from hargo_hpc.train.sft import (
    CORPORA,
    SftItem,
    SftSampler,
    build_sft_batch,
    sft_items,
    sft_update,
    split,
)
from hargo_hpc.train.updates import UPDATES, UpdateBatch, UpdateContext, training_mode

EXIT_REQUEUE = 75  # EX_TEMPFAIL: stopped by a signal after a checkpoint; rerun with --resume
CHECKPOINTS, EXPORT, METRICS, ROLLOUTS = "checkpoints", "export", "metrics.jsonl", "rollouts"
FINISHED, SFT_DIR, TENSORBOARD, SQD_DIR = "finished.json", "sft", "tensorboard", "sqd"
SQD_TASKS = ("gemm",)  # the tasks whose prompts SQD stages
# estimators that compare the completions of a prompt with each other (need G >= 2)
GROUP_ESTIMATORS = ("grpo", "dr_grpo", "rloo", "gpg", "reinforce_pp_baseline")

Log = Callable[[str], object]


class TrainError(ValueError):
    """A run that cannot start or continue; the message is one line for the user."""


@dataclass
class TrainResult:
    """Where a run's outputs are. `step`: the last RL step done; `interrupted`: stopped by a
    signal after a checkpoint (resume it); `already_finished`: a resume of a finished run."""

    run_dir: Path
    metrics: Path
    step: int
    checkpoint: Path | None
    export: Path | None
    interrupted: bool = False
    already_finished: bool = False


@dataclass(frozen=True)
class RunPaths:
    root: Path

    @property
    def checkpoints(self) -> Path:
        return self.root / CHECKPOINTS

    @property
    def metrics(self) -> Path:
        return self.root / METRICS

    @property
    def export(self) -> Path:
        return self.root / EXPORT

    @property
    def finished(self) -> Path:
        return self.root / FINISHED

    @property
    def sft(self) -> Path:
        return self.root / SFT_DIR

    def rollouts(self, step: int) -> Path:
        return self.root / ROLLOUTS / f"step_{step:06d}.jsonl"


@dataclass
class Run:
    """What the steps share, built once by `train`."""

    config: ExperimentConfig
    algorithm: ResolvedAlgorithm
    engine: Any
    tokenizer: Any
    reference: torch.nn.Module | None
    backend: HFGenerateBackend
    router: Any
    tasks: dict[str, Task]
    sampler: MixtureSampler
    prompt_format: str
    sampling: SamplingParams
    accum: int  # micro-batches per optimizer step (per rank)
    opt_steps: int  # optimizer steps per pass over a rollout batch
    logprob_micro: int
    needs_old: bool
    hargo_contrast: float | None = None
    hargo_label_means: dict[str, float] = field(default_factory=dict)  # the label control's
    prompts: dict[str, str] = field(default_factory=dict)
    sqd: Sqd | None = None  # SQD's stages for the GEMM prompts (sqd.enabled)
    sqd_dir: Path | None = None
    last_step_end: float = 0.0  # perf_counter at the end of the previous step's record

    def user_text(self, example: Example) -> str:
        return self.tasks[example.task].user_text(example)

    def update_context(self) -> UpdateContext:
        return UpdateContext(
            self.engine, self.algorithm, self.config.training.num_iterations, self.opt_steps,
            self.accum, self.sampling.temperature, self.config.rollout.max_new_tokens,
            self.tokenizer, self.prompt_format, self.user_text)

    def prompt_of(self, example: Example) -> str:
        """The templated prompt; a GEMM problem's states its SQD stage's techniques."""
        stage = self.stage_of(example)
        key = example.id if stage is None else f"{example.id}@{stage.name}"
        text = self.prompts.get(key)
        if text is None:
            user = (self.user_text(example) if stage is None else
                    self.tasks[example.task].prompt_for(example, stage.permitted, stage.forbid))
            text = self.prompts[key] = build_prompt(user, self.prompt_format, self.tokenizer)
        return text

    def stage_of(self, example: Example) -> StageSpec | None:
        """The SQD stage of `example`'s problem now; None without SQD or for a text task."""
        if self.sqd is None or example.task not in SQD_TASKS:
            return None
        return self.sqd.stage_of(example.meta["problem"]["name"])


# ---------------------------------------------------------------- checks and set-up


def resolve(config: ExperimentConfig, world_size: int = 1) -> tuple[ResolvedAlgorithm, int]:
    """The resolved method and the micro-batches per optimizer step; TrainError (one line)
    for a method/batch combination that cannot train."""
    try:
        algorithm = resolve_algorithm(config.algorithm)
        accum = check_batch_shape(config.rollout, config.training, world_size)
    except ValueError as err:
        raise TrainError(str(err)) from None
    groups = (algorithm.estimator in GROUP_ESTIMATORS or algorithm.hargo is not None
              or algorithm.loss == "dpo")
    if groups and config.rollout.num_generations < 2:
        what = f"estimator {algorithm.estimator!r}" if algorithm.loss != "dpo" else "DPO pairs"
        raise TrainError(
            f"algorithm {algorithm.name}: {what} compares the completions of a prompt, so "
            f"rollout.num_generations must be >= 2 (got {config.rollout.num_generations})"
        )
    return algorithm, accum


def _saved_hash(paths: RunPaths) -> str | None:
    try:
        return ckpt.config_hash((paths.root / "config.toml").read_text(encoding="utf-8"))
    except OSError:
        return None


def claim_run_dir(paths: RunPaths, config_hash: str, resume: bool) -> Path | None:
    """The checkpoint to continue from (None: start at step 0). TrainError when the directory
    holds a run and `resume` is not set, or a resume meets another config."""
    finished = paths.finished.is_file()
    latest = ckpt.latest_checkpoint(paths.checkpoints)
    holds_run = finished or latest is not None or paths.metrics.is_file()
    if not resume:
        if holds_run:
            what = "a finished run" if finished else "an unfinished run"
            raise TrainError(f"run directory {paths.root} holds {what}; pass --resume to "
                             "continue it, or set another run.name / run.dir")
        return None
    saved = _saved_hash(paths)
    if saved is not None and saved != config_hash:
        raise TrainError(f"refusing to resume: {paths.root}/config.toml hashes to {saved}, "
                         f"this config to {config_hash} (another experiment's run directory)")
    if latest is None:
        return None
    try:
        return ckpt.check_resume(paths.checkpoints, config_hash, paths.root)
    except ckpt.CheckpointError as err:
        raise TrainError(str(err)) from None


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


@dataclass
class Data:
    tasks: dict[str, Task]
    train: dict[str, list[Example]]  # by task, the training split


def load_data(config: ExperimentConfig, log: Log) -> Data:
    """The tasks of `data.tasks`, their examples and the training split (stratified)."""
    try:
        loaded = load_tasks(config.data.tasks, config.rewards, log=log)
        tasks = {name: get_task(name, config.rewards) for name in loaded}
        everything = [e for examples in loaded.values() for e in examples]
        train, _ = split_examples(everything, config.data.eval_fraction, config.run.seed)
    except (DataError, ValueError) as err:
        raise TrainError(str(err)) from None
    by_task = {name: [e for e in train if e.task == name] for name in loaded}
    return Data(tasks, by_task)


def drop_long_prompts(data: Data, tokenizer: Any, prompt_format: str, limit: int,
                      log: Log) -> None:
    """Remove training examples whose templated prompt exceeds `limit` tokens (logged)."""
    for name, examples in data.train.items():
        task = data.tasks[name]
        prompts = [build_prompt(task.user_text(e), prompt_format, tokenizer) for e in examples]
        lengths = [len(ids) for ids in
                   tokenizer(prompts, add_special_tokens=False)["input_ids"]] if prompts else []
        kept = [e for e, n in zip(examples, lengths, strict=True) if n <= limit]
        if len(kept) < len(examples):
            log(f"{name}: dropped {len(examples) - len(kept)} of {len(examples)} training "
                f"prompts longer than model.max_prompt_tokens = {limit}")
        if not kept:
            raise TrainError(f"task {name}: every training prompt is longer than "
                             f"model.max_prompt_tokens = {limit}")
        data.train[name] = kept


def load_models(config: ExperimentConfig, needs_reference: bool
                ) -> tuple[Any, Any, torch.nn.Module | None]:
    """(policy, tokenizer, reference or None) from `model.*`; TrainError for a bad path."""
    from hargo_hpc.train.models import LoraOptions, load_policy, load_reference

    section = config.model
    lora = None
    kwargs: dict[str, Any] = {"dtype": section.dtype,
                              "trust_remote_code": section.trust_remote_code,
                              "cache_dir": section.cache_dir or None}
    try:
        if section.lora_r:
            lora = LoraOptions(r=section.lora_r, alpha=section.lora_alpha,
                               dropout=section.lora_dropout,
                               target_modules=tuple(section.lora_target_modules))
        policy, tokenizer = load_policy(section.path, lora=lora, **kwargs)
        reference = load_reference(section.path, **kwargs) if needs_reference else None
    except ValueError as err:
        raise TrainError(str(err)) from None
    return policy, tokenizer, reference


def build_run_engine(config: ExperimentConfig, policy: Any, accum: int, total_steps: int,
                     run_dir: Path | None) -> Any:
    from hargo_hpc.train.engine import EngineError, build_engine

    t = config.training
    try:
        return build_engine(
            policy, zero_stage=t.zero_stage, precision=t.precision, lr=t.lr,
            weight_decay=t.weight_decay, grad_clip=t.grad_clip, grad_accum=accum,
            micro_batch_size=t.micro_batch_size, warmup_steps=t.warmup_steps,
            total_steps=total_steps, offload_optimizer=t.offload_optimizer,
            lr_schedule=t.lr_schedule, min_lr_ratio=t.min_lr_ratio,
            user_config=Path(t.deepspeed_config) if t.deepspeed_config else None,
            run_dir=run_dir,
        )
    except EngineError as err:
        raise TrainError(str(err)) from None


def _prompt_format(config: ExperimentConfig, tokenizer: Any) -> str:
    try:
        return resolve_format(config.data.prompt_format, tokenizer)
    except ValueError as err:
        raise TrainError(f"data.prompt_format: {err}") from None


class StopSignals:
    """SIGUSR1 and SIGTERM (Slurm's time limit, preemption) set `requested` instead of killing:
    the loop checkpoints at the end of the step and returns. Handlers restored on exit."""

    SIGNALS = (signal.SIGUSR1, signal.SIGTERM)

    def __init__(self) -> None:
        self.requested: str | None = None
        self._old: dict[int, Any] = {}

    def _handle(self, signum: int, frame: Any) -> None:
        self.requested = signal.Signals(signum).name

    def __enter__(self) -> StopSignals:
        with contextlib.suppress(ValueError):  # not the main thread: no handlers
            for sig in self.SIGNALS:
                self._old[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)


# ---------------------------------------------------------------- the run


def train(config: ExperimentConfig, *, resume: bool = False, log: Log = print,
          on_step: Callable[[dict[str, Any]], object] | None = None,
          progress: bool = True) -> TrainResult:
    """Run (or, with `resume`, continue) the experiment; see the module docstring. Under
    several ranks (WORLD_SIZE > 1) every rank calls it; it creates the process group unless
    one exists (and then destroys it at the end); docs/training.md, "Several ranks"."""
    paths = RunPaths(config.run_dir())
    env = distributed.detect()
    algorithm, accum = resolve(config, env.world_size)
    own_group = env.world_size > 1 and not torch.distributed.is_initialized()
    if own_group:
        distributed.init(env)
    try:
        return _train(config, paths, algorithm, accum, env, resume=resume,
                      log=log if env.is_main else _quiet, on_step=on_step, progress=progress)
    finally:
        if own_group:
            distributed.teardown()


def _quiet(_: str) -> None:
    """The log of ranks other than 0."""


class _Discard:
    """The metrics writer of ranks other than 0."""

    def write(self, record: dict[str, Any]) -> None:
        del record


def _train(config: ExperimentConfig, paths: RunPaths, algorithm: ResolvedAlgorithm, accum: int,
           env: distributed.DistEnv, *, resume: bool, log: Log,
           on_step: Callable[[dict[str, Any]], object] | None, progress: bool) -> TrainResult:
    from hargo_hpc.train.rewards import RewardRouter

    main, world = env.is_main, env.world_size
    config_hash = ckpt.config_hash(config.to_toml())
    checkpoint = claim_run_dir(paths, config_hash, resume)
    distributed.barrier()  # every rank has looked at the directory before rank 0 writes to it
    if paths.finished.is_file():  # resume of a finished run: nothing to do
        done = json.loads(paths.finished.read_text())
        return TrainResult(paths.root, paths.metrics, int(done["step"]),
                           Path(done["checkpoint"]), Path(done["export"]),
                           already_finished=True)
    t, r = config.training, config.rollout
    seed_everything(config.run.seed)
    data = load_data(config, log)
    policy, tokenizer, reference = load_models(config, algorithm.needs_reference)
    prompt_format = _prompt_format(config, tokenizer)
    drop_long_prompts(data, tokenizer, prompt_format, config.model.max_prompt_tokens, log)
    if algorithm.loss == "sft":
        _check_references(data)
    micro_batches = r.prompts_per_step * r.num_generations // world // t.micro_batch_size
    opt_steps = micro_batches // accum
    total_steps = t.sft_steps + t.steps * t.num_iterations * opt_steps
    if main:
        save_resolved(config, paths.root)
    engine = build_run_engine(config, policy, accum, total_steps, paths.root)
    if reference is not None:
        reference.to(engine.device)
    if world > 1:  # each rank samples its own completions (model weights are loaded already)
        torch.manual_seed(config.run.seed + 7919 * env.rank)
    weights = {spec.name: spec.weight for spec in config.data.tasks}
    try:
        sampler = MixtureSampler(data.train, weights, seed=config.run.seed)
    except ValueError as err:
        raise TrainError(str(err)) from None
    state = ckpt.TrainerState(step=0, config_hash=config_hash)
    if checkpoint is not None:
        state = ckpt.TrainerState.from_dict(engine.load_checkpoint(paths.checkpoints,
                                                                   checkpoint.name))
        sampler.load_state_dict(state.sampler)
    if main:
        m.truncate_after(paths.metrics, state.step)
        if state.step == 0 and t.sft_steps:  # the warm start logs afresh (not `hargo sft`'s)
            m.truncate_after(paths.sft / METRICS, 0)
    backend = HFGenerateBackend(engine.module, tokenizer, gather=engine.gathered_parameters,
                                synced_gpus=False)
    sampling = SamplingParams(max_new_tokens=r.max_new_tokens, temperature=r.temperature,
                              top_p=r.top_p, stop=tuple(r.stop))
    needs_old = (t.num_iterations > 1 or opt_steps > 1 or r.max_staleness > 0
                 or (algorithm.kl_in_reward and algorithm.kl_coef > 0))
    remote = any(task.remote for task in data.tasks.values())
    router = RewardRouter(  # rank 0 scores every rank's completions (rl_step)
        data.tasks, handoff_dir=config.handoff_dir() if remote else None,
        local_workers=getattr(config.handoff, "local_workers", 0) if remote else 0,
        log=log, progress=progress, handoff_settings=config.handoff,
        bench_settings=config.bench,
    ) if main else None
    run = Run(config, algorithm, engine, tokenizer, reference, backend, router, data.tasks,
              sampler, prompt_format, sampling, accum, opt_steps,
              r.logprob_micro_batch or t.micro_batch_size, needs_old,
              hargo_contrast=state.hargo.get("running_contrast"),
              hargo_label_means=dict(state.hargo.get("label_means") or {}))
    _start_sqd(run, data, paths, state, checkpoint)
    saved: Path | None = checkpoint
    writing = (m.MetricsWriter(paths.metrics, _tb_dir(paths)) if main
               else contextlib.nullcontext(_Discard()))
    with router or contextlib.nullcontext(), StopSignals() as stop, writing as writer:
        if state.step == 0 and t.sft_steps:
            warm_start(run, data, paths.sft / METRICS, t.sft_steps, stop, log)
            if stop.requested:
                return TrainResult(paths.root, paths.metrics, 0, None, None, interrupted=True)
        in_flight = _in_flight(run, data, checkpoint)  # max_staleness 1: the next step
        for step in range(state.step + 1, t.steps + 1):
            rollout = in_flight if in_flight is not None else start_step(run, step)
            in_flight = (start_step(run, step + 1)  # overlaps the bench's work on `step`
                         if r.max_staleness and step < t.steps else None)
            record, rows = finish_step(run, rollout)
            writer.write(record)
            if main:
                m.write_rollouts(paths.rollouts(step), rows)
            if on_step is not None and main:
                on_step(record)
            state = _state(run, step, config_hash)
            if world > 1:  # a signal seen by any rank stops them all, after the same step
                stop.requested = next((s for s in distributed.gather_objects(stop.requested)
                                       if s), None)
            if (t.save_every and step % t.save_every == 0) or stop.requested:
                saved = engine.save_checkpoint(
                    paths.checkpoints, f"step_{step:06d}", state.to_dict(),
                    None if in_flight is None else in_flight.state_dict())
            if stop.requested:
                log(f"{stop.requested}: checkpoint {saved} written; continue with --resume")
                return TrainResult(paths.root, paths.metrics, step, saved, None,
                                   interrupted=True)
        last = max(state.step, t.steps)
        if saved is None or saved.name != f"step_{last:06d}":
            saved = engine.save_checkpoint(paths.checkpoints, f"step_{last:06d}",
                                           _state(run, last, config_hash).to_dict())
    export = export_model(engine, tokenizer, paths.export, lora=bool(config.model.lora_r))
    if main:
        write_atomic(paths.finished, json.dumps({
            "step": last, "checkpoint": str(saved), "export": str(export),
            "metrics": str(paths.metrics)}, indent=1) + "\n")
    distributed.barrier()
    return TrainResult(paths.root, paths.metrics, last, saved, export)


def _start_sqd(run: Run, data: Data, paths: RunPaths, state: ckpt.TrainerState,
               checkpoint: Path | None) -> None:
    """SQD over the GEMM problems of the training split (sqd.enabled), its state restored
    from the checkpoint on resume; its results log cut back to the checkpoint's step."""
    names = [name for name in SQD_TASKS if name in data.train]
    if not run.config.sqd.enabled or not names:
        return
    problems = sorted({e.meta["problem"]["name"] for name in names for e in data.train[name]})
    run.sqd, run.sqd_dir = Sqd(run.config.sqd, problems), paths.root / SQD_DIR
    if state.sqd:
        try:
            run.sqd.load_state_dict(state.sqd, f"the SQD state of checkpoint {checkpoint}")
        except SqdError as err:
            raise TrainError(str(err)) from None
    if distributed.is_main():
        m.truncate_after(run.sqd_dir / "results.jsonl", state.step)


def _in_flight(run: Run, data: Data, checkpoint: Path | None) -> Rollout | None:
    """The step a checkpoint saved in flight (rollout.max_staleness 1), its rewards submitted
    again; None without one."""
    saved = None if checkpoint is None else ckpt.read_loop_state(checkpoint, distributed.rank())
    if saved is None:
        return None
    examples = {(e.task, e.id): e for items in data.train.values() for e in items}
    return resume_rollout(run, saved, examples)


def _tb_dir(paths: RunPaths) -> Path:
    return paths.root / TENSORBOARD


def _state(run: Run, step: int, config_hash: str) -> ckpt.TrainerState:
    hargo: dict[str, Any] = ({} if run.hargo_contrast is None
                             else {"running_contrast": run.hargo_contrast})
    if run.hargo_label_means:
        hargo["label_means"] = run.hargo_label_means
    return ckpt.TrainerState(step=step, config_hash=config_hash,
                             sampler=run.sampler.state_dict(), hargo=hargo, handoff_step=step,
                             sqd=None if run.sqd is None else run.sqd.state_dict(),
                             extra={"sft_done": True})


def _check_references(data: Data) -> None:
    """The `sft` preset needs a target for every prompt: reference answers, or a corpus."""
    for name, examples in data.train.items():
        if not any(e.output for e in examples) and name not in CORPORA:
            raise TrainError(f"algorithm sft trains on reference answers; task {name} has "
                             "none and no SFT corpus")


def export_model(engine: Any, tokenizer: Any, out: Path, *, lora: bool) -> Path:
    """The HF export: the engine's (gathered under ZeRO-3); with LoRA the adapters merged
    into a copy of the base (models.export_hf)."""
    if not lora:
        return Path(engine.export_hf(out, tokenizer))
    from hargo_hpc.train.models import export_hf

    with engine.gathered_parameters():
        if distributed.is_main():
            export_hf(engine.module, tokenizer, out)
    distributed.barrier()
    return out


# ---------------------------------------------------------------- one RL step


@dataclass
class Rollout:
    """A generated step on its way to the update (`start_step` → `finish_step`): every rank's
    prompts, this rank's generations and its share of them, the sampling policy's log-probs
    when the update needs them, and rank 0's submitted rewards."""

    step: int
    everything: list[Example]  # the step's prompts, the same on every rank
    prompts: list[str]  # their templated texts (a GEMM problem's at its stage then)
    stages: list[StageSpec | None]  # per row, the SQD stage its prompt had (None: no SQD)
    gen: Any  # this rank's Generations
    texts: list[str]  # every rank's completions, in row order
    old: Tensor | None  # this rank's rows under the sampling policy
    policy_version: int  # optimizer steps taken before generation
    pending: Any = None  # rank 0: the RewardRouter's PendingRewards; elsewhere None
    timer: m.PhaseTimer = field(default_factory=m.PhaseTimer)

    def rows(self) -> list[Example]:
        """The example of every row: each prompt's G completions in turn."""
        G = len(self.stages) // max(len(self.everything), 1)
        return [e for e in self.everything for _ in range(G)]

    def examples(self, rank: int, world: int) -> list[Example]:
        share = len(self.everything) // world
        return self.everything[rank * share:(rank + 1) * share]

    def state_dict(self) -> dict[str, Any]:
        """This rank's part as tensors and plain values (a checkpoint's `loop_rank<r>.pt`); the
        submitted rewards are not in it: `resume_rollout` submits them again."""
        return {"step": self.step, "policy_version": self.policy_version,
                "examples": [[e.task, e.id] for e in self.everything],
                "prompts": self.prompts, "texts": self.texts, "old": self.old,
                "stages": [None if s is None else s.name for s in self.stages],
                "gen": {name: getattr(self.gen, name)
                        for name in Generations.__dataclass_fields__}}


def rl_step(run: Run, step: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """One synchronous RL step (the phases of the module docstring): `finish_step` of
    `start_step`; returns the metrics record and the rollout rows."""
    return finish_step(run, start_step(run, step))


def start_step(run: Run, step: int) -> Rollout:
    """The `gen` phase and what must happen under the sampling policy: draw the prompts,
    sample G completions each, take their log-probs under this policy when the update needs
    them (off-policy updates; always with rollout.max_staleness 1, since the update then comes
    after the policy moved), and submit the rewards (GEMM requests go to the bench now).

    Under W ranks every rank draws the same prompts (the same sampler, the same seed) and
    generates for its contiguous share (rank r: prompts r·P/W … (r+1)·P/W − 1, whole groups).
    Rank 0 submits every rank's completions."""
    cfg = run.config
    G = cfg.rollout.num_generations
    timer = m.PhaseTimer()
    world, rank = distributed.world_size(), distributed.rank()
    with timer("gen"):
        everything = run.sampler.batch(cfg.rollout.prompts_per_step)  # the same on every rank
        prompts = [run.prompt_of(e) for e in everything]
        share = len(everything) // world
        gen = run.backend.generate(prompts[rank * share:(rank + 1) * share], G, run.sampling)
    texts = [t for part in distributed.gather_objects(list(gen.texts)) for t in part]
    with timer("old_log_prob"):
        old = _logprobs(run, run.engine.module, gen) if run.needs_old else None
    stages = [run.stage_of(e) for e in everything for _ in range(G)]
    rollout = Rollout(step, everything, prompts, stages, gen, texts, old,
                      run.engine.optimizer_steps, timer=timer)
    with timer("reward"):
        rollout.pending = _submit(run, rollout)
    return rollout


def resume_rollout(run: Run, state: dict[str, Any], examples: dict[tuple[str, str], Example]
                   ) -> Rollout:
    """The in-flight step of a checkpoint (`Rollout.state_dict`), its rewards submitted again
    under the same request ids (the handoff returns what it stored)."""
    stages = {s.name: s for s in run.config.sqd.stages}
    try:
        everything = [examples[(task, id_)] for task, id_ in state["examples"]]
    except KeyError as err:
        raise TrainError(f"the checkpoint's in-flight step {state['step']} names example "
                         f"{err.args[0]} that the training data no longer holds") from None
    rollout = Rollout(int(state["step"]), everything, list(state["prompts"]),
                      [None if n is None else stages[n] for n in state["stages"]],
                      Generations(**state["gen"]), list(state["texts"]), state["old"],
                      int(state["policy_version"]))
    with rollout.timer("reward"):
        rollout.pending = _submit(run, rollout)
    return rollout


def finish_step(run: Run, rollout: Rollout) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Everything after generation: wait for the rewards, reference log-probs, advantages,
    HARGO's weights, the update, and the step's record and rollout rows.

    Rewards, lengths, groups and, for HARGO, the reference log-probs are gathered, so every
    rank computes the same whole-batch advantages and weights, and keeps its own rows (`own`)
    for the update. The record and the rollout rows describe the whole batch."""
    cfg, alg, engine = run.config, run.algorithm, run.engine
    G, max_new = cfg.rollout.num_generations, cfg.rollout.max_new_tokens
    step, gen, texts, old, timer = (rollout.step, rollout.gen, rollout.texts, rollout.old,
                                    rollout.timer)
    everything, prompts = rollout.everything, rollout.prompts
    lr = engine.lr  # what this step's first optimizer step uses
    staleness = engine.optimizer_steps - rollout.policy_version
    world, rank = distributed.world_size(), distributed.rank()
    share = len(everything) // world
    examples = rollout.examples(rank, world)
    rows = rollout.rows()
    own = slice(rank * share * G, (rank + 1) * share * G)
    mask = gen.completion_mask.bool()  # this rank's rows
    lengths = _all_rows(gen.completion_lengths)
    groups = _all_rows(gen.group_index + rank * share)
    truncated = _all_rows(gen.truncated)
    device = gen.completion_ids.device

    with timer("reward"):
        scores = _collect(run, rollout, rows)
        task_rewards = torch.tensor(scores.rewards, dtype=torch.float32, device=device)
        scored = torch.tensor(scores.scored, dtype=torch.bool, device=device)
        rewards = task_rewards.clone()
        overlong = torch.zeros_like(rewards)
        buffer = alg.overlong_buffer_tokens(max_new)
        if buffer > 0:
            overlong = overlong_penalty(lengths, max_length=max_new, buffer=buffer,
                                        factor=alg.overlong_penalty).to(rewards)
            rewards = rewards + overlong

    with timer("ref"):
        ref = _logprobs(run, run.reference, gen) if run.reference is not None else None

    with timer("adv"):
        kl_penalty = torch.zeros_like(rewards)
        if alg.kl_in_reward and alg.kl_coef > 0:
            assert old is not None and ref is not None
            shaped = _all_rows(kl_penalized_rewards(
                rewards[own], old, ref, mask, kl_coef=alg.kl_coef,
                kl_estimator=alg.kl_estimator))  # type: ignore[arg-type]
            kl_penalty = rewards - shaped
            rewards = shaped
        keep = scored.clone()
        dyn: dict[str, float] = {}
        if alg.dynamic_sampling:
            informative, dyn = dynamic_sampling_filter(rewards[scored], groups[scored])
            keep[scored.nonzero().squeeze(-1)] = informative.to(device)
        idx = keep.nonzero().squeeze(-1)
        advantages = torch.zeros_like(rewards)
        if alg.estimator is not None and idx.numel():
            advantages[idx] = compute_advantages(alg.estimator, rewards[idx], groups[idx])
        weights, hargo_stats = None, {}
        if alg.hargo is not None and idx.numel():
            assert ref is not None
            all_ref, all_mask = _all_rows(ref), _all_rows(mask)
            control = {}  # the label control (an ablation only) is the one use of labels
            if alg.hargo.label_control:
                control = {"labels": [rows[i].task for i in idx.tolist()],
                           "label_means": run.hargo_label_means}
            w, hargo_stats = hargo_weights(
                rewards[idx], groups[idx], all_ref[idx], all_mask[idx],
                advantages=advantages[idx], running_contrast=run.hargo_contrast,
                **control, **alg.hargo.to_dict())
            weights = torch.ones_like(rewards)
            weights[idx] = w.to(rewards)
            run.hargo_contrast = float(hargo_stats["contrast_ref"])
            run.hargo_label_means = hargo_stats.get("label_means", run.hargo_label_means)
    loss_mask = mask & keep[own, None]

    with timer("update_actor"):
        batch = UpdateBatch(gen.input_ids, gen.attention_mask, gen.completion_start, loss_mask,
                            keep[own], rewards[own], groups[own], advantages[own],
                            None if weights is None else weights[own], old, ref, examples)
        update = UPDATES[alg.loss](run.update_context(), batch)

    # ------------------------------------------------ the log (task labels only from here on)
    tasks = [e.task for e in rows]
    task_list = m.as_float_list(task_rewards)
    scored_list = [bool(s) for s in scores.scored]
    length_list = [int(n) for n in lengths.cpu()]
    weight_list = m.per_row(weights)
    record: dict[str, Any] = dict.fromkeys(m.STEP_KEYS)
    record.update(step=step, optimizer_steps=engine.optimizer_steps, learning_rate=lr)
    record.update(m.reward_stats(task_list, scored_list, [int(g) for g in groups.cpu()]))
    record.update({
        "reward_shaped": m.masked_mean(rewards, scored.float()),
        "rewards/scored": float(sum(scored_list)),
        "rewards/unscored": float(len(scored_list) - sum(scored_list)),
        "rewards/overlong_penalty": float(overlong.mean()),
        "rewards/kl_penalty": float(kl_penalty.mean()),
        "rows/in_loss": float(keep.sum()),
        "advantages/abs_mean": m.masked_mean(advantages.abs(), keep.float()),
    })
    record.update(m.completion_stats(length_list, [bool(x) for x in truncated.cpu()]))
    if dyn:
        record["dynamic_sampling/dropped_group_fraction"] = dyn["dropped_group_fraction"]
        record["dynamic_sampling/dropped_response_fraction"] = dyn["dropped_response_fraction"]
    if weights is not None and hargo_stats:
        kept_w = weights[idx]
        record.update({
            "hargo/weight_mean": float(kept_w.mean()), "hargo/weight_min": float(kept_w.min()),
            "hargo/weight_max": float(kept_w.max()), "hargo/weight_std": hargo_stats["weight_std"],
            "hargo/contrast_ref": hargo_stats["contrast_ref"],
            "hargo/zero_contrast_fraction": hargo_stats["zero_contrast_fraction"],
            "hargo/confidence_clip_fraction": hargo_stats["confidence_clip_fraction"],
        })
    record.update(update)
    keep_list = [bool(k) for k in keep.cpu()]
    task_weights = None if weight_list is None else [
        w if k else None for w, k in zip(weight_list, keep_list, strict=True)]
    record.update(_task_stats(tasks, task_list, scored_list, length_list, task_weights))
    if weights is not None:
        for name, share in task_weight_shares(tasks, weights, advantages, keep).items():
            record[f"tasks/{name}/weight_share"] = share["share"]
            record[f"tasks/{name}/adv_share"] = share["adv_share"]
    record.update(_task_metrics(run, rows, texts, scores.records))
    record.update(m.status_histogram(scores.records))
    if run.sqd is not None:
        record.update(run.sqd.metrics())
    num_tokens = distributed.sum_across_ranks(float(gen.attention_mask.sum()))
    timing = timer.record(since=run.last_step_end)
    run.last_step_end = time.perf_counter()
    timing["timing_s/reward_wait"] = scores.wait_s
    record["rollout/staleness"] = staleness
    record.update(timing)
    record["num_tokens"] = num_tokens
    record["tokens_per_s"] = num_tokens / max(timing["timing_s/step"], 1e-9)

    rollout_rows = []
    for i, example in enumerate(rows):
        rollout_rows.append({
            "step": step, "index": i, "group": int(groups[i]), "task": example.task,
            "id": example.id, "prompt": prompts[i // G], "completion": texts[i],
            "reward": task_list[i], "scored": scored_list[i], "in_loss": keep_list[i],
            "advantage": float(advantages[i]),
            "weight": None if weight_list is None else weight_list[i],
            "length": length_list[i], "truncated": bool(truncated[i]),
            "status": None if scores.records[i] is None else scores.records[i].get("status"),
        })
    return record, rollout_rows


def _all_rows(rows: Tensor) -> Tensor:
    """Every rank's rows of `rows` ([n] or [n, T]) in rank order, on every rank; [n, T] ones
    padded with zeros (False) to the widest T. One process: `rows` itself."""
    if distributed.world_size() == 1:
        return rows
    parts = distributed.gather_objects(rows.detach().cpu())
    if rows.dim() == 2:
        width = max(part.shape[1] for part in parts)
        padded = []
        for part in parts:
            wide = part.new_zeros((part.shape[0], width))
            wide[:, :part.shape[1]] = part
            padded.append(wide)
        parts = padded
    return torch.cat(parts).to(rows.device)


def _submit(run: Run, rollout: Rollout) -> Any:
    """Rank 0 submits every completion of the step (text rewards in process, GEMM requests to
    the handoff, each with its prompt's SQD stage's forbidden techniques); None elsewhere."""
    if not distributed.is_main():
        return None
    rows = rollout.rows()
    forbidden = [None if s is None else s.forbid for s in rollout.stages] if run.sqd else None
    return run.router.submit(rollout.step, rows, rollout.texts, forbidden=forbidden)


def _collect(run: Run, rollout: Rollout, rows: Sequence[Example]) -> Any:
    """The RewardBatch of the whole step: rank 0 waits for it and the others receive it; under
    SQD the results go to SQD (`_sqd_step`) on every rank alike."""
    batch = run.router.collect(rollout.pending) if distributed.is_main() else None
    batch = distributed.broadcast_object(batch)
    if run.sqd is not None:
        _sqd_step(run, rollout.step, rows, rollout.texts, rollout.stages, batch)
    return batch


def _sqd_step(run: Run, step: int, rows: Sequence[Example], texts: Sequence[str],
              stages: Sequence[StageSpec | None], batch: Any) -> None:
    """A required technique of the stage a prompt had, missing from an ok kernel, costs the
    format-violation penalty (the bench judged what is forbidden, SQD what is required); then
    SQD sees the step's results (archive, advancement) and rank 0 writes its files."""
    assert run.sqd is not None
    results = []
    for i, (example, text, stage) in enumerate(zip(rows, texts, stages, strict=True)):
        record = batch.records[i]
        if example.task not in SQD_TASKS or record is None or stage is None:
            continue
        problem = example.meta["problem"]["name"]
        missing = (run.sqd.required_miss(problem, record, stage.name)
                   if record.get("status") == "ok" else [])
        if missing and batch.scored[i]:
            batch.rewards[i] = float(run.config.bench.penalties.format_violation)
        results.append(Result(problem, run.tasks[example.task].extract(text), record,
                              stage.name))
    for line in run.sqd.observe(step, results):
        if distributed.is_main():
            print(line, file=sys.stderr)
    if distributed.is_main() and run.sqd_dir is not None:
        run.sqd.save(run.sqd_dir, step, results)


def _task_stats(tasks: list[str], rewards: list[float], scored: list[bool],
                lengths: list[int], weights: list[float | None] | None) -> dict[str, Any]:
    """Per-task statistics; weights only over the rows in the loss (None elsewhere)."""
    out = m.task_stats(tasks, rewards, scored, lengths, None)
    if weights is not None:
        for name in dict.fromkeys(tasks):
            w = [x for x, t in zip(weights, tasks, strict=True) if t == name and x is not None]
            out[f"tasks/{name}/weight_mean"] = sum(w) / len(w) if w else None
            out[f"tasks/{name}/weight_min"] = min(w) if w else None
            out[f"tasks/{name}/weight_max"] = max(w) if w else None
    return out


def _task_metrics(run: Run, rows: Sequence[Example], texts: Sequence[str],
                  records: Sequence[dict[str, Any] | None]) -> dict[str, float]:
    """Each task's own metrics over this step's completions (bench records for remote tasks:
    only the scored ones)."""
    out: dict[str, float] = {}
    for name in dict.fromkeys(e.task for e in rows):
        task = run.tasks[name]
        picked = [i for i, e in enumerate(rows) if e.task == name
                  and (not task.remote or records[i] is not None)]
        if not picked:
            continue
        predictions: list[Any] = [records[i] if task.remote else texts[i] for i in picked]
        out.update(m.task_metrics(name, task.metrics([rows[i] for i in picked], predictions)))
    return out


def _logprobs(run: Run, model: torch.nn.Module | None, gen: Any) -> Tensor:
    """Token log-probs of the completions under `model`, no gradient, in micro-batches (the
    policy with its ZeRO-3 weights gathered once)."""
    assert model is not None
    gather = run.engine.gathered_parameters() if model is run.engine.module else (
        contextlib.nullcontext())
    with gather:
        return token_logprobs(model, gen.input_ids, gen.attention_mask, gen.completion_start,
                              run.logprob_micro, temperature=run.sampling.temperature)


# ---------------------------------------------------------------- SFT warm start


def sft_data(data: Data) -> list[SftItem]:
    """Every task's SFT rows (reference answers; GEMM's corpus) over the training split."""
    items: list[SftItem] = []
    try:
        for name, examples in data.train.items():
            items.extend(sft_items(data.tasks[name], examples))
    except ValueError as err:
        raise TrainError(str(err)) from None
    return items


def warm_start(run: Run, data: Data, path: Path, steps: int, stop: StopSignals,
               log: Log) -> None:
    """`steps` SFT optimizer steps (training.sft_steps) before RL, logged to `path`."""
    sft_loop(run.engine, run.tokenizer, run.prompt_format, sft_data(data),
             seed=run.config.run.seed, steps=steps, accum=run.accum,
             micro_batch_size=run.config.training.micro_batch_size,
             max_target_tokens=run.config.rollout.max_new_tokens, path=path, stop=stop)
    log(f"SFT warm start: {steps} steps done ({path})")


def sft_loop(engine: Any, tokenizer: Any, prompt_format: str, items: list[SftItem], *,
             seed: int, steps: int, accum: int, micro_batch_size: int,
             max_target_tokens: int, path: Path, stop: StopSignals | None = None,
             on_step: Callable[[dict[str, Any]], object] | None = None) -> None:
    """SFT steps of W × accum × micro_batch_size rows each (W ranks, every one drawing the same
    rows and training on its contiguous share), one metrics line per step from rank 0."""
    sampler = SftSampler(items, seed)
    world, rank = distributed.world_size(), distributed.rank()
    main = rank == 0
    with m.MetricsWriter(path) if main else contextlib.nullcontext(_Discard()) as writer:
        for step in range(1, steps + 1):
            start, lr = time.perf_counter(), engine.lr
            rows = split(sampler.batch(world * accum * micro_batch_size), world)[rank]
            batch = build_sft_batch(rows, tokenizer, prompt_format,
                                    max_target_tokens=max_target_tokens, device=engine.device)
            with training_mode(engine):
                stats = sft_update(engine, batch, accum=accum)
            record = {"step": step, **stats, "grad_norm": engine.grad_norm,
                      "learning_rate": lr,
                      "timing_s/step": time.perf_counter() - start}
            writer.write(record)
            if on_step is not None and main:
                on_step(record)
            if stop is not None and world > 1:  # a signal seen by any rank stops them all
                stop.requested = next((s for s in distributed.gather_objects(stop.requested)
                                       if s), None)
            if stop is not None and stop.requested:
                return


def sft_run(config: ExperimentConfig, *, log: Log = print,
            on_step: Callable[[dict[str, Any]], object] | None = None) -> TrainResult:
    """`hargo sft`: training.sft_steps SFT steps from model.path into `<run dir>/sft/`
    (metrics.jsonl, config.toml, the HF export in export/). Under several ranks every rank
    calls it (the process group as in `train`)."""
    t = config.training
    if t.sft_steps < 1:
        raise TrainError("training.sft_steps is 0: set it to the number of SFT steps")
    env = distributed.detect()
    try:
        accum = check_batch_shape(config.rollout, config.training, env.world_size)
    except ValueError as err:
        raise TrainError(str(err)) from None
    own_group = env.world_size > 1 and not torch.distributed.is_initialized()
    if own_group:
        distributed.init(env)
    try:
        return _sft_run(config, accum, log=log if env.is_main else _quiet, on_step=on_step)
    finally:
        if own_group:
            distributed.teardown()


def _sft_run(config: ExperimentConfig, accum: int, *, log: Log,
             on_step: Callable[[dict[str, Any]], object] | None) -> TrainResult:
    t = config.training
    paths = RunPaths(config.run_dir() / SFT_DIR)
    taken = paths.finished.is_file() or paths.metrics.is_file()
    distributed.barrier()  # every rank has looked at the directory before rank 0 writes to it
    if taken:
        raise TrainError(f"{paths.root} holds an SFT run already; set another run.name / "
                         "run.dir or remove it")
    seed_everything(config.run.seed)
    data = load_data(config, log)
    policy, tokenizer, _ = load_models(config, needs_reference=False)
    prompt_format = _prompt_format(config, tokenizer)
    items = sft_data(data)
    main = distributed.is_main()
    if main:
        save_resolved(config, paths.root)
    engine = build_run_engine(config, policy, accum, t.sft_steps, paths.root)
    with StopSignals() as stop:
        sft_loop(engine, tokenizer, prompt_format, items, seed=config.run.seed,
                 steps=t.sft_steps, accum=accum, micro_batch_size=t.micro_batch_size,
                 max_target_tokens=config.rollout.max_new_tokens, path=paths.metrics,
                 stop=stop, on_step=on_step)
    export = export_model(engine, tokenizer, paths.export, lora=bool(config.model.lora_r))
    steps = len(m.read_records(paths.metrics)) if main else 0
    if main:
        write_atomic(paths.finished, json.dumps({"step": steps, "export": str(export),
                                                 "metrics": str(paths.metrics)}, indent=1) + "\n")
    distributed.barrier()
    return TrainResult(paths.root, paths.metrics, steps, None, export,
                       interrupted=bool(stop.requested))


def sft_sample_texts(model: Any, tokenizer: Any, prompts: Sequence[str], max_new_tokens: int,
                     seed: int = 0) -> list[str]:
    """Greedy completions of `prompts` (for checks after SFT)."""
    backend = HFGenerateBackend(model, tokenizer)
    params = SamplingParams(max_new_tokens=max_new_tokens, do_sample=False, seed=seed)
    return backend.generate(list(prompts), 1, params).texts

