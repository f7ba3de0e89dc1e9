"""Supervised fine-tuning on reference answers: the warm start before RL and the `sft` preset.

`sft_items` gives a task's rows (its reference answers, or its SFT corpus cut to what
`fitting` keeps), `build_sft_batch` lays them out as the rollout lays out completions,
`SftSampler` draws them in seeded, checkpointable epochs and `sft_update` takes one optimizer
step (the row and loss formulas are in those two functions' docstrings). The data, the
budgets and the multi-rank split: docs/training.md, "SFT warm start" and "Several ranks".
"""

from __future__ import annotations

import importlib
import random
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from hargo_hpc.algorithms.preference import sft_loss
from hargo_hpc.tasks.base import Example, Task
from hargo_hpc.tasks.prompts import build_prompt
from hargo_hpc.tasks.registry import task_class
from hargo_hpc.train.backend import distributed
from hargo_hpc.train.model.logprobs import token_logprobs


@dataclass(frozen=True)
class SftItem:
    """One SFT row before templating: the task (for the log), the user text and the answer."""

    task: str
    user_text: str
    target: str


def _corpus(source: str) -> Callable[[Sequence[Example]], list[tuple[str, str]]]:
    module, _, name = source.partition(":")
    return getattr(importlib.import_module(module), name)  # type: ignore[no-any-return]


def sft_items(task: Task, examples: Sequence[Example],
              stages: Sequence[Any] | None = None) -> list[SftItem]:  # fmt: skip
    """The SFT rows of one task: its examples' reference answers, or its corpus
    (`Task.sft_corpus`; for a staged task with SQD `stages`, each pair also under a stage
    prompt it keeps: `tasks.corpus.sft_examples`). ValueError when the task has neither."""
    if task.sft_corpus:
        corpus = _corpus(task.sft_corpus)
        pairs = corpus(examples, stages=stages) if stages and task.staged else corpus(examples)
        return [SftItem(task.name, text, answer) for text, answer in pairs]
    items = [SftItem(task.name, task.user_text(e), e.output) for e in examples if e.output]
    if not items:
        raise ValueError(f"task {task.name}: no example with a reference answer to train on")
    return items


def fitting(items: Sequence[SftItem], tokenizer: Any, max_tokens: int) -> list[SftItem]:
    """The rows whose answer and EOS fit in `max_tokens` tokens (its task's generation budget,
    `config.generation_budget`): longer, the target is cut there (`sft_batch`), and a
    corpus answer cut short, a program without its end, never compiles."""
    if not items:
        return []
    ids = tokenizer([item.target for item in items], add_special_tokens=False)["input_ids"]
    return [item for item, tokens in zip(items, ids, strict=True) if len(tokens) < max_tokens]


def has_target(example: Example) -> bool:
    """Whether the `sft` preset can train on `example`'s prompt: a reference answer, or a
    corpus for its task (`Task.sft_corpus`, asked of the task's class in the registry)."""
    return bool(example.output) or bool(_corpus_of(example))


def _corpus_of(example: Example) -> str:
    """The SFT corpus of `example`'s task ('' for none, or for a task not registered)."""
    try:
        return task_class(example.task).sft_corpus
    except ValueError:
        return ""


def preset_item(example: Example, user_text: str, *, tokenizer: Any = None,
                max_tokens: int | None = None) -> SftItem:
    """The `sft` preset's row for one prompt: its reference answer, or, for a task with a
    corpus instead (GEMM), one of the corpus's completions for it, picked by crc32 of the
    example's id (the same every step and run) among those that fit `max_tokens` tokens of
    `tokenizer` (`fitting`, as the warm start keeps them; all when none fits or no tokenizer is
    given). ValueError when it has neither (`has_target`; `train.setup.check_references`
    refuses such data before the first step)."""
    if not has_target(example):
        raise ValueError(f"example {example.id}: no reference answer, and task {example.task} "
                         "has no SFT corpus")
    if example.output:
        return SftItem(example.task, user_text, example.output)
    items = [SftItem(example.task, text, answer)
             for text, answer in _corpus(_corpus_of(example))([example])]
    if tokenizer is not None and max_tokens is not None:
        items = fitting(items, tokenizer, max_tokens) or items
    return items[zlib.crc32(example.id.encode()) % len(items)]


class SftSampler:
    """Rows in epochs: epoch e is the items shuffled by `Random(f"{seed}:sft:{e}")`; every item
    is drawn once per epoch. `state_dict` / `load_state_dict` continue the same sequence."""

    def __init__(self, items: Sequence[SftItem], seed: int = 0) -> None:
        if not items:
            raise ValueError("no SFT rows to sample from")
        self.items = list(items)
        self.seed = seed
        self._epoch = 0
        self._position = 0
        self._order = self._shuffled(0)

    def _shuffled(self, epoch: int) -> list[int]:
        order = list(range(len(self.items)))
        random.Random(f"{self.seed}:sft:{epoch}").shuffle(order)
        return order

    def batch(self, n: int) -> list[SftItem]:
        out = []
        for _ in range(n):
            if self._position == len(self.items):
                self._epoch += 1
                self._position = 0
                self._order = self._shuffled(self._epoch)
            out.append(self.items[self._order[self._position]])
            self._position += 1
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"seed": self.seed, "size": len(self.items), "epoch": self._epoch,
                "position": self._position}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if state.get("seed") != self.seed or state.get("size") != len(self.items):
            raise ValueError(f"SFT sampler state of seed {state.get('seed')} and "
                             f"{state.get('size')} rows does not match this one "
                             f"(seed {self.seed}, {len(self.items)} rows)")
        self._epoch, self._position = int(state["epoch"]), int(state["position"])
        self._order = self._shuffled(self._epoch)


