"""The RL trainer: models (models.py), rollout (rollout.py, logprobs.py), rewards through the
task registry and the handoff (rewards.py, local_workers.py), the loop (loop.py, updates.py),
the SFT warm start (sft.py), the DeepSpeed engine (engine.py, the only module importing
deepspeed), checkpoints (checkpoint.py), ranks (distributed.py), metrics (metrics.py) and the
`hargo train` / `hargo sft` commands (commands.py). settings.py (the `[model]`, `[rollout]` and
`[training]` sections) needs no torch. See docs/training.md.
"""
