"""Slurm glue: the #SBATCH options of a job kind, rendering batch scripts, the submission plan,
submitting it through submitit. No RL logic here.

Read top to bottom: options.py (the one list of #SBATCH options), render.py and templates/
(batch scripts, `hargo render`), submission.py (the plan: runs, jobs, edges), executor.py
(submitit's executor of a job kind), entrypoints.py (what a submitit task runs),
submitter.py (`hargo submit`: one walk over the plan's graph, on Slurm or locally),
manifest.py, watch.py (status, cancel, logs), jobs.py (sbatch / sacct for tests). The names
below are imported on first use, so `options` stays free of jinja2 and submitit.
"""

from hargo_hpc._lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "sbatch_options": "hargo_hpc.slurm.options",
    "render_script": "hargo_hpc.slurm.render",
    "make_executor": "hargo_hpc.slurm.executor",
    "slurm_parameters": "hargo_hpc.slurm.executor",
})
