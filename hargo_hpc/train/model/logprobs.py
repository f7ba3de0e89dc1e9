"""Token log-probabilities (and entropies) of completion tokens under a causal LM.

`token_logprobs` and `token_logprobs_and_entropy` score the completion part of left-padded
prompt + right-padded completion rows, at the sampling temperature, in micro-batches, with or
without a graph; `position_ids_from_mask` gives the position ids `generate` uses. The alignment,
the formulas and the choices (temperature, left padding, micro-batches) are in docs/rollout.md,
"Token log-probs".
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch
from torch import Tensor, nn


def position_ids_from_mask(attention_mask: Tensor) -> Tensor:
    """Position of each token among the real tokens of its row: cumsum(mask) − 1, and 0 on the
    left padding (whose value does not matter: nothing attends to it)."""
    return (attention_mask.long().cumsum(dim=-1) - 1).clamp(min=0)


def token_logprobs(
    model: nn.Module,
    input_ids: Tensor,
    attention_mask: Tensor,
    completion_start: int,
    micro_batch: int,
    *,
    temperature: float = 1.0,
    grad: bool = False,
) -> Tensor:
    """[B, T] log-probabilities of the completion tokens `input_ids[:, completion_start:]`
    (formula: `token_logprobs_and_entropy`); 0 where `attention_mask` is 0."""
    logprobs, _ = _run(model, input_ids, attention_mask, completion_start, micro_batch,
                       temperature=temperature, grad=grad, entropy=False)
    return logprobs


def token_logprobs_and_entropy(
    model: nn.Module,
    input_ids: Tensor,
    attention_mask: Tensor,
    completion_start: int,
    micro_batch: int,
    *,
    temperature: float = 1.0,
    grad: bool = False,
) -> tuple[Tensor, Tensor]:
    """([B, T] log-probabilities, [B, T] entropies, the latter without a graph: a statistic to
    log) of the completion positions; both 0 where `attention_mask` is 0. With P =
    `completion_start` and τ the sampling temperature, the logits z at column P+j−1 score
    completion token j:

        logp[b, j] = log_softmax(z[b, P+j−1] / τ)[input_ids[b, P+j]]
        H[b, j]    = logsumexp(z') − Σ_v softmax(z')_v · z'_v,   z' = z[b, P+j−1] / τ

    (the entropy of a softmax; τ as in verl's and TRL's log-prob passes)."""
    logprobs, entropy = _run(model, input_ids, attention_mask, completion_start, micro_batch,
                             temperature=temperature, grad=grad, entropy=True)
    assert entropy is not None
    return logprobs, entropy


def _check(input_ids: Tensor, attention_mask: Tensor, completion_start: int, micro_batch: int,
           temperature: float) -> None:
    if input_ids.dim() != 2:
        raise ValueError(f"input_ids must be [B, L], got shape {tuple(input_ids.shape)}")
    if input_ids.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"input_ids must hold integer token ids, got {input_ids.dtype}")
    if attention_mask.shape != input_ids.shape:
        raise ValueError(f"attention_mask shape {tuple(attention_mask.shape)} differs from "
                         f"input_ids shape {tuple(input_ids.shape)}")
    length = input_ids.shape[1]
    if not 0 < completion_start < length:
        raise ValueError(f"completion_start must be in 1..{length - 1} (at least one prompt and "
                         f"one completion position), got {completion_start}")
    if micro_batch < 1:
        raise ValueError(f"micro_batch must be >= 1, got {micro_batch}")
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")


def _run(
    model: nn.Module,
    input_ids: Tensor,
    attention_mask: Tensor,
    completion_start: int,
    micro_batch: int,
    *,
    temperature: float,
    grad: bool,
    entropy: bool,
) -> tuple[Tensor, Tensor | None]:
    _check(input_ids, attention_mask, completion_start, micro_batch, temperature)
    logprob_parts: list[Tensor] = []
    entropy_parts: list[Tensor] = []
    context = contextlib.nullcontext() if grad else torch.no_grad()
    with context:
        for lo in range(0, input_ids.shape[0], micro_batch):
            lp, ent = _chunk(model, input_ids[lo:lo + micro_batch],
                             attention_mask[lo:lo + micro_batch], completion_start,
                             temperature=temperature, entropy=entropy)
            logprob_parts.append(lp)
            if ent is not None:
                entropy_parts.append(ent)
    return (torch.cat(logprob_parts), torch.cat(entropy_parts) if entropy else None)


def _chunk(
    model: nn.Module,
    input_ids: Tensor,
    attention_mask: Tensor,
    completion_start: int,
    *,
    temperature: float,
    entropy: bool,
) -> tuple[Tensor, Tensor | None]:
    """One forward pass; logits are kept only for positions P−1 … L−2 (`logits_to_keep`)."""
    completion_length = input_ids.shape[1] - completion_start
    out = model(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids_from_mask(attention_mask),
        use_cache=False,
        logits_to_keep=completion_length + 1,
    )
    # The last T+1 positions are P−1 … L−1; the logits at L−1 score a token past the end.
    logits = out.logits[:, -(completion_length + 1):-1, :]
    targets = input_ids[:, completion_start:].long()
    logprobs = TakenLogprobs.apply(logits, targets, temperature)
    keep = attention_mask[:, completion_start:].bool()
    zero = torch.zeros((), dtype=logprobs.dtype, device=logprobs.device)
    logprobs = torch.where(keep, logprobs, zero)
    if not entropy:
        return logprobs, None
    with torch.no_grad():  # logged, never differentiated; a row at a time in fp32
        ent = torch.stack([_entropy(row.float() / temperature) for row in logits.detach()])
    return logprobs, torch.where(keep, ent, zero)


def _entropy(z: Tensor) -> Tensor:
    """H = logsumexp(z) − Σ_v softmax(z)_v · z_v over the last dimension."""
    return torch.logsumexp(z, dim=-1) - (torch.softmax(z, dim=-1) * z).sum(dim=-1)


class TakenLogprobs(torch.autograd.Function):
    """log_softmax(z / τ)[target] of each position, computed a row at a time in fp32 (fp64
    logits stay fp64) and kept
    for backward as the logits themselves (in the model's dtype) and the [B, T] log-normaliser:
    no fp32 copy of the [B, T, V] logits and no softmax lives through the backward. Backward:
    ∂/∂z_v = (1[v = target] − softmax(z / τ)_v) / τ, times the incoming gradient (the
    derivative of a log-softmax), rebuilt a row at a time."""

    @staticmethod
    def forward(ctx: Any, logits: Tensor, targets: Tensor, temperature: float) -> Tensor:
        work = torch.promote_types(logits.dtype, torch.float32)  # fp32, or fp64 as given
        taken = torch.empty(logits.shape[:2], dtype=work, device=logits.device)
        log_norm = torch.empty_like(taken)
        for row in range(logits.shape[0]):
            z = logits[row].to(work) / temperature
            log_norm[row] = torch.logsumexp(z, dim=-1)
            taken[row] = z.gather(-1, targets[row].unsqueeze(-1)).squeeze(-1) - log_norm[row]
        ctx.save_for_backward(logits, targets, log_norm)
        ctx.temperature = temperature
        return taken

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None, None]:
        logits, targets, log_norm = ctx.saved_tensors
        tau = ctx.temperature
        grad_logits = torch.empty_like(logits)
        for row in range(logits.shape[0]):
            probs = torch.exp(logits[row].to(log_norm.dtype) / tau - log_norm[row].unsqueeze(-1))
            g = probs.mul_(-grad[row].unsqueeze(-1))
            g.scatter_add_(-1, targets[row].unsqueeze(-1), grad[row].unsqueeze(-1))
            grad_logits[row] = g.div_(tau)
        return grad_logits, None, None
