"""What a model is to the trainer: loading any HF checkpoint directory (or building the tiny
model offline), LoRA, the reference model and the HF export (`models`); the tiny model's own
corpus (`tiny_corpus`); token log-probs and entropy of completions (`logprobs`)."""
