"""The step catalogue: which steps a worker serves, and all it remembers of each one.

Everything a worker caches about a step lives in one `StepEntry`: whether the step is open,
closed or skipped (an unsupported batch), its `StepView` (requests, scan results, queue), and
its I/O-error back-off. There is **one invalidation rule**, `StepEntry.survives`, for all of it:

* an entry is dropped whole when its step leaves `steps/` (pruned);
* at a recheck (whenever `steps/` changes, by inode or mtime, and at least every
  `CLOSED_RECHECK_S`) an entry is kept only when its `requests.json` is still the same file
  (same inode and mtime: the same batch) and it does not say "closed". Closed-ness is a fact about
  `closed.json`, so a closed step is looked at again: a pruned step submitted again under the
  same number is then served.

No part of an entry can outlive another, so a resubmitted batch never meets a stale queue,
scan, skip mark or back-off.
"""

from __future__ import annotations

import enum
import logging
import os
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hargo_hpc.handoff import schema
from hargo_hpc.handoff.atomic import read_json
from hargo_hpc.handoff.claims import Attempts, ClaimIndex, ResultIndex
from hargo_hpc.handoff.errors import SchemaError, describe
from hargo_hpc.handoff.heartbeat import Counts
from hargo_hpc.handoff.layout import Layout

log = logging.getLogger("hargo_hpc.handoff.worker")
CLOSED_RECHECK_S = 60.0  # closed steps are re-checked this often (pruned and resubmitted?)
STEP_BACKOFF_MAX_S = 30.0  # bound of the back-off of a step that raised an I/O error
Identity = tuple[int, int] | None  # (inode, mtime) of requests.json; None when it is absent


@dataclass
class StepView:
    """What this worker knows of one open step's requests, from its last scan."""

    step: int
    requests: dict[str, dict[str, Any]]
    ring: list[str] = field(default_factory=list)  # the request ids in the batch's order
    queue: deque[str] = field(default_factory=deque)  # what to try next, in order
    attempts: dict[str, Attempts] = field(default_factory=dict)
    claims: ClaimIndex = field(default_factory=ClaimIndex)
    results: ResultIndex = field(default_factory=ResultIndex)
    last_scan: float = float("-inf")
    scans: int = 0
    had_work: bool = False  # the last scan queued something (an empty queue: drained, not idle)
    idle_delay: float = 0.0  # current back-off between scans that found nothing to claim
    complete: bool = False  # results cover every request (re-checked every COMPLETE_RECHECK_S)
    results_mtime: int | None = None  # results/'s mtime (ns) just before the last scan listed it
    watching: dict[Path, float] = field(default_factory=dict)  # others' live claims: since


class StepState(enum.Enum):
    OPEN = "open"
    CLOSED = "closed"  # closed.json exists: nothing to do
    SKIPPED = "skipped"  # requests.json is unsupported (corrupt, unknown version)


@dataclass
class StepEntry:
    """Everything remembered of one step, valid for one batch (`identity`)."""

    identity: Identity
    state: StepState = StepState.OPEN
    view: StepView | None = None
    backoff_until: float = float("-inf")
    backoff_delay: float = 0.0

    def survives(self, identity: Identity) -> bool:
        """The invalidation rule, applied at every recheck (see the module docstring)."""
        return self.state is not StepState.CLOSED and identity == self.identity


