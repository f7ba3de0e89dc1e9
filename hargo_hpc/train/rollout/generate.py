"""Rollout: G sampled completions per prompt, their masks, and their token log-probs.

The loop calls only `GenerationBackend.generate` (here `HFGenerateBackend`; a vLLM backend
would implement the same method) and `score_rollout`. `finish_completion(s)` decide where a
completion ends and what its text is, whatever the backend; `RowSampler` gives each row its
own seeded stream. The batch layout, the end rules, the seeds and the backend: docs/rollout.md.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import torch
from torch import Tensor, nn
from transformers import (
    GenerationConfig,
    LogitsProcessor,
    LogitsProcessorList,
    StoppingCriteria,
    StoppingCriteriaList,
)

from hargo_hpc.train.model.logprobs import position_ids_from_mask, token_logprobs

GatherFactory = Callable[[], AbstractContextManager[Any]]


@dataclass(frozen=True)
class SamplingParams:
    """How completions are sampled. `seed` None draws from the global torch RNG (whose state the
    checkpoint saves); an int makes the call deterministic and leaves the global RNG untouched.
    `do_sample` False is greedy decoding (temperature and top_p then only matter for scoring)."""

    max_new_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    stop: tuple[str, ...] = ()
    seed: int | None = None
    do_sample: bool = True

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if not self.temperature > 0:
            raise ValueError(f"temperature must be > 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if isinstance(self.stop, str) or not all(isinstance(s, str) and s for s in self.stop):
            raise ValueError(f"stop must be a sequence of non-empty strings, got {self.stop!r}")
        object.__setattr__(self, "stop", tuple(self.stop))


@dataclass
class Generations:
    """A rollout before scoring: what a backend returns (fields: docs/rollout.md, "The batch")."""

    prompt_ids: Tensor
    prompt_mask: Tensor
    completion_ids: Tensor
    completion_mask: Tensor
    truncated: Tensor
    texts: list[str]
    group_index: Tensor
    # [N, T] log-probs of the sampled tokens as the sampling engine computed them (0 where the
    # mask is 0); a backend other than the trainer's own model returns them (vLLM), for the
    # importance-sampling correction of the two engines' mismatch. None: HF generate.
    sampler_logprobs: Tensor | None = None

    def __post_init__(self) -> None:
        n, p = self.prompt_ids.shape
        if self.prompt_mask.shape != (n, p):
            raise ValueError(f"prompt_mask shape {tuple(self.prompt_mask.shape)} != {(n, p)}")
        if self.completion_ids.dim() != 2 or self.completion_ids.shape[0] != n:
            raise ValueError(f"completion_ids shape {tuple(self.completion_ids.shape)} does not "
                             f"have {n} rows")
        if self.completion_mask.shape != self.completion_ids.shape:
            raise ValueError(f"completion_mask shape {tuple(self.completion_mask.shape)} != "
                             f"completion_ids shape {tuple(self.completion_ids.shape)}")
        for name in ("truncated", "group_index"):
            if tuple(getattr(self, name).shape) != (n,):
                raise ValueError(f"{name} must have shape ({n},)")
        if len(self.texts) != n:
            raise ValueError(f"texts has {len(self.texts)} entries, expected {n}")
        if (self.sampler_logprobs is not None
                and self.sampler_logprobs.shape != self.completion_ids.shape):
            raise ValueError(f"sampler_logprobs shape {tuple(self.sampler_logprobs.shape)} != "
                             f"completion_ids shape {tuple(self.completion_ids.shape)}")

    @property
    def input_ids(self) -> Tensor:
        """[N, P+T] prompt and completion, the input of a scoring forward pass."""
        return torch.cat([self.prompt_ids, self.completion_ids], dim=1)

    @property
    def attention_mask(self) -> Tensor:
        return torch.cat([self.prompt_mask, self.completion_mask], dim=1)

    @property
    def completion_start(self) -> int:
        return self.prompt_ids.shape[1]

    @property
    def completion_lengths(self) -> Tensor:
        return self.completion_mask.sum(dim=1)

    def with_logprobs(self, old_logprobs: Tensor, ref_logprobs: Tensor | None = None
                      ) -> RolloutBatch:
        fields = {name: getattr(self, name) for name in Generations.__dataclass_fields__}
        return RolloutBatch(**fields, old_logprobs=old_logprobs, ref_logprobs=ref_logprobs)


@dataclass(kw_only=True)
class RolloutBatch(Generations):
    """A scored rollout: `old_logprobs` [N, T] of the sampling policy and `ref_logprobs` [N, T] of
    the reference (None when the algorithm needs none), both 0 where `completion_mask` is 0."""

    old_logprobs: Tensor
    ref_logprobs: Tensor | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("old_logprobs", "ref_logprobs"):
            value = getattr(self, name)
            if value is not None and value.shape != self.completion_ids.shape:
                raise ValueError(f"{name} shape {tuple(value.shape)} != completion shape "
                                 f"{tuple(self.completion_ids.shape)}")


PromptParams = SamplingParams | Sequence[SamplingParams]


def derive_seed(*parts: object) -> int:
    """A 63-bit seed from any parts (a run's seed, an example's id, a sample index, a step):
    the first 8 bytes of BLAKE2b over their reprs joined by NUL, top bit cleared. Stable across
    processes and machines (unlike `hash`), and unrelated for neighbouring inputs (seed 7 and
    seed 8 give unrelated streams, as two examples' ids do)."""
    text = "\0".join(repr(p) for p in parts).encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "big") >> 1


