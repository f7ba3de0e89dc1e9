"""The checks and set-up before a run's first step: the resolved method, the run directory's
claim, data, models, the engine and the HF export. Each failure is a one-line `TrainError`.
"""

from __future__ import annotations

import contextlib
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch

from hargo_hpc.algorithms import registry
from hargo_hpc.algorithms.presets import OWN_UPDATES, ResolvedAlgorithm, resolve_algorithm
from hargo_hpc.config import ExperimentConfig
from hargo_hpc.config.training import check_batch_shape
from hargo_hpc.runs import RunLayout
from hargo_hpc.tasks.base import DataError
from hargo_hpc.tasks.data import load_tasks
from hargo_hpc.tasks.prompts import build_prompt, resolve_format
from hargo_hpc.tasks.registry import get_task, task_class
from hargo_hpc.tasks.split import split_examples
from hargo_hpc.train.backend import checkpoint as ckpt
from hargo_hpc.train.backend import distributed
from hargo_hpc.train.memory import loads_partitioned
from hargo_hpc.train.run import Data, Log, TrainError
from hargo_hpc.train.sft import has_target


def resolve(config: ExperimentConfig, world_size: int = 1) -> tuple[ResolvedAlgorithm, int]:
    """The resolved method and the micro-batches per optimizer step; TrainError (one line)
    for a method/batch combination that cannot train."""
    try:
        algorithm = resolve_algorithm(config.algorithm)
        accum = check_batch_shape(config.rollout, config.training, world_size)
    except ValueError as err:
        raise TrainError(str(err)) from None
    remote = [s.name for s in config.data.tasks if task_class(s.name).remote]
    if algorithm.refill_rounds > 1 and remote:
        raise TrainError(f"algorithm.refill_rounds {algorithm.refill_rounds}: task "
                         f"{remote[0]} is rewarded by the bench, which takes one batch per "
                         "step; refill works with text tasks only (set refill_rounds = 1)")
    try:  # a grouped estimator compares the completions of a prompt with each other
        grouped = algorithm.estimator is not None and registry.is_grouped(algorithm.estimator)
        if algorithm.loss not in OWN_UPDATES:
            registry.policy_loss(algorithm.loss)  # a spec of the user's own: it loads
    except ValueError as err:
        raise TrainError(str(err)) from None
    groups = grouped or algorithm.hargo is not None or algorithm.loss == "dpo"
    if groups and config.rollout.num_generations < 2:
        what = f"estimator {algorithm.estimator!r}" if algorithm.loss != "dpo" else "DPO pairs"
        raise TrainError(
            f"algorithm {algorithm.name}: {what} compares the completions of a prompt, so "
            f"rollout.num_generations must be >= 2 (got {config.rollout.num_generations})"
        )
    return algorithm, accum


def _saved_hash(paths: RunLayout) -> str | None:
    try:
        return ckpt.config_hash(paths.config.read_text(encoding="utf-8"))
    except OSError:
        return None