class StepCatalogue:
    """Lists the open steps of one handoff directory and keeps one `StepEntry` per step."""

    def __init__(self, layout: Layout, poll_s: float, counts: Counts, worker_id: str) -> None:
        self.layout = layout
        self.poll_s = poll_s
        self.counts = counts
        self.worker_id = worker_id
        self._entries: dict[int, StepEntry] = {}
        self._open: list[int] = []
        self._listed = float("-inf")
        self._token: Identity = None  # steps/ (inode, mtime) at the last recheck
        self._checked = time.monotonic()

    def open_steps(self) -> list[int]:
        """Steps without closed.json, ascending; listed at most every poll_s."""
        now = time.monotonic()
        if now - self._listed < self.poll_s:
            return self._open
        self._listed = now
        try:
            st = os.stat(self.layout.steps)
            token: Identity = (st.st_ino, st.st_mtime_ns)
        except FileNotFoundError:
            token = None
        except OSError as err:
            raise describe(err, "stat", self.layout.steps) from None
        present = self.layout.step_numbers()
        recheck = token != self._token or now - self._checked >= CLOSED_RECHECK_S
        if recheck:
            self._token, self._checked = token, now
        kept = set(present)
        for step, entry in list(self._entries.items()):
            if step not in kept or (recheck and not entry.survives(self._identity(step))):
                del self._entries[step]  # pruned, or another batch now: forget all of it
        self._open = [step for step in present if self._is_open(step)]
        return self._open

    def _is_open(self, step: int) -> bool:
        entry = self._entries.get(step)
        if entry is not None and entry.state is not StepState.OPEN:
            return False
        path = self.layout.closed(step)
        try:
            os.stat(path)
        except FileNotFoundError:
            return True
        except OSError as err:  # ESTALE, EIO: not served this round
            self.counts.add("errors")
            log.error("%s: %s", self.worker_id, describe(err, "stat", path))
            return False
        self._entries[step] = StepEntry(identity=None, state=StepState.CLOSED)
        return False

    def view(self, step: int) -> StepView | None:
        """The step's view, read from requests.json once per batch; None while the trainer is
        still writing it, or when the batch is unsupported (skipped, and counted once)."""
        entry = self._entries.get(step)
        if entry is not None and (entry.view is not None or entry.state is StepState.SKIPPED):
            return entry.view
        path = self.layout.requests(step)
        try:
            batch = schema.parse(schema.RequestBatch, read_json(path), path)
        except FileNotFoundError:
            return None
        except SchemaError as err:
            self._entry(step).state = StepState.SKIPPED
            self.counts.add("skipped_steps")
            log.error("%s: skipping step %d: %s", self.worker_id, step, err)
            return None
        requests = {r.id: r.model_dump(mode="json", exclude_none=True) for r in batch.requests}
        entry = self._entry(step)
        entry.identity = self._identity(step)  # the batch just read
        entry.view = StepView(step=step, requests=requests, ring=list(requests),
                              idle_delay=self.poll_s)
        return entry.view

    def backing_off(self, step: int, now: float) -> bool:
        entry = self._entries.get(step)
        return entry is not None and now < entry.backoff_until

    def back_off(self, step: int, now: float) -> float:
        """The step raised an I/O error: leave it alone for 0.5 s (or poll_s), doubling up to
        STEP_BACKOFF_MAX_S while it keeps failing; the delay chosen."""
        entry = self._entry(step)
        if entry.backoff_delay:
            entry.backoff_delay = min(STEP_BACKOFF_MAX_S, entry.backoff_delay * 2)
        else:
            entry.backoff_delay = min(STEP_BACKOFF_MAX_S, max(self.poll_s, 0.5))
        entry.backoff_until = now + entry.backoff_delay
        return entry.backoff_delay

    def recovered(self, step: int) -> None:
        entry = self._entries.get(step)
        if entry is not None:
            entry.backoff_until, entry.backoff_delay = float("-inf"), 0.0

    def _entry(self, step: int) -> StepEntry:
        """The step's entry, made now for the batch now in requests.json if there is none."""
        entry = self._entries.get(step)
        if entry is None:
            entry = self._entries[step] = StepEntry(identity=self._identity(step))
        return entry

    def _identity(self, step: int) -> Identity:
        """(inode, mtime) of the step's requests.json: tells a resubmitted batch apart."""
        try:
            st = os.stat(self.layout.requests(step))
        except OSError:
            return None
        return st.st_ino, st.st_mtime_ns