def check_request(prompts: Sequence[str], G: int, params: PromptParams,
                  seeds: Sequence[int] | None) -> dict[SamplingParams, list[int]]:
    """A `GenerationBackend.generate` call's arguments checked (ValueError, one line each);
    returns `group_by_params(prompts, params)`."""
    if not prompts or not all(isinstance(p, str) for p in prompts):
        raise ValueError("prompts must be a non-empty list of strings")
    if G < 1:
        raise ValueError(f"G (completions per prompt) must be >= 1, got {G}")
    if seeds is not None and len(seeds) != len(prompts):
        raise ValueError(f"{len(seeds)} seeds for {len(prompts)} prompts")
    return group_by_params(prompts, params)


def group_by_params(prompts: Sequence[str], params: PromptParams
                    ) -> dict[SamplingParams, list[int]]:
    """The prompt indices of each distinct SamplingParams, in order of first appearance."""
    every = [params] * len(prompts) if isinstance(params, SamplingParams) else list(params)
    if len(every) != len(prompts):
        raise ValueError(f"{len(every)} SamplingParams for {len(prompts)} prompts")
    groups: dict[SamplingParams, list[int]] = {}
    for i, p in enumerate(every):
        if not isinstance(p, SamplingParams):
            raise ValueError(f"params[{i}] is not a SamplingParams: {p!r}")
        groups.setdefault(p, []).append(i)
    return groups


def merge_generations(parts: Sequence[tuple[Sequence[int], Generations]], n_prompts: int,
                      G: int, pad_id: int) -> Generations:
    """One Generations of `n_prompts` prompts from parts that each hold some of them
    (`(prompt indices, their Generations)`): prompts left padded to the widest part,
    completions right padded to the longest, every row back at its prompt's place."""
    width = max(gen.prompt_ids.shape[1] for _, gen in parts)
    longest = max(gen.completion_ids.shape[1] for _, gen in parts)
    first = parts[0][1]
    device, n = first.prompt_ids.device, n_prompts * G
    prompt_ids = torch.full((n, width), pad_id, dtype=torch.long, device=device)
    prompt_mask = torch.zeros((n, width), dtype=torch.long, device=device)
    completion_ids = torch.full((n, longest), pad_id, dtype=torch.long, device=device)
    completion_mask = torch.zeros((n, longest), dtype=torch.long, device=device)
    truncated = torch.zeros(n, dtype=torch.bool, device=device)
    texts = [""] * n
    sampled = (torch.zeros((n, longest), dtype=torch.float32, device=device)
               if all(gen.sampler_logprobs is not None for _, gen in parts) else None)
    for prompts, gen in parts:
        rows = torch.tensor([p * G + g for p in prompts for g in range(G)], device=device)
        p, t = gen.prompt_ids.shape[1], gen.completion_ids.shape[1]
        prompt_ids[rows, width - p:] = gen.prompt_ids
        prompt_mask[rows, width - p:] = gen.prompt_mask
        completion_ids[rows, :t] = gen.completion_ids
        completion_mask[rows, :t] = gen.completion_mask
        truncated[rows] = gen.truncated.bool()
        if sampled is not None:
            sampled[rows, :t] = gen.sampler_logprobs.to(sampled)
        for row, text in zip(rows.tolist(), gen.texts, strict=True):
            texts[row] = text
    group_index = torch.arange(n_prompts, device=device).repeat_interleave(G)
    return Generations(prompt_ids=prompt_ids, prompt_mask=prompt_mask,
                       completion_ids=completion_ids, completion_mask=completion_mask,
                       truncated=truncated, texts=texts, group_index=group_index,
                       sampler_logprobs=sampled)


