"""`hargo eval`: score predictions of a task, compare two systems (WinRate)."""

from __future__ import annotations

import click

from hargo_hpc.cli_support import CONTEXT


@click.group("eval", context_settings=CONTEXT)
def eval_group() -> None:
    """Score predictions with a task's metrics; WinRate of one system against another."""