def claim_run_dir(paths: RunLayout, config_hash: str, resume: bool) -> Path | None:
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
        raise TrainError(f"refusing to resume: {paths.config} hashes to {saved}, "
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


def load_data(config: ExperimentConfig, log: Log) -> Data:
    """The tasks of `data.tasks`, their examples and the training split (stratified)."""
    try:
        loaded = load_tasks(config.data.tasks, config.rewards, log=log)
        tasks = {name: get_task(name, config.rewards) for name in loaded}
        everything = [e for examples in loaded.values() for e in examples]
        train, _ = split_examples(everything, config.data.eval_fractions(), config.split_seed())
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
    from hargo_hpc.train.model.models import LoraOptions, load_policy, load_reference

    section = config.model
    lora = None
    kwargs: dict[str, Any] = {"dtype": section.dtype,
                              "trust_remote_code": section.trust_remote_code,
                              "cache_dir": section.cache_dir or None,
                              "revision": section.revision}
    try:
        if section.lora_r:
            lora = LoraOptions(r=section.lora_r, alpha=section.lora_alpha,
                               dropout=section.lora_dropout,
                               target_modules=tuple(section.lora_target_modules))
        partitioned = loads_partitioned(config, distributed.world_size())
        with _loading(config, partitioned=partitioned):
            policy, tokenizer = load_policy(
                section.path, lora=lora, gradient_checkpointing=section.gradient_checkpointing,
                **kwargs)
        reference = None
        if needs_reference:
            sharded = section.reference_device == "sharded" and partitioned
            with _loading(config, partitioned=sharded):
                reference = load_reference(section.path, **kwargs)
    except ValueError as err:
        raise TrainError(str(err)) from None
    return policy, tokenizer, reference


def _loading(config: ExperimentConfig, *, partitioned: bool) -> Any:
    if not partitioned:
        return contextlib.nullcontext()
    from hargo_hpc.train.backend.engine import partitioned_loading

    return partitioned_loading(precision=config.training.precision,
                               micro_batch_size=config.training.micro_batch_size)


def build_run_engine(config: ExperimentConfig, policy: Any, accum: int, total_steps: int,
                     run_dir: Path | None, *, sft_steps: int = 0, sft_only: bool = False
                     ) -> Any:
    """The run's engine: `sft_steps` optimizer steps at sft.lr, then `total_steps` on
    training's schedule; `sft_only` (`hargo sft`): every step at sft.lr, constant."""
    from hargo_hpc.train.backend.engine import EngineError, build_engine

    t = config.training
    refusal = fp32_on_a_gpu(t.precision, distributed.visible_devices(), t.allow_fp32_on_gpu)
    if refusal:
        raise TrainError(refusal)
    schedule: dict[str, Any] = (
        {"lr": config.sft.lr, "warmup_steps": 0, "lr_schedule": "constant"} if sft_only else
        {"lr": t.lr, "warmup_steps": t.warmup_steps, "lr_schedule": t.lr_schedule,
         "sft_steps": sft_steps, "sft_lr": config.sft.lr})
    try:
        return build_engine(
            policy, zero_stage=t.zero_stage, precision=t.precision,
            weight_decay=t.weight_decay, grad_clip=t.grad_clip, grad_accum=accum,
            micro_batch_size=t.micro_batch_size, total_steps=total_steps,
            offload_optimizer=t.offload_optimizer, min_lr_ratio=t.min_lr_ratio, **schedule,
            user_config=Path(t.deepspeed_config) if t.deepspeed_config else None,
            run_dir=run_dir,
        )
    except EngineError as err:
        raise TrainError(str(err)) from None


def fp32_on_a_gpu(precision: str, gpus: int, allowed: bool) -> str | None:
    """The one-line refusal of fp32 training where a GPU is visible (twice bf16's memory for
    weights, gradients and activations, and far slower), unless `allowed`; None otherwise."""
    if precision != "fp32" or gpus == 0 or allowed:
        return None
    return ('training.precision is fp32 on a GPU: set training.precision = "bf16" and '
            'model.dtype = "bfloat16" (or training.allow_fp32_on_gpu = true to mean it)')


def place_reference(config: ExperimentConfig, reference: Any, device: Any) -> Any:
    """The reference model (or None) where `model.reference_device` puts it: on the policy's
    `device`, on the host ("cpu"), or partitioned over the ranks by ZeRO-3 ("sharded",
    `engine.shard_reference`; after the policy's engine, which starts the process group)."""
    if reference is None:
        return None
    where = config.model.reference_device
    if where == "sharded":
        from hargo_hpc.train.backend.engine import shard_reference

        return shard_reference(reference, precision=config.training.precision,
                               micro_batch_size=config.training.micro_batch_size)
    return reference.to(device if where == "policy" else "cpu")


def prompt_format_of(config: ExperimentConfig, tokenizer: Any) -> str:
    try:
        return resolve_format(config.data.prompt_format, tokenizer)
    except ValueError as err:
        raise TrainError(f"data.prompt_format: {err}") from None


def check_references(data: Data) -> None:
    """The `sft` preset needs a target for every prompt it may draw (`sft.has_target`):
    TrainError naming the first training example without one."""
    for name, examples in data.train.items():
        missing = [e for e in examples if not has_target(e)]
        if missing:
            raise TrainError(f"algorithm sft trains on reference answers; task {name} has no "
                             f"SFT corpus and {len(missing)} of its {len(examples)} training "
                             f"examples have no answer (first: {missing[0].id})")


def export_model(engine: Any, tokenizer: Any, out: Path, *, lora: bool) -> Path:
    """The HF export: the engine's (gathered under ZeRO-3); with LoRA the adapters merged
    into a copy of the base (models.export_hf)."""
    if not lora:
        return Path(engine.export_hf(out, tokenizer))
    from hargo_hpc.train.model.models import export_hf

    with engine.gathered_parameters():
        if distributed.is_main():
            export_hf(engine.module, tokenizer, out)
    distributed.barrier()
    return out
