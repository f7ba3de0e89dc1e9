"""The prompt formats experiment files name: torch-free, read by the config (the task names
are the registry's, `registry.py`)."""

from __future__ import annotations

PROMPT_FORMATS = ("auto", "alpaca", "chat")  # auto = the chat template when the tokenizer has one
