"""`hargo data`: look at task data (stats, prompts)."""

from __future__ import annotations

import click

from hargo_hpc.cli_support import CONTEXT


@click.group(context_settings=CONTEXT)
def data() -> None:
    """Inspect task data: sizes, label balance, answer lengths, the prompts (docs/tasks.md)."""
