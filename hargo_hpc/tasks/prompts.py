"""The prompt the model sees: HPC-GPT's Alpaca template, or the tokenizer's chat template.

`format`: `alpaca`, `chat`, or `auto` (chat when the tokenizer has a chat template, else
alpaca). HPC-GPT fine-tuned with the Alpaca template (Ding et al. 2023), so a model trained on
it expects that text; an instruct model (SmolLM2, Qwen) expects its own chat template.
"""

from __future__ import annotations

from typing import Any

ALPACA = (
    "Below is an instruction that describes a task. Write a response that appropriately "
    "completes the request.\n\n### Instruction:\n{instruction}\n\n### Response:"
)


def resolve_format(format: str, tokenizer: Any | None) -> str:
    """'alpaca' or 'chat' for this tokenizer; ValueError for an unknown format, or for 'chat'
    with a tokenizer that has no chat template."""
    has_chat = tokenizer is not None and bool(getattr(tokenizer, "chat_template", None))
    if format == "auto":
        return "chat" if has_chat else "alpaca"
    if format == "alpaca":
        return "alpaca"
    if format == "chat":
        if not has_chat:
            raise ValueError("prompt format 'chat' needs a tokenizer with a chat template")
        return "chat"
    raise ValueError(f"unknown prompt format {format!r}; use auto, alpaca or chat")


def build_prompt(user_text: str, format: str = "alpaca", tokenizer: Any | None = None) -> str:
    """The full prompt text for `user_text` (a task's `user_text(example)`)."""
    if resolve_format(format, tokenizer) == "alpaca":
        return ALPACA.format(instruction=user_text)
    messages = [{"role": "user", "content": user_text}]
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