@dataclass
class SftBatch:
    """Rows laid out like a rollout: `input_ids` [B, P+T], `attention_mask`, the prompt width P;
    the target tokens are the mask's part from P on."""

    input_ids: Tensor
    attention_mask: Tensor
    completion_start: int

    @property
    def target_mask(self) -> Tensor:
        return self.attention_mask[:, self.completion_start:]


def sft_batch(
    tokenizer: Any, prompts: Sequence[str], targets: Sequence[str], *,
    max_target_tokens: int | Sequence[int], device: torch.device,
) -> SftBatch:
    """Tokenize (no added special tokens: prompts arrive templated), left-pad the prompts,
    right-pad the targets (each cut to `max_target_tokens`, one for all or one per target, EOS
    appended when it fits)."""
    if len(prompts) != len(targets) or not prompts:
        raise ValueError(f"{len(prompts)} prompts for {len(targets)} targets")
    limits = ([max_target_tokens] * len(targets) if isinstance(max_target_tokens, int)
              else list(max_target_tokens))
    if len(limits) != len(targets):
        raise ValueError(f"{len(limits)} target limits for {len(targets)} targets")
    eos = tokenizer.eos_token_id
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos
    prompt_ids = tokenizer(list(prompts), add_special_tokens=False)["input_ids"]
    target_ids = tokenizer(list(targets), add_special_tokens=False)["input_ids"]
    rows = []
    for ids, limit in zip(target_ids, limits, strict=True):
        ids = list(ids)[:limit]
        if eos is not None and len(ids) < limit:
            ids.append(int(eos))
        rows.append(ids or [int(eos if eos is not None else pad)])
    width_p = max(len(p) for p in prompt_ids)
    width_t = max(len(t) for t in rows)
    ids = torch.full((len(rows), width_p + width_t), int(pad), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, (p, t) in enumerate(zip(prompt_ids, rows, strict=True)):
        ids[i, width_p - len(p):width_p] = torch.tensor(p, dtype=torch.long)
        mask[i, width_p - len(p):width_p] = 1
        ids[i, width_p:width_p + len(t)] = torch.tensor(t, dtype=torch.long)
        mask[i, width_p:width_p + len(t)] = 1
    return SftBatch(ids.to(device), mask.to(device), width_p)


def build_sft_batch(items: Sequence[SftItem], tokenizer: Any, prompt_format: str, *,
                    max_target_tokens: int | Mapping[str, int], device: torch.device
                    ) -> SftBatch:
    """`sft_batch` of templated rows; each target cut at `max_target_tokens`, one for all or
    its task's (`config.token_budgets`; ValueError for a task not in it). Row i is

        prompt = build_prompt(user text, prompt_format, tokenizer)
        target = tokens(answer)[: budget(task)] + [EOS]     (EOS kept only when not cut)

    so a target is cut where a sampled completion of its task would be."""
    prompts = [build_prompt(item.user_text, prompt_format, tokenizer) for item in items]
    if isinstance(max_target_tokens, int):
        limits: int | list[int] = max_target_tokens
    else:
        missing = sorted({item.task for item in items} - set(max_target_tokens))
        if missing:
            raise ValueError(f"no token budget for task(s) {', '.join(missing)}")
        limits = [max_target_tokens[item.task] for item in items]
    return sft_batch(tokenizer, prompts, [item.target for item in items],
                     max_target_tokens=limits, device=device)


def split(items: Sequence[Any], parts: int) -> list[list[Any]]:
    """`items` in `parts` consecutive chunks whose sizes differ by at most one (the first ones
    larger; some empty when there are fewer items than parts)."""
    size, extra = divmod(len(items), parts)
    out, start = [], 0
    for k in range(parts):
        end = start + size + (1 if k < extra else 0)
        out.append(list(items[start:end]))
        start = end
    return out


def sft_update(engine: Any, batch: SftBatch, *, accum: int, agg: str = "token-mean"
               ) -> dict[str, float]:
    """One optimizer step on `batch` (this rank's rows of the step): `accum` micro-batches,
    each `sft_loss` scaled to the step's denominator over every rank (token-mean: its share of
    the step's target tokens; the seq-* aggregations: its share of the rows), `engine.backward`
    and `engine.step` after each. With token-mean the step's loss is

        loss = −Σ_{rows, t} m_t log π(target_t | prompt, target_<t) / Σ m

    over every rank's rows (the SFT loss of docs/algorithms.md, "DPO and SFT"; the engine's
    summed-loss convention, docs/engine.md). Returns, for the whole step: loss (the sum of the
    scaled micro-batch losses of every rank), nll (token-mean), tokens, sequences."""
    mask = batch.target_mask
    rows_here = batch.input_ids.shape[0]
    total_tokens = distributed.sum_across_ranks(float(mask.sum()))
    total_rows = distributed.sum_across_ranks(float(rows_here))
    loss_sum, nll_sum = 0.0, 0.0
    for rows in split(list(range(rows_here)), accum):
        index = torch.tensor(rows or [0], device=batch.input_ids.device)
        logprobs = token_logprobs(engine, batch.input_ids[index], batch.attention_mask[index],
                                  batch.completion_start, len(index), grad=True)
        part_mask = mask[index]
        loss, stats = sft_loss(logprobs, part_mask, agg=agg)
        tokens = stats["tokens"] if rows else 0.0
        share = (tokens / max(total_tokens, 1.0) if agg == "token-mean"
                 else len(rows) / total_rows)
        loss_sum += engine.backward(loss * share)
        nll_sum += stats["nll"] * tokens
        engine.step()
    return {"loss": distributed.sum_across_ranks(loss_sum),
            "nll": distributed.sum_across_ranks(nll_sum) / max(total_tokens, 1.0),
            "tokens": total_tokens, "sequences": total_rows}
