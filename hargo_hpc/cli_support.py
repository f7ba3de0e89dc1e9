"""Shared pieces of the command line: one-line user errors with exit code 2."""

from __future__ import annotations

from typing import IO

import click

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


class UsageFailure(click.ClickException):
    """A user error reported as one line on stderr (`error: ...`) with exit code 2."""

    exit_code = 2

    def show(self, file: IO[str] | None = None) -> None:
        click.echo(f"error: {self.format_message()}", err=True)