def encode_prompts(tokenizer: Any, prompts: Sequence[str], add_special_tokens: bool,
                   max_new_tokens: int, limit: int | None,
                   limit_name: str = "max_position_embeddings") -> list[list[int]]:
    """Each prompt's token ids as the tokenizer gives them (`add_special_tokens` False: prompts
    arrive templated); ValueError for an empty one, or one that with `max_new_tokens` would
    exceed the `limit` of positions (the model's `limit_name`)."""
    encoded = tokenizer(list(prompts), add_special_tokens=add_special_tokens)["input_ids"]
    for i, ids in enumerate(encoded):
        if not ids:
            raise ValueError(f"prompt {i} is empty after tokenization")
    width = max(len(ids) for ids in encoded)
    if limit is not None and width + max_new_tokens > limit:
        raise ValueError(f"a prompt of {width} tokens plus max_new_tokens {max_new_tokens} "
                         f"exceeds the model's {limit_name} {limit}")
    return [list(ids) for ids in encoded]


def left_padded(rows: Sequence[Sequence[int]], pad_id: int, device: torch.device
                ) -> tuple[Tensor, Tensor]:
    """[n, P] ids left padded with `pad_id`, and their mask (1 on the tokens)."""
    width = max(len(row) for row in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, width - len(row):] = torch.tensor(row, dtype=torch.long)
        mask[i, width - len(row):] = 1
    return ids.to(device), mask.to(device)


def right_padded(rows: Sequence[Sequence[Any]], fill: Any, dtype: torch.dtype,
                 device: torch.device) -> Tensor:
    """[n, T] of ragged rows, right padded with `fill` to the longest (T ≥ 1)."""
    out = torch.full((len(rows), max(1, max(len(row) for row in rows))), fill, dtype=dtype)
    for i, row in enumerate(rows):
        if row:
            out[i, :len(row)] = torch.tensor(list(row), dtype=dtype)
    return out.to(device)


@runtime_checkable
class GenerationBackend(Protocol):
    """What the loop needs from an inference engine."""

    def generate(self, prompts: list[str], G: int, params: PromptParams,
                 seeds: Sequence[int] | None = None) -> Generations:
        """G completions of each prompt, rows grouped by prompt (docs/rollout.md, "The
        batch"); `params` one SamplingParams for all, or one per prompt (each task's generation
        budget); `seeds` one per prompt: row g of prompt p samples from its own stream
        (`derive_seed(seeds[p], g)`), whatever else the call holds."""
        ...


def score_rollout(
    generations: Generations,
    policy: nn.Module,
    reference: nn.Module | None,
    *,
    micro_batch: int,
    temperature: float,
) -> RolloutBatch:
    """Old-policy and (when given) reference log-probs of the completions, without gradient, in
    micro-batches, with the logits divided by the sampling temperature."""
    args = (generations.input_ids, generations.attention_mask, generations.completion_start,
            micro_batch)
    old = token_logprobs(policy, *args, temperature=temperature)
    ref = None if reference is None else token_logprobs(reference, *args, temperature=temperature)
    return generations.with_logprobs(old, ref)


# ---------------------------------------------------------------- ends of completions


