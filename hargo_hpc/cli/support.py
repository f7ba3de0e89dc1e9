"""What every command shares: one-line user errors with their exit code, and help options.

A `HargoError` (`errors.py`) that a command lets through is rendered here and nowhere else:
`error: <one line>` on stderr and the error's exit code. Every command and group of the tree
is built by `command` / `group` below, so this holds for `hargo X` and for a group invoked on
its own (a test's runner, `python -c "...; worker()"`). `UsageFailure` is the same for what a
command decides itself.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import IO, Any

import click

from hargo_hpc.errors import HargoError

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


class UsageFailure(click.ClickException):
    """A user error reported as one line on stderr (`error: ...`) with exit code 2."""

    exit_code = 2

    def show(self, file: IO[str] | None = None) -> None:
        click.echo(f"error: {self.format_message()}", err=True)


@contextlib.contextmanager
def one_line(*kinds: type[BaseException], prefix: str = "") -> Iterator[None]:
    """Inside the `with`: an exception of `kinds` from outside the project (a builtin
    ValueError, an OSError) becomes a `UsageFailure` with `prefix`; a `HargoError` passes on to
    the group, which renders it."""
    try:
        yield
    except HargoError:
        raise
    except kinds as err:
        raise UsageFailure(f"{prefix}{err}") from None


def _rendered(invoke: Callable[[click.Context], Any], ctx: click.Context) -> Any:
    try:
        return invoke(ctx)
    except HargoError as err:
        failure = UsageFailure(err.one_line())
        failure.exit_code = err.exit_code
        raise failure from None


class HargoCommand(click.Command):
    """A command whose `HargoError`s become one line (module docstring)."""

    def invoke(self, ctx: click.Context) -> Any:
        return _rendered(super().invoke, ctx)


class HargoGroup(click.Group):
    """A group whose commands and subgroups render `HargoError`s alike (module docstring)."""

    command_class = HargoCommand
    group_class = type  # a subgroup is a HargoGroup too

    def invoke(self, ctx: click.Context) -> Any:
        return _rendered(super().invoke, ctx)


def command(name: str | None = None, **kwargs: Any) -> Callable[..., HargoCommand]:
    """`click.command` with the project's error rendering and help options."""
    return click.command(name, cls=HargoCommand, context_settings=CONTEXT, **kwargs)


def group(name: str | None = None, cls: type[HargoGroup] = HargoGroup,
          **kwargs: Any) -> Callable[..., HargoGroup]:
    """`click.group` with the project's error rendering and help options."""
    return click.group(name, cls=cls, context_settings=CONTEXT, **kwargs)
