"""Watching one submission (its `run.json`): job states, progress, cancel, logs.

The library behind `hargo status`, `hargo cancel` and `hargo logs` (`cli/watch.py`).

- States come from ONE `sacct` call for every job of the submission (`job_states`), retried
  with doubling delays while slurmdbd is busy; jobs that sacct does not list per task yet
  (right after `sbatch`, slurmdbd lagging) are asked of `squeue`, also in one call. Never one
  call per array task.
- Progress is read from files only: each run's `metrics.jsonl` (its last complete line; a
  torn line being appended is skipped), `finished.json`, the resolved config's
  `training.steps`, and the handoff directory (`hargo_hpc.handoff.status.gather`). No torch.
- `cancel` writes the handoff's stop sentinel first, so bench workers exit on their own even
  if a task escapes `scancel`, then cancels every job of the submission with ONE `scancel`.
- Log paths come from each job's output pattern (`%A` job id, `%a` array index).

A submission run by the local executor (`executor = "local"`) has no Slurm jobs: its task
states read `LOCAL`, its progress still comes from the files, and `cancel` only writes the
sentinel.
"""

from __future__ import annotations

import codecs
import json
import re
import shutil
import time
import tomllib
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from hargo_hpc.errors import HargoError
from hargo_hpc.files import last_record
from hargo_hpc.runs import RunLayout
from hargo_hpc.slurm.jobs import FINISHED, SlurmError, _run
from hargo_hpc.slurm.manifest import JobEntry, Manifest, ManifestError

UNKNOWN = "UNKNOWN"  # neither sacct nor squeue lists it (purged, or a wrong id)
NOT_SUBMITTED = "NOT_SUBMITTED"  # job_id "" in the manifest: sbatch was never reached
LOCAL = "LOCAL"  # executor "local": Slurm knows nothing of it
STOP_REASON = "cancelled by hargo cancel"

_ARRAY_PART = re.compile(r"^(?P<first>\d+)(?:-(?P<last>\d+)(?::(?P<stride>\d+))?)?$")
_JOB_ID = re.compile(r"^(?P<job>\d+)(?:_(?P<task>\d+|\[[^\]]*\]))?$")


# ---------------------------------------------------------------- states


def expand_array(spec: str) -> list[int]:
    """The task indices of an array spec: "0-3" / "[2-5%2]" / "1,3,7-9" / "0-12:4".

    A `%N` throttle is dropped; ManifestError for anything else."""
    body = spec.strip().removeprefix("[").removesuffix("]").partition("%")[0]
    indices: list[int] = []
    for part in body.split(","):
        match = _ARRAY_PART.match(part)
        if not match:
            raise ManifestError(f"not an array spec: {spec!r}")
        first = int(match.group("first"))
        last = int(match.group("last") or first)
        stride = int(match.group("stride") or 1)
        if last < first or stride < 1:
            raise ManifestError(f"not an array spec: {spec!r}")
        indices.extend(range(first, last + 1, stride))
    return indices


def parse_sacct(text: str) -> dict[str, str]:
    """JobID -> State of `sacct -X -n -P -o JobID,State` (or `squeue -h -o %i|%T`) output.

    Array tasks are keyed `<job>_<i>`; a pending range (`123_[2-5%2]`) becomes one key per
    task, and a task's own row wins over a range that names it whatever their order (the
    range is the older record). The state is its first word ("CANCELLED by 0" ->
    "CANCELLED"). Lines that are not `id|state` are skipped; otherwise a later line for the
    same id wins (sacct lists the latest last).
    """
    ranged: dict[str, str] = {}
    own: dict[str, str] = {}
    for line in text.splitlines():
        raw_id, sep, raw_state = line.strip().partition("|")
        if not sep or not raw_id:
            continue
        state = raw_state.split()[0] if raw_state.strip() else UNKNOWN
        match = _JOB_ID.match(raw_id)
        task = match.group("task") if match else None
        try:
            indices = expand_array(task) if match and task and task.startswith("[") else None
        except ValueError:
            indices = None
        if match and indices is not None:
            ranged.update((f"{match.group('job')}_{i}", state) for i in indices)
        else:
            own[raw_id] = state
    return {**ranged, **own}