@dataclass(frozen=True)
class Finished:
    """Where one completion ends: `length` tokens kept (the mask), its text, and whether it ran
    out of tokens."""

    length: int
    text: str
    truncated: bool


def finish_completion(tokens: Sequence[int], eos_ids: frozenset[int], stop: Sequence[str],
                      decode: Callable[[Sequence[int]], str]) -> Finished:
    """The end of one generated token sequence (backend-independent).

    The body is the tokens before the first EOS. If its text contains a stop string, the
    completion ends at the smallest k whose prefix body[:k+1] decodes to a text containing one
    (found by bisection: containment only grows with the prefix), and the text is that prefix's
    text cut before the earliest stop string in it. Otherwise it ends after the EOS (kept in
    the mask), or, without one, after the last token (truncated)."""
    eos_at = next((i for i, t in enumerate(tokens) if t in eos_ids), None)
    body = list(tokens[:eos_at]) if eos_at is not None else list(tokens)
    text = decode(body)
    if stop and _has_stop(text, stop):
        lo, hi = 0, len(body) - 1  # invariant: body[:hi+1] contains a stop string
        while lo < hi:
            mid = (lo + hi) // 2
            if _has_stop(decode(body[:mid + 1]), stop):
                hi = mid
            else:
                lo = mid + 1
        prefix = decode(body[:hi + 1])
        cut = min(prefix.find(s) for s in stop if s in prefix)
        return Finished(length=hi + 1, text=prefix[:cut], truncated=False)
    if eos_at is not None:
        return Finished(length=eos_at + 1, text=text, truncated=False)
    return Finished(length=len(body), text=text, truncated=True)


def _has_stop(text: str, stop: Sequence[str]) -> bool:
    return any(s in text for s in stop)


def finish_completions(completion_ids: Tensor, eos_ids: frozenset[int], pad_id: int,
                       stop: Sequence[str], decode: Callable[[Sequence[int]], str]
                       ) -> tuple[Tensor, Tensor, Tensor, list[str]]:
    """(completion_ids, completion_mask, truncated, texts) of raw generated rows [N, T']: tokens
    after each end become pad, and T shrinks to the longest kept completion."""
    rows = completion_ids.tolist()
    ends = [finish_completion(row, eos_ids, stop, decode) for row in rows]
    width = max(1, max(end.length for end in ends))
    lengths = torch.tensor([end.length for end in ends], device=completion_ids.device)
    positions = torch.arange(width, device=completion_ids.device)
    mask = (positions.unsqueeze(0) < lengths.unsqueeze(1)).long()
    ids = torch.where(mask.bool(), completion_ids[:, :width], torch.full_like(mask, pad_id))
    truncated = torch.tensor([end.truncated for end in ends], device=completion_ids.device)
    return ids, mask, truncated, [end.text for end in ends]


# ---------------------------------------------------------------- the HF generate backend


