"""The weights a colocated vLLM engine is given (`weight_sync.full_weights`): whole tensors
under the transformers names, a module at a time, LoRA folded in out of place. No vLLM here:
what the engine does with them is tests/train/test_vllm_backend.py's."""

from __future__ import annotations

import copy
from pathlib import Path

import torch

from hargo_hpc.train.backend.engine import build_engine
from hargo_hpc.train.model.models import LoraOptions, apply_lora
from hargo_hpc.train.rollout.weight_sync import full_weights, zero3_gather

from ._two_ranks import engine_test_model


def plain_weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def test_a_plain_model_gives_each_parameter_once_under_its_own_name() -> None:
    model = engine_test_model()
    model.config.tie_word_embeddings = True
    model.lm_head.weight = model.model.embed_tokens.weight  # tied: given once
    got = dict(full_weights(model))
    expected = plain_weights(model)
    assert list(got) == list(expected) and "lm_head.weight" not in got
    for name, tensor in expected.items():
        assert torch.equal(got[name], tensor), name
    got["model.norm.weight"].add_(1.0)  # copies: the model is not changed through them
    assert torch.equal(model.model.norm.weight, expected["model.norm.weight"])


def test_lora_is_folded_into_the_base_weights_out_of_place() -> None:
    model = apply_lora(engine_test_model(), LoraOptions(r=4, alpha=8.0))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:  # B = 0 at the start: give the adapters an effect
                p.normal_(0.0, 0.5)
    before = plain_weights(model)
    got = dict(full_weights(model))
    merged = copy.deepcopy(model).merge_and_unload()
    expected = plain_weights(merged)
    assert list(got) == list(expected)
    assert not any("lora" in name or "base_layer" in name for name in got)
    for name, tensor in expected.items():  # the same sum W + (α/r) B A, maybe another order
        assert torch.allclose(got[name], tensor, rtol=0, atol=8 * torch.finfo(tensor.dtype).eps
                              * float(tensor.abs().max())), name
    q = "model.layers.0.self_attn.q_proj.weight"
    assert not torch.equal(got[q], before[f"base_model.model.{q.replace('.weight', '')}"
                                          ".base_layer.weight"])
    after = plain_weights(model)  # the trainer's own weights are untouched, bit for bit
    assert all(torch.equal(after[name], before[name]) for name in before)


def test_under_zero3_each_module_is_gathered_whole(tmp_path: Path) -> None:
    model = engine_test_model()
    expected = plain_weights(model)
    engine = build_engine(model, zero_stage=3, micro_batch_size=1, run_dir=tmp_path / "run")
    partitioned = dict(engine.module.named_parameters())
    assert all(p.numel() == 0 or p.shape != expected[n].shape for n, p in partitioned.items()
               if n in expected), "ZeRO-3 should hold the parameters partitioned"
    got = dict(full_weights(engine.module, zero3_gather))
    assert list(got) == list(expected)
    for name, tensor in expected.items():
        assert torch.equal(got[name], tensor), name