def job_states(job_ids: list[str], *, attempts: int = 5,
               first_delay_s: float = 0.5) -> dict[str, str]:
    """JobID -> State for the jobs and every array task of theirs, in one `sacct` call.

    sacct failing (slurmdbd busy or restarting) is retried `attempts` times in all, waiting
    `first_delay_s`, then twice as long each time; then SlurmError.

    slurmdbd lags behind the controller: right after sbatch it may not list a job at all,
    and for a while it lists an array as one record under its plain id (`123|PENDING`, even
    `123|COMPLETED`) without a row per task. Such jobs are asked of `squeue -r` in one more
    call, whose rows (the controller's live view, one per task) take precedence; a job that
    has left the controller keeps sacct's record. A job neither lists is `UNKNOWN` under its
    plain id.
    """
    ids = list(dict.fromkeys(i for i in job_ids if i))
    if not ids:
        return {}
    out = _backoff(["sacct", "-j", ",".join(ids), "-X", "-n", "-P", "-o", "JobID,State"],
                   attempts, first_delay_s)
    states = parse_sacct(out)
    unsplit = [i for i in ids if not _has_tasks(i, states)]
    if unsplit:
        states.update(_squeue(unsplit))
        for job_id in unsplit:
            if job_id not in states and not _has_tasks(job_id, states):
                states[job_id] = UNKNOWN
    return states


def _has_tasks(job_id: str, states: dict[str, str]) -> bool:
    return any(key.startswith(f"{job_id}_") for key in states)


def _squeue(job_ids: list[str]) -> dict[str, str]:
    """States of queued and running jobs by squeue, one row per array task (it no longer
    lists a job that has ended)."""
    try:
        return parse_sacct(_run(["squeue", "-h", "-r", "-j", ",".join(job_ids), "-o", "%i|%T"]))
    except SlurmError:
        return {}  # "Invalid job id specified" once every id is gone: nothing to add


def _sleep(seconds: float) -> None:
    """The back-off's wait (a seam: tests record the delays instead of waiting)."""
    time.sleep(seconds)


def _backoff(argv: list[str], attempts: int, first_delay_s: float) -> str:
    attempts, delay, error = max(1, attempts), first_delay_s, ""
    for attempt in range(1, attempts + 1):
        try:
            return _run(argv)
        except SlurmError as err:
            if shutil.which(argv[0]) is None:
                raise  # no Slurm client here: waiting will not bring one
            error = str(err)
        if attempt < attempts:
            _sleep(delay)
            delay *= 2
    raise SlurmError(f"{error} (gave up after {attempts} attempts)")


def task_indices(job: JobEntry) -> list[int]:
    """The array indices of a job: its `array` spec, else 0 .. tasks-1."""
    try:
        return expand_array(job.array) if job.array else list(range(job.tasks))
    except ValueError:
        return list(range(job.tasks))


def task_state(job: JobEntry, index: int, states: dict[str, str]) -> str:
    """The state of one array task: its own row, else the job's plain-id row (an array
    still listed as one record, pending or not yet split by slurmdbd, or a job that is not
    an array), else UNKNOWN."""
    if not job.job_id:
        return NOT_SUBMITTED
    job_id, own = job.locate(index)  # a job in parts: the part's id and its own index
    return states.get(f"{job_id}_{own}") or states.get(job_id) or UNKNOWN


def submission_states(manifest: Manifest) -> dict[str, str]:
    """`job_states` of every submitted job of a Slurm submission; {} for a local one."""
    return job_states(manifest.job_ids()) if manifest.executor == "slurm" else {}


# ---------------------------------------------------------------- status


