"""submitit executors built from a job kind's resources: Slurm on a cluster, local elsewhere.

One abstraction for every job kind: `make_executor(resources, folder, backend=...)` returns a
submitit executor whose `submit`/`map_array` run the same entry point under Slurm or locally.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from typing import Any, Literal

import submitit

from hargo_hpc.config import JobResources
from hargo_hpc.slurm.options import minutes, sbatch_options, signal_lead_s

Backend = Literal["slurm", "local", "auto"]


# sbatch option -> (submitit parameter, type); every other option but the three handled in
# slurm_parameters goes to `slurm_additional_parameters` unchanged.
_SUBMITIT_NAMES: dict[str, tuple[str, type]] = {
    "job-name": ("name", str),
    "partition": ("slurm_partition", str),
    "nodes": ("nodes", int),
    "ntasks-per-node": ("tasks_per_node", int),
    "cpus-per-task": ("cpus_per_task", int),
    "gres": ("slurm_gres", str),
    "mem": ("slurm_mem", str),
    "account": ("slurm_account", str),
    "qos": ("slurm_qos", str),
    "constraint": ("slurm_constraint", str),
}
# submitit caps an array's parallelism at its own default (256) unless told; "no limit" in
# the resources is the array's size (submitit writes %min(size, this)).
_NO_ARRAY_LIMIT = 1 << 30


def slurm_parameters(
    resources: JobResources, setup: Sequence[str] = (), *, job_name: str = "hargo",
    to_steps: bool = False, requeue: bool = False,
) -> dict[str, Any]:
    """submitit's parameters for `resources`, derived from the templates' `sbatch_options`.

    Each option maps to submitit's name for it where submitit has one (the table above),
    else to `slurm_additional_parameters`. Three need more: `--time` goes verbatim into the
    additional parameters (the same limit, to the second) and, in whole minutes rounded up,
    into `timeout_min` (submitit's own timeout bookkeeping); `--signal`'s lead time becomes
    `slurm_signal_delay_s` (submitit sends its own signal, see hargo_hpc.slurm.options);
    submitit writes `--array`, `--output` and `--open-mode=append` itself, so the list is
    built without the first two, the third is left to it, and `array_parallelism` becomes
    `slurm_array_parallelism`.
    """
    params: dict[str, Any] = {"slurm_setup": list(setup)}
    extra: dict[str, Any] = {}
    for name, value in sbatch_options(resources, job_name=job_name, to_steps=to_steps,
                                      requeue=requeue):
        if name in _SUBMITIT_NAMES:
            key, kind = _SUBMITIT_NAMES[name]
            params[key] = kind(value)
        elif name == "time":
            params["timeout_min"] = minutes(value)
            extra["time"] = value
        elif name == "signal":
            params["slurm_signal_delay_s"] = signal_lead_s(value)
        elif name == "open-mode":
            continue  # submitit appends to its logs always
        else:
            extra[name.replace("-", "_")] = value or True
    params["slurm_array_parallelism"] = resources.array_parallelism or _NO_ARRAY_LIMIT
    params["slurm_additional_parameters"] = extra
    return params


def make_executor(
    resources: JobResources,
    folder: str | os.PathLike[str],
    *,
    backend: Backend = "auto",
    job_name: str = "hargo",
    setup: Sequence[str] = (),
    python: str | None = None,
    requeue: bool = False,
    dependency: str = "",
    max_requeues: int = 3,
) -> submitit.AutoExecutor | submitit.LocalExecutor:
    """A submitit executor for one job kind; "auto" uses Slurm when `sbatch` is available.

    On Slurm: `slurm_parameters` of the resources, submitit's job script running `python`
    (default: this interpreter), its stdout and stderr in one log per task, `dependency` (an
    sbatch `--dependency` value; one that can never hold ends the job) and at most
    `max_requeues` requeues after a time limit. Locally: one process per task (submitted
    task, not rank), the time limit and the signal's lead."""
    params = slurm_parameters(resources, setup, job_name=job_name, requeue=requeue)
    if backend == "local" or (backend == "auto" and shutil.which("sbatch") is None):
        # submitit's AutoExecutor refuses the local executor's signal lead (not in its valid
        # parameters), so the local one is built directly: it takes the time limit and lead
        local = submitit.LocalExecutor(folder=str(folder), max_num_timeout=max_requeues,
                                       **({"python": python} if python else {}))
        local.update_parameters(timeout_min=params["timeout_min"],
                                signal_delay_s=params["slurm_signal_delay_s"])
        return local
    executor = submitit.AutoExecutor(folder=str(folder), cluster="slurm",
                                     slurm_max_num_timeout=max_requeues,
                                     **({"slurm_python": python} if python else {}))
    if dependency:
        params["slurm_additional_parameters"].update(dependency=dependency,
                                                     kill_on_invalid_dep="yes")
    executor.update_parameters(**params, slurm_stderr_to_stdout=True)
    return executor
