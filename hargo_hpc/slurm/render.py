"""Render the batch templates (`hargo_hpc/slurm/templates/*.sh.j2`) into batch scripts.

The templates ship inside the package and are loaded through it (jinja2's PackageLoader, so
an installed wheel finds them); `$HARGO_TEMPLATE_DIR` names a directory holding a site's own
copy instead. Their `#SBATCH` lines come from `hargo_hpc.slurm.options.sbatch_options`, the
list submitit's parameters are derived from too.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Sequence

import jinja2

from hargo_hpc.config import JobResources
from hargo_hpc.slurm.options import JOB_ENVIRONMENT, sbatch_line, sbatch_options

TEMPLATE_DIR_ENV = "HARGO_TEMPLATE_DIR"
TEMPLATE_PACKAGE = "hargo_hpc.slurm"
TEMPLATE_FOLDER = "templates"


def template_loader() -> tuple[jinja2.BaseLoader, str]:
    """The loader of the batch templates and a phrase saying where they come from."""
    override = os.environ.get(TEMPLATE_DIR_ENV)
    if override:
        return jinja2.FileSystemLoader(override), f"{override} (${TEMPLATE_DIR_ENV})"
    loader = jinja2.PackageLoader(TEMPLATE_PACKAGE, TEMPLATE_FOLDER)
    return loader, f"the package's templates ({TEMPLATE_PACKAGE}/{TEMPLATE_FOLDER})"


def template_names() -> list[str]:
    """The templates available now (the package's, or those in `$HARGO_TEMPLATE_DIR`); parts
    that others include (`_*.j2`) left out."""
    loader, _ = template_loader()
    try:
        return sorted(name for name in loader.list_templates()
                      if name.endswith(".j2") and not name.startswith("_"))
    except OSError:  # a $HARGO_TEMPLATE_DIR that does not exist
        return []


def render_script(
    template: str,
    *,
    job_name: str,
    resources: JobResources,
    command: str | Sequence[str] = "",
    log_dir: str | os.PathLike[str] = ".",
    array: str = "",
    setup: Sequence[str] = (),
    to_steps: bool = False,
    requeue: bool = False,
    **variables: object,
) -> str:
    """The batch script of `template` (e.g. "base.sh.j2") for one job kind.

    `command` is a shell line or an argv list (quoted here); `array` an sbatch --array
    range such as "0-7"; `setup` shell lines run before the command (modules, venv);
    `to_steps` / `requeue` as in `sbatch_options`.
    Templates get `sbatch_lines` (the `#SBATCH` lines), `res` (the resources), `job_name`,
    `command`, `log_dir`, `array`, `setup`, `environment` (options.JOB_ENVIRONMENT) and
    `variables`.
    """
    loader, where = template_loader()
    env = jinja2.Environment(
        loader=loader,
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )
    if not isinstance(command, str):
        command = shlex.join(command)
    options = sbatch_options(resources, job_name=job_name, array=array, log_dir=log_dir,
                             to_steps=to_steps, requeue=requeue)
    try:
        return env.get_template(template).render(
            job_name=job_name,
            res=resources,
            sbatch_lines=[sbatch_line(option) for option in options],
            command=command,
            log_dir=str(log_dir),
            array=array,
            setup=list(setup),
            environment=list(JOB_ENVIRONMENT),
            **variables,
        )
    except jinja2.UndefinedError as err:  # a site template asking for what nobody sets
        raise ValueError(f"sbatch template {template!r} from {where}: {err.message}; the "
                         "variables it gets: job_name, res, sbatch_lines, command, log_dir, "
                         f"array, setup, environment, "
                         f"{', '.join(sorted(variables)) or '(no others)'}"
                         ) from None
    except jinja2.TemplateNotFound as err:  # the template, or one it extends
        have = ", ".join(template_names()) or "none"
        raise FileNotFoundError(
            f"no sbatch template {err.name!r} in {where} (templates there: {have})"
        ) from None