class HFGenerateBackend:
    """Sampling with `model.generate` (transformers).

    Prompts are tokenized as given (`add_special_tokens=False` by default: prompts arrive fully
    templated, and a chat template writes its own BOS), left padded by hand, and each repeated
    G times (`repeat_interleave`, the layout `num_return_sequences` would give) so the rows are
    grouped by prompt. The sampling distribution is exactly softmax(z/τ) restricted to the top-p
    nucleus: the model's own `generation_config` (top_k, repetition penalty, …) is set aside
    for the call. A tokenizer without a pad token pads with EOS (pad == EOS is fine: the masks
    come from the first EOS). `gather`, when given, is entered once around each call (ZeRO-3:
    the engine helper passes a factory of `deepspeed.zero.GatheredParameters` over the model's
    parameters). `synced_gpus` is passed to `generate` as is (None: transformers decides; the
    engine helper may pass False when the gathered model runs without ZeRO hooks). A wrapper
    without `generate` (a DeepSpeed engine, DDP) is unwrapped to its `.module`.
    """

    def __init__(
        self,
        model: nn.Module,
        tokenizer: Any,
        *,
        gather: GatherFactory | None = None,
        eos_token_ids: Sequence[int] | None = None,
        add_special_tokens: bool = False,
        synced_gpus: bool | None = None,
    ) -> None:
        self.model = generating_model(model)
        self.tokenizer = tokenizer
        self.gather = gather
        self.add_special_tokens = add_special_tokens
        self.synced_gpus = synced_gpus
        self.eos_ids = frozenset(eos_token_ids if eos_token_ids is not None
                                 else eos_ids_of(model, tokenizer))
        pad = tokenizer.pad_token_id
        if pad is None:
            if tokenizer.eos_token_id is None:
                raise ValueError("the tokenizer has neither a pad nor an EOS token")
            pad = tokenizer.eos_token_id
        self.pad_id: int = int(pad)

    # ------------------------------------------------------------ the interface

    def generate(self, prompts: list[str], G: int, params: PromptParams,
                 seeds: Sequence[int] | None = None) -> Generations:
        """`params` one SamplingParams, or one per prompt: prompts that share params are
        sampled together, one `generate` call per distinct params (a yes/no group stops at its
        few tokens instead of running to a kernel's hundreds), under one gather (ZeRO-3), in
        order of first appearance; the rows come back in prompt order (`merge_generations`).
        `seeds`: one per prompt, each row its own stream (docs/rollout.md; `RowSampler`)."""
        groups = check_request(prompts, G, params, seeds)
        with self._gathered():
            parts = [(rows, self._generate(
                prompts=[prompts[i] for i in rows], G=G, params=p,
                row_seeds=None if seeds is None else
                [derive_seed(int(seeds[i]), g) for i in rows for g in range(G)]))
                for p, rows in groups.items()]
        if len(parts) == 1:
            return parts[0][1]
        return merge_generations(parts, len(prompts), G, self.pad_id)

    def _generate(self, *, prompts: list[str], G: int, params: SamplingParams,
                  row_seeds: list[int] | None = None) -> Generations:
        device = _device_of(self.model)
        limit = getattr(_config_of(self.model), "max_position_embeddings", None)
        prompt_ids, prompt_mask = left_padded(
            encode_prompts(self.tokenizer, prompts, self.add_special_tokens,
                           params.max_new_tokens, limit), self.pad_id, device)
        prompt_ids = prompt_ids.repeat_interleave(G, dim=0)
        prompt_mask = prompt_mask.repeat_interleave(G, dim=0)
        rows = (RowSampler(row_seeds, params.temperature, params.top_p, device)
                if row_seeds is not None and params.do_sample else None)
        with _seeded(params.seed, device), _eval_mode(self.model):
            raw = self._sample(prompt_ids, prompt_mask, params,
                               self._shared_prefill(prompt_ids, prompt_mask, G), rows)
        completion_ids, completion_mask, truncated, texts = finish_completions(
            raw[:, prompt_ids.shape[1]:], self.eos_ids, self.pad_id, params.stop, self._decode)
        group_index = torch.arange(len(prompts), device=device).repeat_interleave(G)
        return Generations(prompt_ids=prompt_ids, prompt_mask=prompt_mask,
                           completion_ids=completion_ids, completion_mask=completion_mask,
                           truncated=truncated, texts=texts, group_index=group_index)

    # ------------------------------------------------------------ pieces

    def _decode(self, tokens: Sequence[int]) -> str:
        return self.tokenizer.decode(list(tokens), skip_special_tokens=True)

    def _shared_prefill(self, prompt_ids: Tensor, prompt_mask: Tensor, G: int
                        ) -> dict[str, Any]:
        """The KV cache of every prompt but its last token, computed once per prompt and
        repeated for its G rows (`generate` then runs only the last prompt token and the
        completion): a prompt's G completions share one prefill instead of G. Returned as the
        keyword `generate` takes it (`cache` from transformers 5.24, `past_key_values`
        before: the outputs name it alike); {} (generate prefills as usual) for G = 1, a
        one-token prompt, or a model whose cache cannot be repeated. Greedy completions are
        the same either way (tested)."""
        if G == 1 or prompt_ids.shape[1] < 2:
            return {}
        ids, mask = prompt_ids[::G, :-1], prompt_mask[::G, :-1]  # rows are repeat_interleaved
        with torch.no_grad():
            out = self.model(input_ids=ids, attention_mask=mask,  # the cache is what counts:
                             position_ids=position_ids_from_mask(mask), use_cache=True,
                             logits_to_keep=1)  # one position's logits, not [rows, P, V]
        name = "cache" if getattr(out, "cache", None) is not None else "past_key_values"
        cache = getattr(out, name, None)
        if not hasattr(cache, "batch_repeat_interleave"):
            return {}
        cache.batch_repeat_interleave(G)
        return {name: cache}

    def _sample(self, prompt_ids: Tensor, prompt_mask: Tensor, params: SamplingParams,
                prefilled: dict[str, Any] | None = None, rows: RowSampler | None = None
                ) -> Tensor:
        """`model.generate` of the rows: sampled by transformers from one stream, or, with
        `rows`, by the RowSampler (each row its own stream) under greedy selection."""
        sampling: dict[str, Any] = (
            {"do_sample": True, "temperature": params.temperature, "top_p": params.top_p,
             "top_k": 0} if params.do_sample and rows is None else {"do_sample": False})
        config = GenerationConfig(
            max_new_tokens=params.max_new_tokens,
            eos_token_id=sorted(self.eos_ids) or None,
            pad_token_id=self.pad_id,
            use_cache=True,
            **sampling,
        )
        criteria = StoppingCriteriaList(
            [_StopStrings(params.stop, prompt_ids.shape[1], self.eos_ids, self._decode)]
            if params.stop else [])
        extra: dict[str, Any] = ({} if self.synced_gpus is None
                                 else {"synced_gpus": self.synced_gpus})
        extra.update(prefilled or {})
        if rows is not None:
            extra["logits_processor"] = LogitsProcessorList([rows])
        with _plain_generation_config(self.model):
            return self.model.generate(input_ids=prompt_ids, attention_mask=prompt_mask,
                                       generation_config=config, stopping_criteria=criteria,
                                       **extra)

    def _gathered(self) -> AbstractContextManager[Any]:
        return self.gather() if self.gather is not None else contextlib.nullcontext()


