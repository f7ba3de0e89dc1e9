"""Submitting a plan: one walk over its job graph, each job handed to a submitit executor.

`submit_plan(plan, executor, ...)` runs the jobs of `submission.plan_submission` on Slurm
(`executor="slurm"`) or as local processes (`"local"`), in an order where each job's `after`
jobs come first: refusals before anything runs (a used directory, `sbatch --test-only` of
every rendered script), then the runs' configs, scripts, handoff directory and manifest, then
each job as one array of entry points with its dependencies (local: started once its edges
hold). What each step does and why: docs/slurm.md, "Submitting an experiment".
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from hargo_hpc.slurm.entrypoints import HargoCommand, Resumable
from hargo_hpc.slurm.manifest import Manifest
from hargo_hpc.slurm.options import JOB_ENVIRONMENT
from hargo_hpc.slurm.submission import (
    SUBMITIT,
    Plan,
    PlannedJob,
    SubmitError,
    check_fresh,
    check_resumable,
    manifest_of,
    max_array_size,
    split_array,
    write_run_configs,
    write_scripts,
)

Executor = Literal["slurm", "local"]
Log = Callable[[str], object]
POLL_S = 0.5  # the local walk's poll of its processes


def entry_points(plan: Plan, job: PlannedJob, env: dict[str, str] | None = None
                 ) -> list[HargoCommand]:
    """One callable per task of `job`: the sft and train tasks resumable (submitit's
    checkpoint-and-requeue, on every rank), the others plain commands run by rank 0 alone
    (as their batch scripts run them once)."""
    if job.requeue:
        return [Resumable(argv, env, job.resources.signal_lead_s) for argv in job.commands]
    return [HargoCommand(argv, env, once=True) for argv in job.commands]


def submit_plan(plan: Plan, executor: Executor = "slurm", *, log: Log = print,
                resume: bool = False) -> Manifest:
    """Submit every job of `plan` (module docstring); return the saved manifest."""
    if resume:
        if executor != "slurm":
            raise SubmitError("--resume is for --executor slurm; a local run resumes with "
                              "`hargo train JOB --resume`")
        check_resumable(plan)
    else:
        check_fresh(plan)
    write_run_configs(plan)
    scripts = write_scripts(plan)
    if plan.handoff_dir is not None:
        plan.handoff_dir.mkdir(parents=True, exist_ok=True)
    if executor == "slurm":
        limit = max_array_size()
        for job in plan.jobs:  # a job in parts: its first part's shape
            first = [f"--array=0-{min(job.tasks, limit) - 1}"] if job.tasks > limit else []
            _sbatch_test(["sbatch", "--test-only", *first, str(scripts[job.name])])
        return _submit_slurm(plan, limit, log)
    return _run_local(plan, log)


# ---------------------------------------------------------------- Slurm


def _sbatch_test(argv: list[str]) -> None:
    """`sbatch --test-only` of one script; SubmitError with Slurm's own message."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        raise SubmitError("sbatch not found: this is not a Slurm login node; run the same "
                          "jobs here with `--executor local`") from None
    except subprocess.TimeoutExpired:
        raise SubmitError(f"{' '.join(argv)}: no answer from Slurm in 60 s") from None
    if done.returncode != 0:
        message = " ".join((done.stderr or done.stdout).split())
        raise SubmitError(f"sbatch refused {Path(argv[-1]).name}: {message}")


def job_executor(plan: Plan, job: PlannedJob, backend: Executor, dependency: str = "") -> Any:
    """submitit's executor for `job` (`executor.make_executor`): its resources, the setup lines
    and the job environment, its folder under the submission's `submitit/`, `dependency`."""
    from hargo_hpc.slurm.executor import make_executor

    return make_executor(job.resources, plan.root / SUBMITIT / job.name, backend=backend,
                         job_name=plan.job_name(job),
                         setup=[*plan.config.slurm.setup, *JOB_ENVIRONMENT],
                         python=plan.python, requeue=job.requeue, dependency=dependency,
                         max_requeues=job.resources.max_requeues)


