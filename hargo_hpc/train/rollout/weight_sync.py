"""The trainer's weights as a colocated vLLM engine loads them: whole tensors under their
Hugging Face names, a module at a time, so that under ZeRO-3 only one module's parameters are
ever gathered whole, and under LoRA the adapters folded into the base weights they change.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

import torch
from torch import Tensor, nn

from hargo_hpc.train.rollout.generate import generating_model

# Gathers a list of parameters whole for a `with` (ZeRO-3: deepspeed.zero.GatheredParameters).
Gather = Callable[[list[nn.Parameter]], AbstractContextManager[Any]]
PEFT_PREFIX = "base_model.model."


def zero3_gather(params: list[nn.Parameter]) -> AbstractContextManager[Any]:
    """`params` gathered whole on every rank, read-only (ZeRO-3)."""
    import deepspeed

    return deepspeed.zero.GatheredParameters(params, modifier_rank=None)


def full_weights(model: nn.Module, gather: Gather | None = None
                 ) -> Iterator[tuple[str, Tensor]]:
    """(name, whole tensor) of each parameter of `model` (a DeepSpeed engine or DDP is
    unwrapped), a module's parameters gathered at a time by `gather` (None: they are whole
    already, ZeRO 0–2). Names are the transformers model's own (a PEFT wrapper's prefix and
    `base_layer` taken out). A LoRA layer yields its base weight merged,

        W' = W + ΔW,   ΔW = (α / r) · B A    (Hu et al., "LoRA", arXiv 2106.09685, eq. 3)

    computed out of place by PEFT's `get_delta_weight` (the trainer's W is not touched, so no
    merge-unmerge round-off accumulates in it), and not its adapter matrices. Each tensor is a
    copy valid after the gather is released."""
    model = generating_model(model)  # the model generation runs on, as HF's backend
    gather = gather or _no_gather
    taken: set[str] = set()
    seen: set[int] = set()  # a tied weight (embeddings and LM head) once, under its first name
    for prefix, module in model.named_modules():
        if any(prefix.startswith(done) for done in taken):
            continue
        if _is_lora_layer(module):
            taken.add(prefix + ".")
            yield from _merged(prefix, module, gather)
            continue
        own = [(name, p) for name, p in module.named_parameters(recurse=False)
               if id(p) not in seen]
        seen.update(id(p) for _, p in own)
        if not own:
            continue
        with gather([p for _, p in own]):
            for name, p in own:
                yield _hf_name(f"{prefix}.{name}" if prefix else name), p.detach().clone()


def _merged(prefix: str, layer: nn.Module, gather: Gather) -> Iterator[tuple[str, Tensor]]:
    base = layer.base_layer
    with gather(list(layer.parameters())):
        weight = base.weight.detach().clone()
        for adapter in layer.active_adapters:
            if adapter in layer.lora_A:
                weight += layer.get_delta_weight(adapter).to(weight)
        yield _hf_name(f"{prefix}.weight"), weight
        if getattr(base, "bias", None) is not None:
            yield _hf_name(f"{prefix}.bias"), base.bias.detach().clone()


def _is_lora_layer(module: nn.Module) -> bool:
    return all(hasattr(module, a) for a in ("base_layer", "lora_A", "get_delta_weight"))


def _hf_name(name: str) -> str:
    name = name.removeprefix(PEFT_PREFIX)
    return name.replace(".base_layer.", ".")


@contextlib.contextmanager
def _no_gather(params: list[nn.Parameter]) -> Iterator[None]:
    yield


@torch.no_grad()
def push_weights(backend: Any, model: nn.Module, gather: Gather | None = None) -> None:
    """`full_weights(model, gather)` into the backend's engine (`VLLMBackend.load_weights`)."""
    backend.load_weights(full_weights(model, gather))
