"""Slurm glue: the #SBATCH options of a job kind, rendering batch scripts, submitit executors,
submitting with `sbatch`. No RL logic here.

Read top to bottom: options.py (the one list of #SBATCH options), render.py and templates/
(batch scripts), executor.py (submitit), jobs.py (sbatch / sacct). The names below are
imported on first use, so `options` stays free of jinja2 and submitit.
"""

from hargo_hpc._lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "sbatch_options": "hargo_hpc.slurm.options",
    "render_script": "hargo_hpc.slurm.render",
    "make_executor": "hargo_hpc.slurm.executor",
    "slurm_parameters": "hargo_hpc.slurm.executor",
})
