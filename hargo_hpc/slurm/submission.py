"""From an experiment file to its jobs: the plan, the batch scripts, the submission.

`plan_submission(config)` turns one experiment (and its `[sweep]`) into the runs and jobs of one
submission, rooted at `<run.dir>/<run.name>/`: sft, bench, train, eval, report and stop, with
their arrays and dependencies (docs/slurm.md, "Submitting an experiment", has the table and
the reasons). Every job's command is built here, once (`PlannedJob.commands`, one argv per
array task): the batch templates select theirs by `SLURM_ARRAY_TASK_ID`, and `submitter` hands
each to a submitit executor (`entrypoints`), walking the same `after` edges.
"""

from __future__ import annotations

import datetime
import json
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hargo_hpc import __version__
from hargo_hpc.config import (
    ConfigError,
    ExperimentConfig,
    JobResources,
    expand_sweep,
    save_resolved,
    sweep_label,
)
from hargo_hpc.errors import HargoError
from hargo_hpc.files import write_atomic
from hargo_hpc.handoff.settings import STEP_SPAN
from hargo_hpc.runs import RunLayout
from hargo_hpc.slurm.manifest import MANIFEST, JobEntry, Manifest, RunEntry
from hargo_hpc.slurm.options import minutes
from hargo_hpc.slurm.render import render_script

REPORT = "report"  # the submission's report directory, under its root
SCRIPTS, LOGS, HANDOFF = "scripts", "logs", "handoff"
SUBMITIT = "submitit"  # submitit's folder per job: pickles, job files, every task's log


class SubmitError(HargoError, RuntimeError):
    """The submission cannot go ahead (one line: what and where); nothing is left running."""


@dataclass
class PlannedRun:
    """One training run: sweep point `index` (its array task), its label and config."""

    index: int
    label: str
    config: ExperimentConfig
    overrides: dict[str, Any]
    config_file: Path  # where its resolved config is written and read by the jobs
    sft_config: ExperimentConfig | None = None  # the SFT job's, when sft.steps > 0
    sft_config_file: Path | None = None

    @property
    def dir(self) -> Path:
        return self.config.run_dir()


@dataclass
class PlannedJob:
    """One array job: its template, resources, one command per task and the jobs it waits
    for (`after`: (dependency type, job name))."""

    name: str
    template: str
    resources: JobResources
    commands: list[list[str]]
    after: list[tuple[str, str]] = field(default_factory=list)
    to_steps: bool = False
    requeue: bool = False  # checkpoint-and-requeue (`entrypoints.Resumable`, sbatch --requeue)
    variables: dict[str, Any] = field(default_factory=dict)

    @property
    def tasks(self) -> int:
        return len(self.commands)


@dataclass
class Plan:
    config: ExperimentConfig
    root: Path
    runs: list[PlannedRun]
    jobs: list[PlannedJob]
    handoff_dir: Path | None
    python: str

    @property
    def scripts_dir(self) -> Path:
        return self.root / SCRIPTS

    @property
    def log_dir(self) -> Path:
        return self.root / LOGS

    def job(self, name: str) -> PlannedJob:
        return next(job for job in self.jobs if job.name == name)

    def job_name(self, job: PlannedJob) -> str:
        """Slurm's name of the job (`%x` in log names): `<run.name>-<job>`."""
        return f"{self.config.run.name}-{job.name}"


# ---------------------------------------------------------------- the plan