class RowSampler(LogitsProcessor):
    """Samples every row from its own seeded stream, for `generate` under greedy selection.

    At each step, row i's scores z (the model's logits) become

        y_v = z_v / τ + g_v   for v in the top-p nucleus of softmax(z / τ),   y_v = −inf else

    with g_v = −log(−log u_v), u_v uniform from row i's own generator (seeded `seeds[i]`), and
    greedy selection takes argmax_v y_v: by the Gumbel-max trick (Gumbel 1954; Maddison et al.
    2014, "A* sampling") that token is a draw from softmax(z / τ) restricted to the nucleus and
    renormalised, the distribution transformers' own sampling draws from. The nucleus is the
    smallest set of the most probable tokens whose probability reaches top_p (at least one).
    Each row's generator advances by one draw of the vocabulary per step, whatever the other
    rows do, so a row's completion is a function of its seed (and its prompt) alone."""

    def __init__(self, seeds: Sequence[int], temperature: float, top_p: float,
                 device: torch.device) -> None:
        self.temperature, self.top_p = temperature, top_p
        self.generators = [torch.Generator(device=device).manual_seed(int(s)) for s in seeds]

    def __call__(self, input_ids: Tensor, scores: Tensor) -> Tensor:
        if scores.shape[0] != len(self.generators):
            raise ValueError(f"{scores.shape[0]} rows for {len(self.generators)} seeds")
        logits = scores.float() / self.temperature
        if self.top_p < 1:
            ordered, order = torch.sort(logits, dim=-1, descending=True)
            before = ordered.softmax(dim=-1).cumsum(dim=-1) - ordered.softmax(dim=-1)
            outside = torch.zeros_like(logits, dtype=torch.bool).scatter(
                -1, order, before >= self.top_p)  # mass of the better tokens already enough
            logits = logits.masked_fill(outside, -math.inf)
        tiny = torch.finfo(torch.float32).tiny
        uniform = torch.stack([torch.rand(logits.shape[-1], generator=g, device=logits.device)
                               for g in self.generators]).clamp_(tiny, 1.0 - 1e-7)
        return logits - torch.log(-torch.log(uniform))


