"""submitit executors built from a job kind's resources: Slurm on a cluster, local elsewhere.

One abstraction for every job kind: `make_executor(resources, folder, backend=...)` returns a
submitit executor whose `submit`/`map_array` run the same entry point under Slurm or locally.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, Literal

import submitit

from hargo_hpc.config import JobResources

Backend = Literal["slurm", "local", "auto"]


def _minutes(time: str) -> int:
    """Slurm's [D-]HH:MM:SS / MM:SS / MM time limit in whole minutes (at least 1)."""
    days = 0
    if "-" in time:
        head, time = time.split("-", 1)
        days = int(head)
    parts = [int(p) for p in time.split(":")]
    if len(parts) == 1:
        hours, minutes, seconds = 0, parts[0], 0
    elif len(parts) == 2:
        hours, minutes, seconds = 0, parts[0], parts[1]
    elif len(parts) == 3:
        hours, minutes, seconds = parts
    else:
        raise ValueError(f"bad Slurm time limit {time!r}")
    return max(1, days * 1440 + hours * 60 + minutes + (1 if seconds else 0))


def slurm_parameters(resources: JobResources, setup: Sequence[str] = ()) -> dict[str, Any]:
    """submitit's `slurm_*` parameters for `resources` (the same lines the templates write)."""
    params: dict[str, Any] = {
        "slurm_partition": resources.partition,
        "nodes": resources.nodes,
        "tasks_per_node": resources.ntasks_per_node,
        "cpus_per_task": resources.cpus_per_task,
        "slurm_mem": resources.mem,
        "timeout_min": _minutes(resources.time),
        "slurm_setup": list(setup),
    }
    if resources.gpus_per_node:
        params["slurm_gres"] = f"gpu:{resources.gpus_per_node}"
    if resources.array_parallelism:
        params["slurm_array_parallelism"] = resources.array_parallelism
    extra: dict[str, Any] = {}
    for key in ("account", "qos", "constraint"):
        if getattr(resources, key):
            extra[key] = getattr(resources, key)
    for line in resources.extra:
        key, _, value = line.lstrip("-").partition("=")
        extra[key.replace("-", "_")] = value or True
    if extra:
        params["slurm_additional_parameters"] = extra
    return params


def make_executor(
    resources: JobResources,
    folder: str | os.PathLike[str],
    *,
    backend: Backend = "auto",
    job_name: str = "hargo",
    setup: Sequence[str] = (),
) -> submitit.AutoExecutor:
    """A submitit executor for one job kind; "auto" uses Slurm when `sbatch` is available."""
    cluster = None if backend == "auto" else backend
    executor = submitit.AutoExecutor(folder=str(folder), cluster=cluster)
    if executor.cluster == "slurm":
        executor.update_parameters(name=job_name, **slurm_parameters(resources, setup))
    else:
        executor.update_parameters(
            name=job_name,
            timeout_min=_minutes(resources.time),
            cpus_per_task=resources.cpus_per_task,
            tasks_per_node=resources.ntasks_per_node,
        )
    return executor