def plan_submission(config: ExperimentConfig, source: str = "<config>", *,
                    python: str | None = None, config_dir: Path | None = None,
                    fetch_models: bool = False) -> Plan:
    """The runs and jobs of `config` (module docstring); ConfigError for a sweep that cannot
    be run (a bad key, a [bench] / [handoff] / [slurm] key swept: one worker array and one
    set of batch resources serve every run). The runs' resolved configs go into their run
    directories, or into `config_dir` (`hargo render`: next to the scripts) as
    `<label or run.name>.toml`. A hub id in model.path becomes its snapshot directory in the
    runs' configs (`resolve_model`; downloaded here when `fetch_models` and not cached), so
    the jobs never look it up."""
    from hargo_hpc.tasks.registry import get_task

    root = config.run_dir().absolute()
    points = expand_sweep(config, source)
    for key in config.sweep:
        if key.split(".")[0] in ("bench", "handoff", "slurm", "run") and key != "run.seed":
            raise ConfigError(f"{source}: sweep key {key!r}: every run of a submission "
                                  "shares the bench workers, the batch resources and the "
                                  "submission directory; only run.seed may vary in [run]")
    for kind in ("train", "bench", "eval"):
        res = getattr(config.slurm, kind)
        if res.signal_lead_s >= minutes(res.time) * 60:
            raise ConfigError(f"{source}: slurm.{kind}.signal_lead_s ({res.signal_lead_s} s) "
                              f"must be shorter than its time limit ({res.time})")
    points = [(label, with_local_model(point, fetch_models), overrides)
              for label, point, overrides in points]
    for label, point, _ in points:
        where = f"{source}" + (f" (sweep point {label})" if label else "")
        check_ranks(point, where)
        check_memory(point, where)
    remote = any(get_task(spec.name).remote for spec in config.data.tasks)
    handoff_dir = root / HANDOFF if remote else None
    runs = []
    for index, (label, point, overrides) in enumerate(points):
        run_dir = root / label if label else root
        update: dict[str, Any] = {"run": point.run.model_copy(update={
            "dir": str(run_dir.parent), "name": run_dir.name})}
        if handoff_dir is not None:
            update["handoff"] = point.handoff.model_copy(update={
                "dir": str(handoff_dir), "step_offset": index * STEP_SPAN, "local_workers": 0})
        stem = (RunLayout(run_dir).config.with_suffix("") if config_dir is None
                else config_dir.absolute() / (label or config.run.name))
        run = PlannedRun(index, label, point.model_copy(update=update), overrides,
                         Path(f"{stem}.toml"))  # (a label may hold dots: no with_suffix)
        if point.sft.steps:  # its own job first; RL then starts from its export
            run.sft_config, run.sft_config_file = run.config, Path(f"{stem}.sft.toml")
            run.config = run.config.model_copy(update={
                "model": run.config.model.model_copy(update={
                    "path": str(RunLayout(run_dir).sft.export)}),
                "sft": run.config.sft.model_copy(update={"steps": 0})})
        runs.append(run)
    if config.sft.steps:
        _share_sft(runs, root, config_dir)
    py = python or config.slurm.python or sys.executable
    hargo = [py, "-m", "hargo_hpc"]
    slurm = config.slurm
    jobs = []
    if config.sft.steps:
        jobs.append(PlannedJob("sft", "sft.sh.j2", slurm.train,
                               [[*hargo, "sft", str(r.sft_config_file)]
                                for r in runs if r.sft_config_file is not None],
                               to_steps=True, requeue=True,
                               variables={"max_requeues": slurm.train.max_requeues}))
    after_sft: list[tuple[str, str]] = [("afterok", "sft")] if config.sft.steps else []
    if handoff_dir is not None:  # workers first: training starts once one of them has
        worker = [*hargo, "worker", "--handoff", str(handoff_dir), "--config",
                  str(runs[0].config_file), "--max-idle", f"{config.handoff.worker_max_idle_s:g}",
                  "--idle-from-first-step", "--threads", "1"]
        jobs.append(PlannedJob("bench", "bench_worker.sh.j2", slurm.bench,
                               [worker] * config.handoff.workers, after=after_sft))
    jobs.append(PlannedJob("train", "train.sh.j2", slurm.train,
                           [[*hargo, "train", str(r.config_file)] for r in runs],
                           to_steps=True, requeue=True,
                           variables={"max_requeues": slurm.train.max_requeues},
                           after=after_sft + ([("after", "bench")] if handoff_dir else [])))
    jobs.append(PlannedJob("eval", "eval.sh.j2", slurm.eval,
                           [[*hargo, "eval", str(r.dir)] for r in runs],
                           after=[("aftercorr", "train")]))
    jobs.append(PlannedJob("report", "report.sh.j2", slurm.eval.model_copy(update={
        "partition": slurm.bench.partition, "gpus_per_node": 0, "cpus_per_task": 1,
        "array_parallelism": 0, "time": "00:10:00"}),
        [[*hargo, "report", *(str(r.dir) for r in runs), "-o", str(root / REPORT)]],
        after=[("afterok", "eval")]))
    if handoff_dir is not None:  # after training and its evaluation (GEMM's bench too)
        jobs.append(PlannedJob("stop", "stop.sh.j2", slurm.bench.model_copy(update={
            "array_parallelism": 0, "time": "00:05:00", "cpus_per_task": 1}),
            [[*hargo, "handoff", "stop", str(handoff_dir), "--reason",
              "training and evaluation ended"]],
            after=[("afterany", "train"), ("afterany", "eval")]))
    return Plan(config, root, runs, jobs, handoff_dir, py)


