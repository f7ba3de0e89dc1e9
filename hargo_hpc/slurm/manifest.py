"""`run.json`: what one `hargo submit` put where, read back by `hargo status / cancel / logs`.

The submission directory (`<run.dir>/<run.name>/`) holds:

```
run.json                 this manifest (written atomically, rewritten as jobs are submitted)
config.toml              the experiment's resolved config (with its [sweep], if any)
scripts/<job>.sh         the batch script of each job (what `hargo render` writes)
submitit/<job>/          submitit's folder of each job: the pickled entry points, its job
                         files, and each task's log, `<id>_<i>_0_log.out` (rank 0's; a job of
                         one task `<id>_0_log.out`)
handoff/                 the handoff directory every run of the submission shares
<label>/                 one run directory per sweep point (no sweep: the submission's own)
```

A manifest is plain JSON; the dataclasses below are its schema. `executor` is "slurm" (job
ids are Slurm's) or "local" (job ids are submitit's local ones, one per task).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from hargo_hpc.errors import HargoError
from hargo_hpc.files import write_atomic

MANIFEST = "run.json"
FORMAT = 1


class ManifestError(HargoError, ValueError):
    """A missing or unreadable run.json (one line, naming the file)."""


@dataclass
class RunEntry:
    """One training run of the submission (a sweep point): its array index, label, directory
    and resolved config file."""

    index: int
    label: str
    dir: str
    config: str
    config_hash: str
    overrides: dict[str, Any] = field(default_factory=dict)


@dataclass
class JobEntry:
    """One Slurm job (an array) of the submission. `after` names the jobs it depends on and
    `dependency` is the sbatch form used (e.g. `afterok:123`; a job in parts: its first
    part's); `job_id` is "" until submitted. `log` is the output pattern (`%A` job id, `%a`
    array index).

    An array larger than the cluster's MaxArraySize goes out in parts: `parts` lists
    `[job id, first task, tasks]` per sbatch submission (the part's own array indices start
    at 0; `job_id` is the first part's); empty for a job submitted whole."""

    name: str
    script: str
    array: str
    tasks: int
    after: list[str] = field(default_factory=list)
    dependency: str = ""
    job_id: str = ""
    log: str = ""
    parts: list[list[Any]] = field(default_factory=list)

    def ids(self) -> list[str]:
        """Every Slurm job id of this job (one per part)."""
        if self.parts:
            return [str(part[0]) for part in self.parts]
        return [self.job_id] if self.job_id else []

    def part_size(self, index: int) -> int:
        """How many tasks the sbatch submission holding task `index` has."""
        for _, first, count in self.parts:
            if first <= index < first + count:
                return int(count)
        return self.tasks

    def locate(self, index: int) -> tuple[str, int]:
        """(Slurm job id, its array index) of the job's task `index`."""
        for job_id, first, count in self.parts:
            if first <= index < first + count:
                return str(job_id), index - first
        return self.job_id, index


@dataclass
class Manifest:
    name: str
    root: str
    executor: str
    submitted_at: str
    version: str
    git_revision: str | None
    config_hash: str
    handoff_dir: str | None
    runs: list[RunEntry]
    jobs: list[JobEntry]
    format: int = FORMAT

    def job(self, name: str) -> JobEntry:
        for job in self.jobs:
            if job.name == name:
                return job
        known = ", ".join(j.name for j in self.jobs)
        raise ManifestError(f"{self.root}: no job {name!r} in this submission (jobs: {known})")

    def job_ids(self) -> list[str]:
        return [job_id for job in self.jobs for job_id in job.ids()]

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1) + "\n"

    def save(self) -> Path:
        path = Path(self.root) / MANIFEST
        write_atomic(path, self.to_json())
        return path


def load_manifest(run_dir: str | Path) -> Manifest:
    """The manifest of the submission in `run_dir`; ManifestError when there is none."""
    path = Path(run_dir) / MANIFEST
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ManifestError(f"{path}: no such file; is {run_dir} a directory `hargo submit` "
                            "wrote?") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ManifestError(f"{path}: cannot read it: {err}") from None
    try:
        runs = [RunEntry(**r) for r in raw.pop("runs")]
        jobs = [JobEntry(**j) for j in raw.pop("jobs")]
        return Manifest(runs=runs, jobs=jobs, **raw)
    except (KeyError, TypeError) as err:
        raise ManifestError(f"{path}: not a hargo submission manifest ({err})") from None
