"""hargo-hpc: Slurm-native RL post-training of LLMs on HPC tasks."""

__version__ = "0.1.0"