def _submit_slurm(plan: Plan, limit: int, log: Log) -> Manifest:
    manifest = manifest_of(plan, "slurm")
    ids: dict[str, list[str]] = {}
    try:
        for job, entry in zip(plan.jobs, manifest.jobs, strict=True):
            parts = split_array(job.tasks, limit)
            entries = entry_points(plan, job)
            for part, (first, count) in enumerate(parts):
                dependency = ",".join(_dependency(kind, ids[name], plan.job(name).tasks, part,
                                                  count) for kind, name in job.after)
                handles = _submit_array(job_executor(plan, job, "slurm", dependency),
                                        entries[first:first + count])
                job_id = str(handles[0].job_id).split("_")[0]
                ids.setdefault(job.name, []).append(job_id)
                if len(parts) > 1:
                    entry.parts.append([job_id, first, count])
                if part == 0:
                    entry.dependency = dependency  # the later parts': their own parts'
            entry.job_id = ids[job.name][0]
            shown = ", ".join(ids[job.name])
            log(f"submitted {job.name}: job {shown} ({job.tasks} task(s) on "
                f"{job.resources.partition}"
                f"{', ' + entry.dependency if entry.dependency else ''})")
    except Exception as err:
        if ids:
            every = [job_id for part in ids.values() for job_id in part]
            subprocess.run(["scancel", *every], capture_output=True, timeout=60)
            raise SubmitError(f"{_one_line(err)}; cancelled the jobs already submitted "
                              f"({', '.join(every)})") from None
        raise SubmitError(_one_line(err)) from None
    finally:
        if ids:
            manifest.save()
    return manifest


def _submit_array(executor: Any, entries: list[HargoCommand]) -> list[Any]:
    """One sbatch: an array of the entries (a plain job when there is one)."""
    with executor.batch():
        handles = [executor.submit(entry) for entry in entries]
    return handles


def _dependency(kind: str, job_ids: list[str], tasks: int, part: int = 0, count: int = 1
                ) -> str:
    """sbatch's form of one edge of part `part` (`count` tasks) of a job on a job of `tasks`
    tasks submitted as `job_ids` (its parts): `after` waits for that job's first task to
    start; `aftercorr` lets task i start once task i of the other job succeeded (both jobs
    have as many tasks, so their parts pair up; a part of one task is a plain job, which
    waits afterok on its own part); the others wait for the whole job, every part of it
    (afterok: every task succeeded; afterany: every task ended)."""
    if kind == "after":
        return f"after:{job_ids[0]}_0" if tasks > 1 else f"after:{job_ids[0]}"
    if kind == "aftercorr":
        return f"{'aftercorr' if count > 1 else 'afterok'}:{job_ids[part]}"
    return f"{kind}:" + ":".join(job_ids)


def _one_line(err: BaseException) -> str:
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return lines[-1] if lines else type(err).__name__


# ---------------------------------------------------------------- local processes


def _run_local(plan: Plan, log: Log) -> Manifest:
    manifest = manifest_of(plan, "local")
    env = {"OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    started: dict[str, list[Any]] = {}
    never: dict[str, str] = {}  # job -> why it will not run

    def start(job: PlannedJob) -> None:
        executor = job_executor(plan, job, "local")
        handles = [executor.submit(entry) for entry in entry_points(plan, job, env)]
        entry = manifest.job(job.name)
        entry.job_id = ",".join(str(h.job_id) for h in handles)
        manifest.save()
        log(f"started {job.name}: {job.tasks} local process(es)")
        started[job.name] = handles

    waiting = list(plan.jobs)
    states: dict[str, str] = {}  # started job -> running | ok | failed, one snapshot a tick
    try:
        while waiting or any(state == "running" for state in states.values()):
            for name, handles in started.items():
                if states.get(name, "running") != "running" or not all(
                        h.done() for h in handles):
                    continue
                failures = sum(h.exception() is not None for h in handles)
                states[name] = "failed" if failures else "ok"
                log(f"{name}: {len(handles)} task(s) done" if not failures
                    else f"{name}: {failures} of {len(handles)} task(s) failed")
            for job in list(waiting):
                verdict = _edges(job, states, never)
                if verdict == "wait":
                    continue
                waiting.remove(job)
                if verdict == "go":
                    start(job)
                    states[job.name] = "running"
                else:
                    never[job.name] = verdict
                    log(f"not started {job.name}: {verdict}")
            time.sleep(POLL_S)
    finally:
        for handles in started.values():
            for handle in handles:
                if not handle.done():
                    handle.cancel()
    failed = [(job, index, handle) for job in plan.jobs
              for index, handle in enumerate(started.get(job.name, []))
              if handle.exception() is not None]
    if failed:
        job, index, handle = failed[0]
        raise SubmitError(f"job {job.name} task {index} failed "
                          f"({_one_line(handle.exception())}); log: {handle.paths.stdout}")
    return manifest


def _edges(job: PlannedJob, states: dict[str, str], never: dict[str, str]) -> str:
    """Whether `job` may start now ("go"), not yet ("wait"), or never (why not), from its
    `after` edges over the started jobs' states (running, ok, failed: one snapshot) and those
    that will never run."""
    for kind, name in job.after:
        state = states.get(name)
        if state is None:
            if name not in never:
                return "wait"
            if kind != "afterany":  # an ended dependency that never ran satisfies afterany
                return f"{name} did not run"
            continue
        if kind == "after":
            continue
        if state == "running":  # aftercorr too: here the whole job, as afterok
            return "wait"
        if kind in ("afterok", "aftercorr") and state == "failed":
            return f"{name} failed"
    return "go"
