"""The RL trainer: models, rollout, the RL loop on DeepSpeed ZeRO, SFT warm start, checkpoints.
Not implemented yet: a later issue fills this package."""
