"""The one family of the project's errors.

Every package's error derives from `HargoError` (and, where callers catch it that way, from
the builtin it always was: `ConfigError(HargoError, ValueError)`). The command line renders
any of them that reaches it in one place (`cli.support`): `error: <one line>` on
stderr and the class's `exit_code` (2, bad input), nothing else; a traceback means a bug.
"""

from __future__ import annotations

# How a trainer that stopped after a checkpoint exits; the Slurm entry point and the batch
# scripts requeue both (docs/slurm.md, "Time limits").
EXIT_REQUEUE = 75  # EX_TEMPFAIL: stopped by a signal after a checkpoint; rerun with --resume
EXIT_DEADLINE = 76  # stopped by itself before its Slurm job's end (train.deadline); requeue


class HargoError(Exception):
    """A failure the user can act on; its message is one line naming what and where."""

    exit_code = 2

    def one_line(self) -> str:
        """The message on one line (newlines and runs of blanks folded)."""
        return " ".join(str(self).split()) or type(self).__name__
