"""Claims and leases: who holds which request, and when a holder is presumed dead.

A claim is the file `claims/<rid>.<n>.claim`, created exclusively (O_EXCL) for attempt `n`; the
winner of attempt `n` is the only worker entitled to benchmark it. The holder renews the lease by
touching the file (mtime) every `lease_s / 4` seconds.

**Lease clock.** Observers never compare an mtime with any clock. An observer remembers the
claim's `(inode, mtime)` and the moment (its own monotonic clock) it first saw that value; the
claim is expired once the value has not changed for `lease_s` of the observer's own time. So no
two clocks are ever compared: skew between nodes, or between a node and the file server, cannot
expire a live claim nor keep a dead one alive. The price: a worker that has just started waits
one lease before it re-claims a dead worker's request.

Taking over an expired attempt `n` means creating attempt `n + 1` (exclusively again), so exactly
one worker takes over. The old holder, if it was only slow, may still finish: its result then
races through the first-result-wins link like any other.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from hargo_hpc.handoff.errors import describe
from hargo_hpc.handoff.layout import list_names, parse_claim_name, parse_result_name


@dataclass
class Attempts:
    """What the claims/ listing says about one request."""

    states: dict[int, set[str]] = field(default_factory=dict)

    @property
    def latest(self) -> int:
        return max(self.states, default=0)

    def state(self, attempt: int) -> str:
        """failed > released > claim: a marker, written next to its claim, decides."""
        found = self.states.get(attempt, set())
        for state in ("failed", "released", "claim"):
            if state in found:
                return state
        return ""

    @property
    def failures(self) -> int:
        """Failed attempts plus superseded claims (they were taken over, so they expired)."""
        latest = self.latest
        return sum(
            1 for n in self.states
            if self.state(n) == "failed" or (self.state(n) == "claim" and n < latest)
        )

    @property
    def held(self) -> bool:
        return self.state(self.latest) == "claim"


def scan_claims(directory: Path) -> dict[str, Attempts]:
    """Attempts per request id from one listing of claims/ ({} when it does not exist)."""
    return ClaimIndex().update(directory)


class ClaimIndex:
    """`scan_claims` for repeated listings: only names not seen before are parsed.

    Claim files are only ever added while a step is open; if a name vanishes (compaction, or
    a claim undone because the result was already there) the index starts over. Temp names
    are parsed (and skipped) each time they are listed, never remembered, so that one renamed
    into place does not look like a claim that vanished.
    """

    def __init__(self) -> None:
        self._names: set[str] = set()
        self._attempts: dict[str, Attempts] = {}

    def update(self, directory: Path) -> dict[str, Attempts]:
        current = set(list_names(directory, hidden=True))
        if not self._names <= current:
            self._names, self._attempts = set(), {}
        for name in current - self._names:
            parsed = parse_claim_name(name)  # None for temp names and strangers
            if parsed is not None:
                rid, attempt, state = parsed
                found = self._attempts.setdefault(rid, Attempts())
                found.states.setdefault(attempt, set()).add(state)
                self._names.add(name)
        return self._attempts


class ResultIndex:
    """The request ids that have a file in `results/`, from repeated listings: only names not
    seen before are parsed. If a name vanishes (the trainer moved a corrupt result aside, or
    compaction) the index starts over."""

    def __init__(self) -> None:
        self._names: set[str] = set()
        self.done: set[str] = set()

    def update(self, directory: Path) -> set[str]:
        current = set(list_names(directory, hidden=True))
        if not self._names <= current:
            self._names, self.done = set(), set()
        for name in current - self._names:
            rid = parse_result_name(name)  # None for temp names
            if rid is not None:
                self.done.add(rid)
                self._names.add(name)
        return self.done


class LeaseObserver:
    """Decides expiry by watching a claim's mtime stand still for `lease_s` of local time."""

    def __init__(self, lease_s: float, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.lease_s = lease_s
        self._monotonic = monotonic
        self._seen: dict[Path, tuple[tuple[int, int], float]] = {}

    def expired(self, path: Path) -> bool:
        """True once `path` has not changed for a lease; False if it changed or vanished.

        HandoffError when the claim cannot be looked at (ESTALE, EIO).
        """
        try:
            st = os.stat(path)
        except FileNotFoundError:
            self._seen.pop(path, None)
            return False
        except OSError as err:  # ESTALE, EIO: no verdict this time; the clock keeps running
            raise describe(err, "stat", path) from None
        token = (st.st_ino, st.st_mtime_ns)
        now = self._monotonic()
        seen = self._seen.get(path)
        if seen is None or seen[0] != token:
            self._seen[path] = (token, now)
            return False
        return now - seen[1] >= self.lease_s

    def forget(self, path: Path) -> None:
        self._seen.pop(path, None)
