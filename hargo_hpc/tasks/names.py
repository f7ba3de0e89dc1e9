"""The task names experiment files use, and the prompt formats: torch-free, read by the config."""

from __future__ import annotations

TASK_NAMES = ("data_race_c", "data_race_fortran", "mlperf_qa", "plp_qa", "gemm")
PROMPT_FORMATS = ("auto", "alpaca", "chat")  # auto = the chat template when the tokenizer has one