def check_ranks(config: ExperimentConfig, where: str) -> None:
    """ConfigError (one line) unless the train job's ranks fit the run, checked before anything
    queues: one GPU per rank (`gpus_per_node` = `ntasks_per_node` when it asks for GPUs: NCCL
    refuses two ranks on one device, and a GPU without a rank idles), and the rollout batch
    shared by nodes x ntasks_per_node ranks in whole prompts and micro-batches (SFT and RL run
    on the same [slurm.train] resources)."""
    from hargo_hpc.config.training import check_batch_shape

    res = config.slurm.train
    if res.gpus_per_node and res.gpus_per_node != res.ntasks_per_node:
        raise ConfigError(f"{where}: slurm.train.gpus_per_node ({res.gpus_per_node}) must equal "
                          f"slurm.train.ntasks_per_node ({res.ntasks_per_node}): each rank "
                          "trains on one GPU of its node")
    ranks = res.nodes * res.ntasks_per_node
    try:
        check_batch_shape(config.rollout, config.training, ranks)
    except ValueError as err:
        raise ConfigError(f"{where}: with slurm.train's {ranks} rank(s) ({res.nodes} node(s) x "
                          f"{res.ntasks_per_node} task(s)): {err}") from None


def with_local_model(config: ExperimentConfig, fetch: bool) -> ExperimentConfig:
    """`config` with model.path a directory where it named a hub id (its snapshot in the HF
    cache, fetched when `fetch`); HubError (one line) when it is neither cached nor fetched."""
    from hargo_hpc.train.model.hub import resolve_model

    model = config.model
    path = resolve_model(model.path, model.revision, download=fetch)
    if path == model.path:
        return config
    return config.model_copy(update={"model": model.model_copy(update={"path": path})})


def check_memory(config: ExperimentConfig, where: str) -> None:
    """ConfigError (one line) when the training job's estimated peak a GPU exceeds
    slurm.train.gpu_memory_gib (when set) or its host memory a node exceeds slurm.train.mem
    (`train.memory`; when the model's shape is readable here)."""
    from hargo_hpc.algorithms.presets import resolve_algorithm
    from hargo_hpc.train.memory import (
        MemoryPlanError,
        architecture_of,
        fit_refusal,
        host_plan,
        host_refusal,
        memory_plan,
    )
    from hargo_hpc.train.model.hub import HubError

    limit = config.slurm.train.gpu_memory_gib
    try:
        arch = architecture_of(config.model.path, config.model.revision)
    except (MemoryPlanError, HubError) as err:
        if not limit:
            return  # nothing asked to be checked, and the shape is on the cluster only
        raise ConfigError(f"{where}: slurm.train.gpu_memory_gib is set, but {err}") from None
    needs_reference = resolve_algorithm(config.algorithm).needs_reference
    refusal = (fit_refusal(memory_plan(config, arch, needs_reference), limit)
               or host_refusal(host_plan(config, arch, needs_reference),
                               config.slurm.train.mem))
    if refusal:
        raise ConfigError(f"{where}: {refusal}")


# Sections an SFT warm start does not read: sweep points that differ only there share one SFT.
NOT_SFT_INPUTS = ("algorithm", "handoff", "bench", "eval", "sqd", "slurm", "sweep")


def _sft_inputs(config: ExperimentConfig) -> str:
    """What an SFT warm start depends on, as one string: the config without its run directory
    and the sections SFT does not read (NOT_SFT_INPUTS)."""
    raw = config.to_dict()
    for key in NOT_SFT_INPUTS:
        raw.pop(key, None)
    raw["run"] = {k: v for k, v in raw.get("run", {}).items() if k not in ("dir", "name")}
    return json.dumps(raw, sort_keys=True)


