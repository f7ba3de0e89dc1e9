"""HPC tasks: data race detection (C/C++, Fortran), MLPerf QA, PLP QA and GEMM code.

Each task loads its data, builds the prompt, extracts the answer, rewards and scores itself
(`base.Task`); the registry maps the config's names to them (`registry.get_task`). See
docs/tasks.md.
"""

from hargo_hpc._lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "DataError": "hargo_hpc.tasks.base",
    "Example": "hargo_hpc.tasks.base",
    "Task": "hargo_hpc.tasks.base",
    "RewardSettings": "hargo_hpc.tasks.settings",
    "get_task": "hargo_hpc.tasks.registry",
    "task_names": "hargo_hpc.tasks.registry",
    "build_prompt": "hargo_hpc.tasks.prompts",
    "load_examples": "hargo_hpc.tasks.data",
    "split_examples": "hargo_hpc.tasks.split",
    "MixtureSampler": "hargo_hpc.tasks.split",
})