class _StopStrings(StoppingCriteria):
    """Ends a row early once its recent tokens decode to a text holding a stop string. Only an
    early exit: `finish_completion` decides where the completion ends. The window (the last
    max-bytes-of-a-stop-string + 2 tokens) covers every token of a stop string that just
    completed, each token being at least one byte. Only the window's columns leave the device,
    and a row that has ended (a stop string, or an EOS in its window: `generate` ends it
    itself) is never decoded again."""

    def __init__(self, stop: Sequence[str], prompt_length: int, eos_ids: frozenset[int],
                 decode: Callable[[Sequence[int]], str]) -> None:
        self.stop = tuple(stop)
        self.prompt_length = prompt_length
        self.eos_ids = eos_ids
        self.decode = decode
        self.window = max(len(s.encode()) for s in stop) + 2
        self.ended: list[bool] = []

    def __call__(self, input_ids: Tensor, scores: Tensor | None, **kwargs: Any) -> Tensor:
        if len(self.ended) != input_ids.shape[0]:
            self.ended = [False] * input_ids.shape[0]
        width = min(self.window, input_ids.shape[1] - self.prompt_length)
        tails = input_ids[:, input_ids.shape[1] - width:].tolist()
        for i, tail in enumerate(tails):
            if self.ended[i]:
                continue
            if any(t in self.eos_ids for t in tail):
                self.ended[i] = True
            else:
                self.ended[i] = _has_stop(self.decode(tail), self.stop)
        return torch.tensor(self.ended, dtype=torch.bool, device=input_ids.device)


def eos_ids_of(model: nn.Module, tokenizer: Any) -> list[int]:
    """EOS ids of the tokenizer and of the model's generation config (some list several)."""
    ids: set[int] = set()
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    generation_config = getattr(_hf_model(model), "generation_config", None)
    configured = getattr(generation_config, "eos_token_id", None)
    if isinstance(configured, int):
        ids.add(configured)
    elif configured is not None:
        ids.update(int(i) for i in configured)
    return sorted(ids)


def generating_model(model: nn.Module) -> nn.Module:
    """The module under wrappers that have no `generate` of their own (a DeepSpeed engine, DDP):
    generation runs on the HF (or PEFT) model itself."""
    while not hasattr(type(model), "generate") and isinstance(getattr(model, "module", None),
                                                              nn.Module):
        model = model.module
    return model


def _hf_model(model: nn.Module) -> nn.Module:
    """The transformers model under a PEFT wrapper (whose generate delegates to it)."""
    get_base = getattr(model, "get_base_model", None)
    return get_base() if callable(get_base) else model


def _config_of(model: nn.Module) -> Any:
    return getattr(_hf_model(model), "config", None)


def _device_of(model: nn.Module) -> torch.device:
    """The device of the model's parameters (under ZeRO-3 the partitions live there too)."""
    for parameter in model.parameters():
        return parameter.device
    raise ValueError("the model has no parameters")


@contextlib.contextmanager
def _plain_generation_config(model: nn.Module) -> Iterator[None]:
    """Set the model's generation_config aside for one call: `generate` fills every field left
    unset in the passed config from it (a checkpoint's top_k, repetition_penalty, …), which
    would sample from another distribution than the one the log-probs describe."""
    target = _hf_model(model)
    saved = getattr(target, "generation_config", None)
    target.generation_config = GenerationConfig()
    try:
        yield
    finally:
        target.generation_config = saved


@contextlib.contextmanager
def _seeded(seed: int | None, device: torch.device) -> Iterator[None]:
    """A seed for this call only: fork the CPU (and the device's) RNG, seed, restore after."""
    if seed is None:
        yield
        return
    if device.type == "cpu":
        devices: list[int] = []
    else:
        index = device.index
        devices = [torch.get_device_module(device.type).current_device() if index is None
                   else index]
    with torch.random.fork_rng(devices=devices, device_type=device.type):
        torch.manual_seed(seed)
        yield


@contextlib.contextmanager
def _eval_mode(model: nn.Module) -> Iterator[None]:
    """Dropout off while sampling; the training mode comes back after."""
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)
