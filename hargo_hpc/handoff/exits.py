"""Why a worker stops: one enum member per cause, the text people read, and whether it failed.

`Worker.run()` returns an `Exit`: its `reason` (an `ExitReason`) is what code tests, its `str()`
is what the CLI prints (`worker stopped: idle for 0.5 s`) and what the heartbeat records.
`Activity` is the clock behind the `IDLE` exit.
"""

from __future__ import annotations

import enum
import threading
import time
from dataclasses import dataclass


class ExitReason(enum.Enum):
    STOP_SENTINEL = "stop sentinel"  # STOP appeared in the handoff directory
    IDLE = "idle"  # max_idle_s without work (and no one else's claim being watched)
    MAX_REQUESTS = "max requests"  # max_requests claims taken, and all of them finished
    SIGNAL = "signal"  # SIGTERM, SIGUSR1, SIGUSR2 or SIGINT: held claims are released at once
    CRASHED = "crashed"  # a workload thread died of a bug
    INFRA = "infra errors"  # too many workload runs ended infra_error (answers.InfraWatch)
    ERROR = "error"  # the main loop itself raised

    @property
    def failed(self) -> bool:
        """Whether the worker broke (the CLI exits with status 1) rather than stopped."""
        return self in (ExitReason.CRASHED, ExitReason.INFRA, ExitReason.ERROR)


@dataclass(frozen=True)
class Exit:
    """One exit: the reason and its detail (seconds, a count, a signal name, an error)."""

    reason: ExitReason
    detail: str = ""

    @classmethod
    def idle(cls, seconds: float) -> Exit:
        return cls(ExitReason.IDLE, f"{seconds:g}")

    @classmethod
    def max_requests(cls, count: int) -> Exit:
        return cls(ExitReason.MAX_REQUESTS, str(count))

    @property
    def failed(self) -> bool:
        return self.reason.failed

    def __str__(self) -> str:
        reason, detail = self.reason, self.detail
        if reason is ExitReason.IDLE:
            return f"idle for {detail} s"
        if reason is ExitReason.MAX_REQUESTS:
            return f"max requests ({detail})"
        if reason is ExitReason.SIGNAL:
            return f"signal {detail}"
        if reason is ExitReason.CRASHED or reason is ExitReason.INFRA:
            return f"failed: {detail}"
        if reason is ExitReason.ERROR:
            return f"error: {detail}" if detail else "error"
        return reason.value


class Activity:
    """When this worker last had work, and until when watching others' claims is not idleness.

    A worker that watches another worker's claim in an open step must stay long enough to see
    that lease run out (if its holder died) and take the request over, however short its
    max_idle_s: see `Claimer`, which extends `watch_until`.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last = time.monotonic()
        self._watch_until = float("-inf")

    def touch(self) -> None:
        with self._lock:
            self._last = time.monotonic()

    def watch_until(self, until: float) -> None:
        with self._lock:
            self._watch_until = max(self._watch_until, until)

    def idle(self, now: float, max_idle_s: float) -> bool:
        """No work for max_idle_s, and no watched claim that may still expire."""
        with self._lock:
            return now - self._last >= max_idle_s and now >= self._watch_until
