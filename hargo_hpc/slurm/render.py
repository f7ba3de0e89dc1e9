"""Render `sbatch_templates/*.sh.j2` into batch scripts: the only place #SBATCH lines come from."""

from __future__ import annotations

import os
import shlex
from collections.abc import Sequence
from pathlib import Path

import jinja2

from hargo_hpc.config import JobResources

TEMPLATE_DIR_ENV = "HARGO_TEMPLATE_DIR"


def template_dir() -> Path:
    """`$HARGO_TEMPLATE_DIR`, else the repository's `sbatch_templates/`."""
    override = os.environ.get(TEMPLATE_DIR_ENV)
    if override:
        return Path(override)
    return Path(__file__).resolve().parents[2] / "sbatch_templates"


def render_script(
    template: str,
    *,
    job_name: str,
    resources: JobResources,
    command: str | Sequence[str] = "",
    log_dir: str | os.PathLike[str] = ".",
    array: str = "",
    setup: Sequence[str] = (),
    **variables: object,
) -> str:
    """The batch script of `template` (e.g. "base.sh.j2") for one job kind.

    `command` is a shell line or an argv list (quoted here); `array` an sbatch --array
    range such as "0-7"; `setup` shell lines run before the command (modules, venv).
    """
    directory = template_dir()
    if not (directory / template).is_file():
        raise FileNotFoundError(f"no sbatch template {template!r} in {directory}")
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(directory)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )
    if not isinstance(command, str):
        command = shlex.join(command)
    return env.get_template(template).render(
        job_name=job_name,
        res=resources,
        command=command,
        log_dir=str(log_dir),
        array=array,
        setup=list(setup),
        **variables,
    )
