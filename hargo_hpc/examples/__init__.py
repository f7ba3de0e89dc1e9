"""The example experiment files shipped with the package (`hargo_hpc/examples/jobs/*.toml`),
and the batch templates a site may copy (`hargo_hpc/slurm/templates/*.j2`).

Both are package data, so an installed wheel has them; in a source checkout the top-level
`jobs/` and `sbatch_templates/` are symlinks to the same directories. `hargo init DIR` copies
the jobs into `DIR/jobs/`, and with `--templates` the templates into `DIR/sbatch_templates/`
(a site's own copy, used when `$HARGO_TEMPLATE_DIR` names it: `hargo_hpc.slurm.render`).
"""

from __future__ import annotations

import os
from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path

from hargo_hpc.errors import HargoError


class ExamplesError(HargoError, RuntimeError):
    """Copying the examples failed; the message is one line for the user."""


def example_jobs() -> list[Traversable]:
    """The shipped example jobs, by name."""
    folder = files(__name__) / "jobs"
    jobs = [item for item in folder.iterdir() if item.name.endswith(".toml") and item.is_file()]
    if not jobs:
        raise ExamplesError(f"no example jobs in {folder}: is hargo-hpc installed completely?")
    return sorted(jobs, key=lambda item: item.name)


def shipped_templates() -> list[Traversable]:
    """The shipped batch templates (`*.j2`, the included parts too), by name."""
    folder = files("hargo_hpc.slurm") / "templates"
    found = [item for item in folder.iterdir() if item.name.endswith(".j2") and item.is_file()]
    if not found:
        raise ExamplesError(f"no batch templates in {folder}: is hargo-hpc installed completely?")
    return sorted(found, key=lambda item: item.name)


def copy_example_jobs(directory: str | os.PathLike[str], *, force: bool = False,
                      templates: bool = False) -> list[Path]:
    """Copy every example job into `directory/jobs/` (and, with `templates`, every batch
    template into `directory/sbatch_templates/`); return the paths written.

    Without `force`, nothing is written when any of the targets exists.
    """
    root = Path(directory)
    targets = [(job, root / "jobs" / job.name) for job in example_jobs()]
    if templates:
        targets += [(item, root / "sbatch_templates" / item.name) for item in shipped_templates()]
    existing = [target for _, target in targets if target.exists() or target.is_symlink()]
    if existing and not force:
        more = f" (and {len(existing) - 1} more)" if len(existing) > 1 else ""
        raise ExamplesError(f"{existing[0]} exists{more}; use --force to overwrite")
    written = []
    try:
        for source, target in targets:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(source.read_bytes())
            written.append(target)
    except OSError as err:
        where = err.filename or root / "jobs"
        raise ExamplesError(f"cannot write {where}: {err.strerror or err}") from None
    return written