@dataclass
class JobStatus:
    """One job (an array) and the state of each of its tasks (index -> state)."""

    name: str
    job_id: str
    tasks: dict[int, str]

    def counts(self) -> dict[str, int]:
        """State -> how many tasks, most frequent first (then by name)."""
        ordered = sorted(Counter(self.tasks.values()).items(), key=lambda kv: (-kv[1], kv[0]))
        return dict(ordered)


@dataclass
class RunProgress:
    """One training run (array index `index` of the train job), read from its files."""

    index: int
    label: str
    dir: str
    state: str
    step: int | None = None
    steps: int | None = None
    reward: float | None = None
    finished: bool = False


@dataclass
class HandoffProgress:
    """The shared handoff directory: steps not closed, benchmarks waiting, live workers."""

    dir: str
    exists: bool
    open_steps: int = 0
    pending: int = 0
    live_workers: int = 0
    stop: bool = False


@dataclass
class SubmissionStatus:
    """What `hargo status` shows: every job's task states, every run's progress, the
    handoff, and notes (a local executor, unreadable handoff files)."""

    name: str
    root: str
    executor: str
    jobs: list[JobStatus]
    runs: list[RunProgress]
    handoff: HandoffProgress | None
    notes: list[str] = field(default_factory=list)

    def finished(self) -> bool:
        """Every task of every job is in a terminal state (False for a local submission and
        while a job of it was never submitted)."""
        return all(s in FINISHED for job in self.jobs for s in job.tasks.values())

    def to_dict(self) -> dict[str, Any]:
        """Plain data for `hargo status --json`; each job also carries its state counts."""
        data = asdict(self)
        for job, plain in zip(self.jobs, data["jobs"], strict=True):
            plain["counts"] = job.counts()
        return data


def status(manifest: Manifest, states: dict[str, str] | None = None) -> SubmissionStatus:
    """Job and task states (one sacct call unless `states` is given) and per-run progress."""
    local = manifest.executor != "slurm"
    if states is None:
        states = submission_states(manifest)
    jobs = [
        JobStatus(job.name, job.job_id, {
            i: LOCAL if local and job.job_id else task_state(job, i, states)
            for i in task_indices(job)
        })
        for job in manifest.jobs
    ]
    train = next((j for j in jobs if j.name == "train"), None)
    runs = [_run_progress(r.index, r.label, r.dir, r.config,
                          train.tasks.get(r.index, UNKNOWN) if train else "-")
            for r in manifest.runs]
    notes = []
    if local:
        notes.append(f"executor {manifest.executor}: the jobs ran as local processes, which "
                     "sacct does not know; progress is read from the files")
    for run in manifest.runs:
        notes.extend(f"run {run.index} metrics: {line}"
                     for line in where_to_look_of(run.config, run.dir))
    handoff = _handoff(manifest.handoff_dir, notes) if manifest.handoff_dir else None
    return SubmissionStatus(manifest.name, manifest.root, manifest.executor, jobs, runs,
                            handoff, notes)


def _run_progress(index: int, label: str, run_dir: str, config: str, state: str) -> RunProgress:
    layout = RunLayout(Path(run_dir))
    progress = RunProgress(index, label, run_dir, state, steps=configured_steps(config))
    record = last_record(layout.metrics)
    if record is not None:
        progress.step = _number(record.get("step"), int)
        progress.reward = _number(record.get("reward"), float)
    done = _read_json(layout.finished)
    if done is not None:
        progress.finished = True
        progress.step = _number(done.get("step"), int) if "step" in done else progress.step
    return progress


def _number(value: Any, kind: type) -> Any:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return kind(value)


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return obj if isinstance(obj, dict) else None


def where_to_look_of(config_file: str, run_dir: str) -> list[str]:
    """Where a run's trackers keep its metrics (`train.trackers.where_to_look`); nothing when
    its config is unreadable."""
    from hargo_hpc.config import load_config
    from hargo_hpc.train.trackers import where_to_look

    try:
        config = load_config(config_file)
    except (HargoError, OSError):
        return []
    return where_to_look(config, RunLayout(Path(run_dir)))


