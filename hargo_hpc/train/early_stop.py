"""A stop signal that comes before the trainer's own handlers exist is remembered, not fatal.

`hargo train` and `hargo sft` call `catch()` first thing: loading torch and the model takes
seconds, and Slurm's time-limit or preemption signal (SIGUSR1, submitit's SIGUSR2, SIGTERM)
may come meanwhile; by default it would kill the process before any checkpoint. Caught here,
it is handed to `train.run.StopSignals` when the loop's handlers are in place (`take()`),
which then stops at its first phase boundary like any other stop; when the loop ends, the
default actions come back (a later SIGTERM ends the process). Light: no torch.
"""

from __future__ import annotations

import signal

SIGNALS = (signal.SIGUSR1, signal.SIGUSR2, signal.SIGTERM)
_seen: list[str] = []


def _remember(signum: int, frame: object) -> None:
    _seen.append(signal.Signals(signum).name)


def catch() -> None:
    """Remember SIGNALS from now on (main thread only) until the loop's handlers take over."""
    for sig in SIGNALS:
        signal.signal(sig, _remember)


def is_catcher(handler: object) -> bool:
    """Whether `handler` is the one `catch()` installs (the loop restores SIG_DFL instead)."""
    return handler is _remember


def take() -> str | None:
    """The first stop signal remembered since the last call, if any (and forget them)."""
    first = _seen[0] if _seen else None
    _seen.clear()
    return first
