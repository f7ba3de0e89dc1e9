"""Shared pieces of the command line: one-line user errors with exit code 2.

`HargoGroup` is the one place where an error of the project's family (`errors.HargoError`)
that a command let through becomes what the user sees: `error: <one line>` on stderr and
the error's exit code. `UsageFailure` is the same for what a command decides itself.
"""

from __future__ import annotations

from typing import IO, Any

import click

from hargo_hpc.errors import HargoError

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


class UsageFailure(click.ClickException):
    """A user error reported as one line on stderr (`error: ...`) with exit code 2."""

    exit_code = 2

    def show(self, file: IO[str] | None = None) -> None:
        click.echo(f"error: {self.format_message()}", err=True)


class HargoGroup(click.Group):
    """The `hargo` group: a `HargoError` from any command below it is rendered as a
    `UsageFailure` (module docstring)."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except HargoError as err:
            failure = UsageFailure(err.one_line())
            failure.exit_code = err.exit_code
            raise failure from None

