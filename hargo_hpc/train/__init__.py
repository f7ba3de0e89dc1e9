"""The RL trainer: models (models.py), rollout (rollout.py, logprobs.py), rewards through the
task registry and the handoff (rewards.py, local_workers.py), the loop (loop.py: the run;
run.py: what its parts share; setup.py: its set-up; step.py: one step; updates.py: the update),
SFT (sft.py: batches and loss; sft_run.py: the warm start and `hargo sft`), the DeepSpeed engine
(engine.py, the only module importing deepspeed), checkpoints (checkpoint.py), ranks
(distributed.py), metrics (metrics.py) and the `hargo train` / `hargo sft` commands
(commands.py). settings.py (the `[model]`, `[rollout]` and `[training]` sections) needs no
torch. See docs/training.md.
"""
