"""The example experiment files shipped with the package (`hargo_hpc/examples/jobs/*.toml`).

They are package data, so an installed wheel has them; in a source checkout the top-level
`jobs/` is a symlink to the same directory. `hargo init DIR` copies them into `DIR/jobs/`.
"""

from __future__ import annotations

import os
from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path


class ExamplesError(RuntimeError):
    """Copying the examples failed; the message is one line for the user."""


def example_jobs() -> list[Traversable]:
    """The shipped example jobs, by name."""
    folder = files(__name__) / "jobs"
    jobs = [item for item in folder.iterdir() if item.name.endswith(".toml") and item.is_file()]
    if not jobs:
        raise ExamplesError(f"no example jobs in {folder}: is hargo-hpc installed completely?")
    return sorted(jobs, key=lambda item: item.name)


def copy_example_jobs(directory: str | os.PathLike[str], *, force: bool = False) -> list[Path]:
    """Copy every example job into `directory/jobs/`; return the paths written.

    Without `force`, nothing is written when any of the targets exists.
    """
    dest = Path(directory) / "jobs"
    targets = [(job, dest / job.name) for job in example_jobs()]
    existing = [target for _, target in targets if target.exists() or target.is_symlink()]
    if existing and not force:
        more = f" (and {len(existing) - 1} more)" if len(existing) > 1 else ""
        raise ExamplesError(f"{existing[0]} exists{more}; use --force to overwrite")
    written = []
    try:
        dest.mkdir(parents=True, exist_ok=True)
        for job, target in targets:
            target.write_bytes(job.read_bytes())
            written.append(target)
    except OSError as err:
        raise ExamplesError(f"cannot write {err.filename or dest}: {err.strerror or err}") from None
    return written