def configured_steps(config_file: str) -> int | None:
    """`training.steps` of a run's resolved config file (None when unreadable or absent)."""
    try:
        steps = tomllib.loads(Path(config_file).read_text(encoding="utf-8"))["training"]["steps"]
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, KeyError, TypeError):
        return None
    return steps if isinstance(steps, int) and not isinstance(steps, bool) else None


def _handoff(directory: str, notes: list[str]) -> HandoffProgress:
    from hargo_hpc.handoff.errors import HandoffError
    from hargo_hpc.handoff.status import gather

    progress = HandoffProgress(directory, exists=Path(directory).is_dir())
    if not progress.exists:
        return progress
    try:
        found = gather(directory)
    except (HandoffError, ValueError, OSError) as err:
        notes.append(f"handoff: {err}")
        return progress
    open_steps = [s for s in found.steps if s.state == "open"]
    progress.open_steps = len(open_steps)
    progress.pending = sum(s.queued + s.claimed for s in open_steps)
    progress.live_workers = sum(1 for w in found.workers if w.live)
    progress.stop = found.stop
    notes.extend(f"handoff skipped: {why}" for why in found.skipped)
    return progress


def format_status(status: SubmissionStatus) -> str:
    """The status as a plain-text table for people."""
    lines = [f"submission {status.name}  ({status.root}, executor {status.executor})"]
    rows = [("job", "id", "tasks", "states")]
    for job in status.jobs:
        counts = ", ".join(f"{n} {state}" for state, n in job.counts().items())
        rows.append((job.name, job.job_id or "-", str(len(job.tasks)), counts or "-"))
    lines.extend(_table(rows))
    if status.runs:
        rows = [("run", "label", "task", "step", "reward", "finished")]
        for run in status.runs:
            step = "-" if run.step is None else str(run.step)
            if run.steps is not None:
                step += f"/{run.steps}"
            reward = "-" if run.reward is None else f"{run.reward:.4g}"
            rows.append((str(run.index), run.label, run.state, step, reward,
                         "yes" if run.finished else "no"))
        lines.append("")
        lines.extend(_table(rows))
    if status.handoff is not None:
        lines.append("")
        lines.append(_handoff_line(status.handoff))
    lines.extend(status.notes)
    return "\n".join(lines)


def _handoff_line(handoff: HandoffProgress) -> str:
    if not handoff.exists:
        return f"handoff {handoff.dir}: not created yet"
    stop = "; STOP sentinel present" if handoff.stop else ""
    return (f"handoff {handoff.dir}: {_plural(handoff.open_steps, 'open step')}, "
            f"{_plural(handoff.pending, 'pending benchmark')}, "
            f"{_plural(handoff.live_workers, 'live worker')}{stop}")