def _share_sft(runs: list[PlannedRun], root: Path, config_dir: Path | None) -> None:
    """One SFT warm start for each group of runs whose SFT inputs are equal (`_sft_inputs`),
    trained from the group's first SFT config; every run of the group trains from its export.
    One group for all runs: it runs in `<root>/` (export `<root>/sft/export`); several groups
    (a method swept with seeds, say): each in `<root>/sft-<its SFT keys>/`, e.g. `sft-seed-0`;
    every run its own group (nothing shared): each run keeps the SFT in its own directory."""
    groups: dict[str, list[PlannedRun]] = {}
    for run in runs:
        if run.sft_config is not None:
            groups.setdefault(_sft_inputs(run.sft_config), []).append(run)
    if len(groups) == len(runs):
        return
    for group in groups.values():
        first = group[0]
        assert first.sft_config is not None
        label = sweep_label({key: value for key, value in first.overrides.items()
                             if key.split(".")[0] not in NOT_SFT_INPUTS})
        home = root if len(groups) == 1 else root / f"sft-{label or first.index}"
        shared = first.sft_config.model_copy(update={"run": first.sft_config.run.model_copy(
            update={"dir": str(home.parent), "name": home.name})})
        layout = RunLayout(home)
        stem = (layout.config.with_suffix("") if config_dir is None
                else config_dir.absolute() / home.name)
        for run in group:
            run.sft_config = run.sft_config_file = None
            run.config = run.config.model_copy(update={
                "model": run.config.model.model_copy(update={"path": str(layout.sft.export)})})
        first.sft_config, first.sft_config_file = shared, Path(f"{stem}.sft.toml")


# ---------------------------------------------------------------- scripts


def render_job(plan: Plan, job: PlannedJob, log_dir: Path | None = None) -> str:
    """The batch script of `job` (standalone: `sbatch` it by hand, dependencies aside), its
    Slurm output in `log_dir` (default: the submission's logs/)."""
    return render_script(
        job.template, job_name=plan.job_name(job), resources=job.resources,
        log_dir=log_dir or plan.log_dir, array=f"0-{job.tasks - 1}",
        setup=plan.config.slurm.setup,
        to_steps=job.to_steps, requeue=job.requeue,
        commands=[shlex.join(argv) for argv in job.commands], **job.variables,
    )


def write_scripts(plan: Plan, out_dir: Path | None = None,
                  log_dir: Path | None = None) -> dict[str, Path]:
    """Every job's batch script into `out_dir` (default: the plan's scripts/), executable, and
    the directory their Slurm output goes to, `log_dir` (default: the plan's logs/): Slurm
    does not create it, and a job whose output file cannot be opened fails before it runs."""
    directory = out_dir or plan.scripts_dir
    directory.mkdir(parents=True, exist_ok=True)
    logs = log_dir or plan.log_dir
    logs.mkdir(parents=True, exist_ok=True)
    paths = {}
    for job in plan.jobs:
        path = directory / f"{job.name}.sh"
        write_atomic(path, render_job(plan, job, logs))
        path.chmod(0o755)
        paths[job.name] = path
    return paths


def write_run_configs(plan: Plan, *, root: bool = True) -> None:
    """Each run's resolved config where its jobs read it and (`root`) the experiment's at
    the submission's root."""
    if root:
        save_resolved(plan.config, plan.root)
    for run in plan.runs:
        run.config_file.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(run.config_file, run.config.to_toml())
        if run.sft_config is not None and run.sft_config_file is not None:
            run.sft_config_file.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(run.sft_config_file, run.sft_config.to_toml())


def graph(plan: Plan) -> str:
    """The dependency graph, one line per job."""
    lines = []
    for job in plan.jobs:
        after = ", ".join(f"{kind}:{name}" for kind, name in job.after) or "-"
        lines.append(f"{job.name:<6} {job.tasks:>3} task(s) on {job.resources.partition:<8} "
                     f"after {after}")
    return "\n".join(lines)


# ---------------------------------------------------------------- submitting


