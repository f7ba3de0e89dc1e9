"""What the vLLM backend's tests share with their two-rank script (`_two_rank_vllm.py`): the
prompts and budgets, an optimizer step, and the comparison with HF `generate` up to near ties
(tests/train/test_vllm_backend.py's docstring says why)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import torch

from hargo_hpc.train.model.logprobs import token_logprobs
from hargo_hpc.train.rollout.generate import Generations, HFGenerateBackend, SamplingParams

CHAT = "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"
PROMPTS = [  # a yes/no answer, a short answer with a stop string, a kernel: three budgets
    CHAT.format("Is there a data race in `#pragma omp parallel for` over a[i] += 1? "
                "Answer yes or no."),
    CHAT.format("What does MLPerf measure? One sentence."),
    CHAT.format("Write a C function that multiplies two 4x4 matrices."),
    "int main(void) {\n",
]
BUDGETS = [SamplingParams(8, do_sample=False), SamplingParams(48, do_sample=False, stop=("\n\n",)),
           SamplingParams(64, do_sample=False), SamplingParams(24, do_sample=False)]
G = 2


def fresh_policy(model_dir: Path) -> Any:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)


def near_tie_bound(trainer: torch.Tensor, sampler: torch.Tensor, mask: torch.Tensor) -> float:
    """Twice the largest log-prob difference of the two engines on the same tokens: a gap
    between two logits below it can be ordered either way by rounding alone."""
    return 2.0 * float(((trainer - sampler).abs() * mask).max()) + 1e-6


def agree_up_to_near_ties(model: Any, ours: Generations, hf: Generations, bound: float) -> int:
    """Rows equal token for token (mask, ends and texts included), or diverging first at a
    position where HF's best two logits are within `bound`; returns the rows fully equal."""
    equal = 0
    for row in range(hf.completion_ids.shape[0]):
        a = ours.completion_ids[row][ours.completion_mask[row].bool()].tolist()
        b = hf.completion_ids[row][hf.completion_mask[row].bool()].tolist()
        if a == b:
            assert ours.texts[row] == hf.texts[row] and bool(ours.truncated[row]) == bool(
                hf.truncated[row]), row
            equal += 1
            continue
        first = next(i for i in range(min(len(a), len(b)) + 1)
                     if i == len(a) or i == len(b) or a[i] != b[i])
        prompt = hf.prompt_ids[row][hf.prompt_mask[row].bool()]
        ids = torch.cat([prompt, torch.tensor(b[:first], dtype=torch.long)])[None]
        with torch.no_grad():
            top = model(input_ids=ids).logits[0, -1].float().topk(2).values
        gap = float(top[0] - top[1])
        assert gap < bound, (f"row {row} differs at completion token {first} where HF's best "
                             f"two logits are {gap:.2e} apart (> {bound:.2e}): {a} vs {b}")
    return equal


def compare_with_hf(backend: Any, model: Any, tokenizer: Any, prompts: list[str] = PROMPTS,
                    budgets: list[SamplingParams] = BUDGETS,
                    gather: Callable[[], AbstractContextManager[Any]] = contextlib.nullcontext
                    ) -> tuple[int, float]:
    """(rows equal, the log-prob bound) of greedy `budgets` on both backends; `gather` holds
    the model's weights whole for HF's passes (ZeRO-3)."""
    ours = backend.generate(prompts, G, budgets)
    with gather():
        hf = HFGenerateBackend(model, tokenizer, synced_gpus=False).generate(prompts, G, budgets)
        trainer = token_logprobs(model, ours.input_ids, ours.attention_mask,
                                 ours.completion_start, 8, temperature=1.0)
        mask = ours.completion_mask.float()
        assert ours.sampler_logprobs is not None
        bound = near_tie_bound(trainer, ours.sampler_logprobs, mask)
        assert bound < 1e-2, (f"the engines' log-probs of the same tokens differ by "
                              f"{bound / 2:.2e}")
        return agree_up_to_near_ties(model, ours, hf, bound), bound


def one_step(engine: Any, tokenizer: Any) -> None:
    """One optimizer step on the NLL of a text, big enough to move greedy choices."""
    ids = tokenizer(["The answer is always no. " * 8], return_tensors="pt")["input_ids"]
    with torch.enable_grad():
        engine.module.train()
        loss = engine.module(input_ids=ids, labels=ids).loss
        engine.backward(loss)
        assert engine.step()
        engine.module.eval()