def _plural(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _table(rows: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
            for row in rows]


# ---------------------------------------------------------------- cancel


def cancel(manifest: Manifest) -> list[str]:
    """Write the handoff's stop sentinel (if the submission has a handoff directory), then
    cancel every submitted job with one `scancel`; return the job ids given to scancel.

    Idempotent: a second call, or one on a finished submission, rewrites the sentinel and
    scancel ignores jobs that have ended. A local submission only gets the sentinel.
    """
    if manifest.handoff_dir:
        write_stop(manifest.handoff_dir)
    job_ids = manifest.job_ids() if manifest.executor == "slurm" else []
    if job_ids:
        _run(["scancel", *job_ids])
    return job_ids


def write_stop(handoff_dir: str | Path, reason: str = STOP_REASON) -> Path:
    """The stop sentinel, written atomically the way `hargo handoff stop` writes it. The
    directory is created if the trainer has not made it yet, so late starters see it too."""
    from hargo_hpc.handoff.trainer import Trainer

    Path(handoff_dir).mkdir(parents=True, exist_ok=True)
    trainer = Trainer(handoff_dir, create=False, progress=False)
    trainer.stop(reason)
    return trainer.layout.stop


# ---------------------------------------------------------------- logs


def select_tasks(manifest: Manifest, job: str | None = None,
                 task: int | None = None) -> list[tuple[JobEntry, int]]:
    """(job, array index) pairs of the submitted jobs, narrowed to one job and/or index.

    ManifestError for an unknown job name, a job not submitted yet or an index no selected
    job has."""
    chosen = [manifest.job(job)] if job is not None else manifest.jobs
    if job is not None and not chosen[0].job_id:
        raise ManifestError(f"{manifest.root}: job {job!r} was not submitted (no job id)")
    pairs = [(j, i) for j in chosen if j.job_id for i in task_indices(j)
             if task is None or i == task]
    if task is not None and not pairs:
        ranges = ", ".join(f"{j.name} {_span(task_indices(j))}" for j in chosen if j.job_id)
        raise ManifestError(f"no task {task} in {'job ' + job if job else 'any job'} "
                         f"(tasks: {ranges or 'none submitted'})")
    return pairs


def _span(indices: list[int]) -> str:
    if not indices:
        return "none"
    return f"{indices[0]}-{indices[-1]}" if len(indices) > 1 else str(indices[0])


def log_path(manifest: Manifest, job: JobEntry, index: int) -> Path:
    """The output file of one array task: `job.log` with %A (job id), %a (array index), %j,
    %x (`<run>-<job>`) and %% filled in.

    %j is the task's own job id: the local executor records one id per task, comma-separated
    in `job_id` (submitit's `%j_0_log.out`); for a single id it is that id. A job submitted
    in parts (MaxArraySize) has its part's id as %A and the index within the part as %a; a
    part of one task is a plain job (submitit submits no array of one), its log `%j`."""
    ids = job.job_id.split(",")
    own = ids[index] if len(ids) > 1 and index < len(ids) else job.job_id
    array_id, array_index = job.locate(index)  # a job in parts: the part's id and index
    pattern = job.log
    if job.part_size(index) == 1:  # a part of one task went out as a plain job: no %A_%a
        pattern, own = pattern.replace("%A_%a", "%j"), array_id
    values = {"A": array_id, "a": str(array_index), "j": own,
              "x": f"{manifest.name}-{job.name}", "%": "%"}
    return Path(re.sub(r"%([Aajx%])", lambda m: values[m.group(1)], pattern))


def log_files(manifest: Manifest, job: str | None = None, task: int | None = None) -> list[Path]:
    """The log file of every selected array task (see `select_tasks`), existing or not."""
    return [log_path(manifest, j, i) for j, i in select_tasks(manifest, job, task)
            if j.log]


def tasks_finished(manifest: Manifest, job: str | None = None, task: int | None = None) -> bool:
    """Every selected task is in a terminal state (one sacct call). Always False for a
    local submission: nothing tells when its processes end."""
    if manifest.executor != "slurm":
        return False
    states = submission_states(manifest)
    return all(task_state(j, i, states) in FINISHED for j, i in select_tasks(manifest, job, task))


def header(path: Path) -> str:
    return f"==> {path} <=="


def show_logs(paths: Iterable[Path], write: Callable[[str], None]) -> int:
    """Write each file's content after a `==> path <==` header (a missing one is said to be
    not written yet); return how many existed."""
    found = 0
    for path in paths:
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            write(f"{header(path)} (not written yet: the task has not started)\n")
            continue
        found += 1
        write(f"{header(path)}\n{text}")
        if text and not text.endswith("\n"):
            write("\n")
    return found


@dataclass
class _Tail:
    path: Path
    offset: int = 0
    decoder: codecs.IncrementalDecoder = field(
        default_factory=lambda: codecs.getincrementaldecoder("utf-8")(errors="replace"))

    def read_new(self) -> str:
        """What was appended since the last read ("" when missing); starts over when the file
        was truncated or replaced by a shorter one."""
        try:
            with self.path.open("rb") as handle:
                size = handle.seek(0, 2)
                if size < self.offset:
                    self.offset = 0
                    self.decoder.reset()
                handle.seek(self.offset)
                data = handle.read(size - self.offset)
        except FileNotFoundError:
            return ""
        self.offset += len(data)
        return self.decoder.decode(data)


def follow(
    paths: list[Path],
    write: Callable[[str], None],
    *,
    done: Callable[[], bool] | None = None,
    stop: Callable[[], bool] | None = None,
    poll_s: float = 0.5,
    check_every_s: float = 5.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> str:
    """Write the files' text as it is appended (from their start), like `tail -n +1 -f`.

    Each switch to another file writes its `==> path <==` header. Returns "finished" once
    `done()` says the jobs have ended (asked at most every `check_every_s`, then the files are
    read one last time), or "stopped" as soon as `stop()` is true. Files that do not exist
    yet are read once they appear.
    """
    tails = [_Tail(p) for p in paths]
    current: Path | None = None
    checked_at = float("-inf")
    while True:
        finished = False
        if done is not None and clock() - checked_at >= check_every_s:
            checked_at = clock()
            finished = done()  # asked before reading, so the last read sees everything
        for tail in tails:
            text = tail.read_new()
            if text:
                if current != tail.path:
                    write(("\n" if current is not None else "") + header(tail.path) + "\n")
                    current = tail.path
                write(text)
        if finished:
            return "finished"
        if stop is not None and stop():
            return "stopped"
        sleep(poll_s)


# ---------------------------------------------------------------- waiting


def progress_line(now: SubmissionStatus, listed: int = 4) -> str:
    """One line for `hargo submit --wait`: each job's state counts, the runs' steps and the
    benchmarks pending in the handoff. Up to `listed` runs are named one by one; a sweep
    of more is counted by step ("28 runs: 2 at 10/10, 26 at 0/10"), so the line stays short."""
    jobs = [f"{job.name} " + ", ".join(f"{n} {s}" for s, n in job.counts().items())
            for job in now.jobs]
    steps = [f"{run.step or 0}/{run.steps or '?'}" for run in now.runs]
    if len(now.runs) <= listed:
        runs = [f"{run.label or 'run'} step {at}" for run, at in zip(now.runs, steps, strict=True)]
    else:
        by_step = Counter(steps)
        runs = [f"{len(steps)} runs: " + ", ".join(
            f"{n} at {at}" for at, n in sorted(by_step.items(), key=_step_order, reverse=True))]
    handoff = [f"{now.handoff.pending} pending benchmarks"] if now.handoff else []
    return "; ".join(jobs + runs + handoff)


def _step_order(item: tuple[str, int]) -> tuple[int, bool]:
    step, total = item[0].split("/")
    return (int(step), total != "?")


def wait_for(manifest: Manifest, *, poll_s: float = 5.0, timeout_s: float | None = None,
             write: Callable[[str], object] = print, clock: Callable[[], float] = time.monotonic,
             sleep: Callable[[float], None] = time.sleep) -> str:
    """Follow a Slurm submission until every task is in a terminal state, writing one
    progress line whenever it changes (job state counts, each run's step, the benchmarks
    pending in the handoff). Returns "" when
    every task COMPLETED, else one line naming the first job and task that did not, with its
    log. (A dependent job that can never run, its dependency failed, is ended by Slurm:
    `hargo submit` passes --kill-on-invalid-dep=yes.)"""
    deadline = None if timeout_s is None else clock() + timeout_s
    last = ""
    while True:
        now = status(manifest)
        line = progress_line(now)
        if line != last:
            write(line)
            last = line
        if now.finished():
            break
        if deadline is not None and clock() > deadline:
            return f"{manifest.root}: not finished after {timeout_s:.0f} s"
        sleep(poll_s)
    for job in now.jobs:
        for index, state in sorted(job.tasks.items()):
            if state != "COMPLETED":
                entry = manifest.job(job.name)
                return (f"job {job.name} ({job.job_id}) task {index}: {state}; log "
                        f"{log_path(manifest, entry, index)}")
    return ""

