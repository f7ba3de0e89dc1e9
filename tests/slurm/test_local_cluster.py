"""Real jobs on the real local Slurm cluster: sbatch arrays from the project's templates,
submitit jobs on the `cpu` and `gpu` partitions, states read back through `sacct`."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import cloudpickle
import pytest
from waiting import wait_until

from hargo_hpc.config import JobResources
from hargo_hpc.slurm import make_executor, render_script
from hargo_hpc.slurm.jobs import FINISHED, sacct_states, sbatch, write_script

pytestmark = pytest.mark.slurm
# The jobs run this module's functions; tests/ is not importable there, so send them by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def wait_for_sacct(job_id: str, count: int, timeout: float = 90) -> dict[str, str]:
    """The states of the job's entries once `count` of them are finished."""
    def finished() -> dict[str, str] | None:
        states = sacct_states(job_id)
        return states if sum(s in FINISHED for s in states.values()) >= count else None

    return wait_until(finished, timeout, f"{count} finished entries of job {job_id}",
                      poll=0.5, context=lambda: str(sacct_states(job_id)))


def test_sbatch_array_from_template(slurm_cluster: dict[str, str], tmp_path: Path) -> None:
    resources = JobResources(partition="cpu", cpus_per_task=1, time="00:05:00",
                             array_parallelism=2)
    script = render_script(
        "base.sh.j2",
        job_name="hargo-array-test",
        resources=resources,
        command='echo "task=$SLURM_ARRAY_TASK_ID omp=$OMP_NUM_THREADS" > '
                f"{tmp_path}/out_$SLURM_ARRAY_TASK_ID.txt",
        log_dir=tmp_path,
        array="0-3",
        setup=["export HARGO_TEST_SETUP=1"],
    )
    assert "#SBATCH --array=0-3%2" in script
    assert "#SBATCH --partition=cpu" in script
    job_id = sbatch(write_script(script, tmp_path / "job.sh"))
    states = wait_for_sacct(job_id, count=4)
    assert {states[f"{job_id}_{i}"] for i in range(4)} == {"COMPLETED"}, states
    for i in range(4):
        assert (tmp_path / f"out_{i}.txt").read_text() == f"task={i} omp=1\n"


def test_sbatch_failure_is_reported_by_sacct(slurm_cluster: dict[str, str], tmp_path: Path) -> None:
    script = render_script("base.sh.j2", job_name="hargo-fail-test",
                           resources=JobResources(time="00:05:00"), command="exit 3",
                           log_dir=tmp_path)
    job_id = sbatch(write_script(script, tmp_path / "fail.sh"))
    assert wait_for_sacct(job_id, count=1)[job_id] == "FAILED"


def where_am_i() -> dict[str, str]:
    """Runs inside the job: what Slurm gave it."""
    keys = ("SLURM_JOB_ID", "SLURM_JOB_PARTITION", "CUDA_VISIBLE_DEVICES", "SLURM_CPUS_PER_TASK")
    return {key: os.environ.get(key, "") for key in keys}


@pytest.mark.parametrize(
    ("partition", "gpus"), [("cpu", 0), ("gpu", 1)], ids=["cpu", "gpu-gres"]
)
def test_submitit_job(slurm_cluster: dict[str, str], tmp_path: Path, partition: str,
                      gpus: int) -> None:
    resources = JobResources(partition=partition, gpus_per_node=gpus, cpus_per_task=2,
                             time="00:05:00")
    executor = make_executor(resources, tmp_path / "submitit", backend="slurm",
                             job_name=f"hargo-submitit-{partition}")
    job = executor.submit(where_am_i)
    result = job.result()
    assert result["SLURM_JOB_ID"] == job.job_id
    assert result["SLURM_JOB_PARTITION"] == partition
    assert result["SLURM_CPUS_PER_TASK"] == "2"
    # one of the node's two gres devices (which one depends on what else runs there)
    assert (result["CUDA_VISIBLE_DEVICES"] in ("0", "1")) if gpus else (
        result["CUDA_VISIBLE_DEVICES"] == "")
    assert wait_for_sacct(job.job_id, count=1)[job.job_id] == "COMPLETED"
    # submitit reads the same state through sacct (forced: its cache lags by design)
    assert job.get_info(mode="force")["State"] == "COMPLETED"


def scontrol_job(job_id: str) -> dict[str, str]:
    """`scontrol -o show job` of one job as key -> value (values may hold spaces)."""
    done = subprocess.run(["scontrol", "-o", "show", "job", job_id], capture_output=True,
                          text=True, timeout=30, check=True)
    fields = re.split(r" +(?=[\w/:]+=)", done.stdout.strip())
    return dict(field.partition("=")[::2] for field in fields)


def test_template_and_submitit_jobs_get_the_same_job(slurm_cluster: dict[str, str],
                                                     tmp_path: Path) -> None:
    """Both paths submit one resource shape; Slurm records the same job for each."""
    resources = JobResources(partition="gpu", gpus_per_node=1, cpus_per_task=2, mem="1G",
                             time="00:02:30", qos="normal",
                             extra=["--comment=two words", "--exclusive"])
    script = render_script("base.sh.j2", job_name="hargo-same", resources=resources,
                           command="true", log_dir=tmp_path)
    ours = sbatch(write_script(script, tmp_path / "same.sh"))
    job = make_executor(resources, tmp_path / "submitit", backend="slurm",
                        job_name="hargo-same").submit(where_am_i)
    assert job.result()["CUDA_VISIBLE_DEVICES"] in ("0", "1")  # one device of the node's two
    for job_id in (ours, job.job_id):
        assert wait_for_sacct(job_id, count=1)[job_id] == "COMPLETED"
    keys = ("JobName", "Partition", "QOS", "TimeLimit", "NumNodes", "NumCPUs", "NumTasks",
            "CPUs/Task", "MinMemoryNode", "TresPerNode", "OverSubscribe", "Comment")
    mine, theirs = scontrol_job(ours), scontrol_job(job.job_id)
    assert all(mine.get(key) for key in keys), mine
    assert {key: mine.get(key) for key in keys} == {key: theirs.get(key) for key in keys}
    assert mine["TimeLimit"] == "00:03:00"  # Slurm's own rounding, the same on both paths
    assert mine["Comment"] == "two words" and mine["OverSubscribe"] == "NO"


def test_submitit_local_backend_runs_the_same_function(tmp_path: Path) -> None:
    executor = make_executor(JobResources(time="00:05:00"), tmp_path, backend="local")
    result = executor.submit(where_am_i).result()
    assert result["SLURM_JOB_PARTITION"] == ""
