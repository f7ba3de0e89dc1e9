"""Lease keeping: the claims this process holds, their renewal thread, and their release.

`Leases` holds a worker's claims (`hold`, `drop`), renews them every `lease_s / 4` from its
own thread (`renew_loop`) and releases them with a `.released` marker (`release`,
`release_all`). Who may touch a claim, when it expires, why claim numbers are never reused and
why release leaves the claim: docs/handoff.md, "Atomicity without locks" and "Leases and the
lease clock".
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hargo_hpc.handoff import schema
from hargo_hpc.handoff.atomic import write_atomic
from hargo_hpc.handoff.errors import HandoffError
from hargo_hpc.handoff.heartbeat import Counts
from hargo_hpc.handoff.layout import Layout

log = logging.getLogger("hargo_hpc.handoff.worker")


@dataclass
class Held:
    """A claim this process holds: attempt `attempt` of request `rid` of `step`."""

    step: int
    rid: str
    attempt: int
    path: Path
    request: dict[str, Any]
    failures: int  # infrastructure failures of earlier attempts
    released: bool = False


class Leases:
    """The held claims of one worker process: hold, renew, release, drop.

    `_lock` guards only the in-memory set of held claims, never file I/O, so no slow listing,
    scan or heartbeat can delay a renewal.
    """

    def __init__(self, layout: Layout, worker_id: str, lease_s: float, stop: threading.Event,
                 renew: Callable[[Path], object], counts: Counts) -> None:
        self.layout = layout
        self.worker_id = worker_id
        self.every = lease_s / 4
        self.counts = counts
        self._stop = stop
        self._renew = renew  # Worker.renew, looked up at each call (the clock-skew tests' seam)
        self._lock = threading.Lock()
        self._held: dict[Path, Held] = {}
        self.taken = 0  # claims held so far (max_requests counts these)

    # ------------------------------------------------------------------ the held set

    def hold(self, held: Held) -> bool:
        """Keep renewing `held`; False when the worker is stopping.

        Checked under the same lock as `release_all` marks claims released, so a claim made
        while the worker stops is either released by `release_all` or refused here; then the
        caller gives it back.
        """
        with self._lock:
            if self._stop.is_set():
                return False
            self._held[held.path] = held
            self.taken += 1
            return True

    def drop(self, held: Held) -> None:
        """The attempt is finished (result, failure marker or error): stop renewing it."""
        with self._lock:
            self._held.pop(held.path, None)

    def holds(self, path: Path) -> bool:
        with self._lock:
            return path in self._held

    def was_released(self, held: Held) -> bool:
        with self._lock:
            return held.released

    @property
    def busy(self) -> bool:
        with self._lock:
            return bool(self._held)

    def names(self) -> list[str]:
        """`step/rid` of every held claim not released (for the heartbeat)."""
        with self._lock:
            return [f"{h.step}/{h.rid}" for h in self._held.values() if not h.released]

    def _live(self) -> list[Held]:
        with self._lock:
            return [h for h in self._held.values() if not h.released]

    # ------------------------------------------------------------------ renewal

    def renew_loop(self) -> None:
        """Renew every `lease_s / 4` until the worker stops; the body of the renewal thread."""
        while not self._stop.wait(self.every):
            try:
                self.renew_held()
            except Exception:  # never let the renewer die quietly
                self.counts.add("errors")
                log.exception("%s: lease renewal", self.worker_id)

    def renew_held(self) -> None:
        """Renew every held claim once; a claim that vanished (compacted, pruned) is logged."""
        for item in self._live():
            try:
                self._renew(item.path)
            except FileNotFoundError:
                log.warning("%s: claim %s vanished (compacted or pruned?)", self.worker_id,
                            item.path.name)
            except OSError as err:
                self.counts.add("errors")
                log.error("%s: cannot renew %s: %s", self.worker_id, item.path, err)

    # ------------------------------------------------------------------ release

    def release_all(self, reason: str) -> int:
        """Mark every held attempt `.released` (the claims stay); how many were released."""
        with self._lock:
            held = [h for h in self._held.values() if not h.released]
            for item in held:
                item.released = True
        for item in held:
            self.release(item, reason)
        return len(held)

    def release(self, item: Held, reason: str) -> None:
        """Write attempt `item.attempt`'s `.released` marker next to its claim."""
        marker = schema.dump(schema.Released(worker_id=self.worker_id, reason=reason,
                                             at=time.time()))
        try:
            write_atomic(self.layout.claim(item.step, item.rid, item.attempt, "released"),
                         marker, fsync=False)
            self.counts.add("released")
        except HandoffError as err:
            log.error("%s: cannot release %s: %s", self.worker_id, item.path, err)
