"""`hargo init DIR`: copy the shipped example jobs into DIR/jobs/ (and the batch templates into
DIR/sbatch_templates/ with --templates).

Registered by hargo_hpc/cli.py (`main.add_command(init)`); the logic is in hargo_hpc.examples.
"""

from __future__ import annotations

from pathlib import Path

import click

from hargo_hpc.cli.support import command
from hargo_hpc.examples import copy_example_jobs


@command("init")
@click.argument("directory", type=click.Path())
@click.option("--force", is_flag=True, help="overwrite example files that already exist")
@click.option("--templates", is_flag=True,
              help="also copy the batch templates into DIRECTORY/sbatch_templates/ (a site's "
                   "own copy: set HARGO_TEMPLATE_DIR to it)")
def init(directory: str, force: bool, templates: bool) -> None:
    """Copy the example experiment files into DIRECTORY/jobs/ (created if needed).

    Refuses, writing nothing, when one of them exists already, unless --force.
    """
    written = copy_example_jobs(directory, force=force, templates=templates)
    for path in written:
        click.echo(f"wrote {path}")
    click.echo(f"next: hargo config validate {written[0]}")
    if templates:
        site = (Path(directory) / "sbatch_templates").resolve()
        click.echo(f"then: export HARGO_TEMPLATE_DIR={site}  (hargo render / submit use it)")
