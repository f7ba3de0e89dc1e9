"""Slurm glue: rendering batch scripts and building submitit executors. No RL logic here."""

from hargo_hpc.slurm.executor import make_executor, slurm_parameters
from hargo_hpc.slurm.render import render_script

__all__ = ["make_executor", "render_script", "slurm_parameters"]