def check_fresh(plan: Plan) -> None:
    """SubmitError when the submission directory (or a run's) holds a submission already."""
    metrics = [path for r in plan.runs
               for path in (RunLayout(r.dir).metrics, RunLayout(r.dir).sft.metrics)]
    for path in [plan.root / MANIFEST, *metrics]:
        if path.exists():
            raise SubmitError(f"{path.parent} holds a submission or run already; continue "
                              "it with --resume, or set another run.name / run.dir")


def manifest_of(plan: Plan, executor: str) -> Manifest:
    from hargo_hpc.train.backend.checkpoint import config_hash

    now = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    runs = [RunEntry(r.index, r.label, str(r.dir), str(r.config_file),
                     config_hash(r.config.to_toml()), dict(r.overrides)) for r in plan.runs]
    jobs = [JobEntry(j.name, str(plan.scripts_dir / f"{j.name}.sh"), f"0-{j.tasks - 1}",
                     j.tasks, [name for _, name in j.after],
                     log=str(log_pattern(plan, j, executor)))
            for j in plan.jobs]
    return Manifest(plan.config.run.name, str(plan.root), executor, now, __version__,
                    git_revision(), config_hash(plan.config.to_toml()),
                    str(plan.handoff_dir) if plan.handoff_dir else None, runs, jobs)


def log_pattern(plan: Plan, job: PlannedJob, executor: str) -> Path:
    """Where submitit writes the log of each task of `job` (rank 0's; its stdout and stderr
    together): `<root>/submitit/<job>/<array id>_<task>_0_log.out` (watch.log_path fills in
    `%A`, `%a`, `%j`); a job of one task is a plain job (`%j`), locally each task its own job."""
    one = job.tasks == 1 or executor == "local"
    return plan.root / SUBMITIT / job.name / f"{'%j' if one else '%A_%a'}_0_log.out"


def git_revision() -> str | None:
    """The project's git revision when it runs from a checkout, else None."""
    here = Path(__file__).resolve().parents[2]
    if not (here / ".git").exists():
        return None
    try:
        done = subprocess.run(["git", "-C", str(here), "rev-parse", "--short=12", "HEAD"],
                              capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() or None if done.returncode == 0 else None


def check_resumable(plan: Plan) -> None:
    """SubmitError unless `plan.root` holds a submission of the same runs (config hashes)
    none of whose jobs is still queued or running; then the handoff's old stop sentinel is
    removed (the new workers would exit at once)."""
    from hargo_hpc.slurm.manifest import ManifestError, load_manifest
    from hargo_hpc.slurm.watch import FINISHED, submission_states
    from hargo_hpc.train.backend.checkpoint import config_hash

    try:
        old = load_manifest(plan.root)
    except ManifestError as err:
        raise SubmitError(f"nothing to resume: {err}") from None
    hashes = [config_hash(r.config.to_toml()) for r in plan.runs]
    if hashes != [r.config_hash for r in old.runs]:
        raise SubmitError(f"refusing to resume {plan.root}: its runs were submitted with "
                          "other configs (config hashes differ); resume with the same file "
                          "and overrides")
    alive = sorted({job for job, state in submission_states(old).items()
                    if state not in FINISHED})
    if alive:
        raise SubmitError(f"{plan.root}: jobs {', '.join(alive)} are still queued or running; "
                          f"`hargo cancel {plan.root}` first")
    if plan.handoff_dir is not None:
        (plan.handoff_dir / "STOP").unlink(missing_ok=True)


def split_array(tasks: int, limit: int) -> list[tuple[int, int]]:
    """(first task, tasks) of each part of an array of `tasks` under a cluster whose arrays
    hold at most `limit` tasks: one part when it fits."""
    return [(first, min(limit, tasks - first)) for first in range(0, tasks, limit)]


def max_array_size() -> int:
    """Tasks one array may hold on this cluster: its MaxArraySize (indices 0 ..
    MaxArraySize-1, from `scontrol show config`); Slurm's default 1001 when unreadable."""
    try:
        done = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True,
                              timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return 1001
    for line in done.stdout.splitlines():
        name, _, value = line.partition("=")
        if name.strip() == "MaxArraySize" and value.strip().isdigit():
            return max(1, int(value))
    return 1001
