"""Claiming: which request a worker tries next, and the O_EXCL create that decides who gets it.

A scan lists a step's `results/` and `claims/` and queues the retries (failed, released or
expired attempts), then this worker's share of the fresh requests (`claim_order`: the workers
start at spread-out points of one ring, so they rarely collide). Each request is claimed by
creating `claims/<rid>.<n+1>.claim` with O_EXCL: the one creator runs attempt n + 1, every
other worker counts a collision and moves on. O_EXCL alone decides; exactly-once never
depends on the order (docs/handoff.md, "Worker side").
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from collections import deque
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

from hargo_hpc.handoff import schema
from hargo_hpc.handoff.answers import Answers
from hargo_hpc.handoff.atomic import open_exclusive
from hargo_hpc.handoff.claims import Attempts, LeaseObserver
from hargo_hpc.handoff.errors import HandoffError, describe
from hargo_hpc.handoff.exits import Activity
from hargo_hpc.handoff.heartbeat import Counts
from hargo_hpc.handoff.layout import Layout
from hargo_hpc.handoff.leases import Held, Leases
from hargo_hpc.handoff.steps import StepCatalogue, StepView

log = logging.getLogger("hargo_hpc.handoff.worker")
RESCAN_AFTER_COLLISIONS = 2  # since the last scan: the queue runs into another worker's share
IDLE_SCAN_MAX_S = 2.0  # back-off bound between scans of a step that had nothing to claim
COMPLETE_RECHECK_S = 30.0  # a step whose results cover every request is looked at this often


def order_key(*parts: object) -> float:
    """A number in [0, 1) that depends only on `parts` (the same on every node and run)."""
    digest = hashlib.blake2b("/".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


def claim_order(ring: Sequence[str], fresh: Collection[str], key: float) -> list[str]:
    """This worker's share of the `fresh` requests, in the order to try them.

    `ring` is the batch's order (the same for every worker). The share is the tail of the
    longest run of consecutive fresh requests on the ring (it may wrap around), from the point
    `key` picks in it. When every request is fresh the run is the whole ring: the share is then
    all of it, starting at the point `key` picks.
    """
    n = len(ring)
    flags = [rid in fresh for rid in ring]
    if n == 0 or not any(flags):
        return []
    if all(flags):
        start = int(key * n)
        return [*ring[start:], *ring[:start]]
    origin = flags.index(False)  # walk the ring from a gap, so that no run is cut in two
    best_start = best_len = run_start = run_len = 0
    for offset in range(1, n + 1):
        i = (origin + offset) % n
        if not flags[i]:
            run_len = 0
            continue
        if run_len == 0:
            run_start = i
        run_len += 1
        if run_len > best_len:
            best_start, best_len = run_start, run_len
    return [ring[(best_start + j) % n] for j in range(int(key * best_len), best_len)]


class Claimer:
    """Finds the next request to claim in the open steps, and claims it."""

    def __init__(
        self, layout: Layout, catalogue: StepCatalogue, leases: Leases, answers: Answers,
        activity: Activity, counts: Counts, *, worker_id: str, nonce: str, lease_s: float,
        max_attempts: int, poll_s: float,
    ) -> None:
        self.layout = layout
        self.catalogue = catalogue
        self.leases = leases
        self.answers = answers
        self.activity = activity
        self.counts = counts
        self.worker_id = worker_id
        self.nonce = nonce
        self.lease_s = lease_s
        self.max_attempts = max_attempts
        self.poll_s = poll_s
        self.observer = LeaseObserver(lease_s)

    def next_claim(self) -> Held | None:
        """A new claim in any open step, or None. An I/O error on one step backs that step
        off and the other steps are still served."""
        for step in self.catalogue.open_steps():
            now = time.monotonic()
            if self.catalogue.backing_off(step, now):
                continue
            try:
                view = self.catalogue.view(step)
                held = self._claim_from(view) if view is not None else None
            except (HandoffError, OSError) as err:
                if isinstance(err, OSError):
                    err = describe(err, "serve", self.layout.step(step))
                delay = self.catalogue.back_off(step, now)
                self.counts.add("errors")
                log.error("%s: step %d: %s (retrying it in %.1f s)", self.worker_id, step, err,
                          delay)
                continue
            self.catalogue.recovered(step)
            if held is not None:
                return held
        return None

    def _claim_from(self, view: StepView) -> Held | None:
        since = time.monotonic() - view.last_scan
        if view.complete and since < COMPLETE_RECHECK_S and not self._results_changed(view):
            return None  # every request has its result; only a quarantine could undo that,
            # and moving a result aside changes results/'s mtime: then look again at once
        if view.queue:
            if since >= self.lease_s / 2:
                self.scan(view)  # also look for expired claims while fresh work remains
        elif view.had_work or since >= view.idle_delay:
            self.scan(view)  # our share is done (look again at once), or the back-off is over
        collisions = 0
        while view.queue:
            held, collided = self._attempt(view, view.queue.popleft())
            if held is not None:
                return held
            collisions += collided
            if not view.queue or collisions >= RESCAN_AFTER_COLLISIONS:
                self.scan(view)  # our share ran out, or into another worker's: look again
                collisions = 0
        return None

    def _results_changed(self, view: StepView) -> bool:
        """Whether results/ changed (a file added or moved aside) since the last scan; an
        error counts as a change (the scan then reports it)."""
        return self._results_mtime(view.step) != view.results_mtime

    def _results_mtime(self, step: int) -> int | None:
        try:
            return os.stat(self.layout.results(step)).st_mtime_ns
        except OSError:
            return None

    def scan(self, view: StepView) -> None:
        """List the step's results and claims; queue retries, then this worker's share."""
        now = view.last_scan = time.monotonic()
        view.scans += 1
        self.counts.add("scans")
        view.results_mtime = self._results_mtime(view.step)  # before the listing: see above
        done = view.results.update(self.layout.results(view.step))
        attempts = view.claims.update(self.layout.claims(view.step))
        fresh: set[str] = set()
        retry: list[str] = []
        watching: dict[Path, float] = {}
        for rid in [rid for rid in view.ring if rid not in done]:
            found = attempts.get(rid)
            if found is None:
                fresh.add(rid)
            elif not found.held:
                retry.append(rid)  # failed or released: nobody is on it
            else:
                path = self.layout.claim(view.step, rid, found.latest)
                if self.leases.holds(path):
                    continue
                if self.observer.expired(path):
                    retry.append(rid)
                else:
                    watching[path] = view.watching.get(path, now)
        key = order_key(self.worker_id, self.nonce, view.step, view.scans)
        turn = int(key * len(retry))
        view.queue = deque([*retry[turn:], *retry[:turn], *claim_order(view.ring, fresh, key)])
        view.had_work = bool(view.queue)
        view.attempts = attempts
        view.watching = watching
        view.complete = view.requests.keys() <= done
        if view.queue:
            view.idle_delay = self.poll_s
        else:  # nothing to claim: back off, up to IDLE_SCAN_MAX_S (lease/4 while watching)
            bound = max(IDLE_SCAN_MAX_S, self.poll_s)
            if watching:
                bound = max(self.poll_s, min(bound, self.lease_s / 4))
            view.idle_delay = min(bound, max(self.poll_s, view.idle_delay * 2))
        # Watching another worker's claim is not idleness: if its holder is dead, this worker
        # must stay to see the lease run out and take it over, however short its max_idle_s
        # (at most 1.5 leases per claim: one that kept changing that long has a live holder).
        if watching:
            self.activity.watch_until(max(watching.values()) + 1.5 * self.lease_s)

    def _attempt(self, view: StepView, rid: str) -> tuple[Held | None, int]:
        """Try to claim `rid`: (the claim, 0), (None, 1) on a collision, (None, 0) when the
        claim is not worth running (a result appeared, or the attempts are used up)."""
        found = view.attempts.get(rid) or Attempts()
        attempt = found.latest + 1
        path = self.layout.claim(view.step, rid, attempt)
        if not open_exclusive(path, self._content()):
            self.counts.add("collisions")
            return None, 1  # another worker was first
        self.observer.forget(self.layout.claim(view.step, rid, found.latest))
        if self._has_result(view.step, rid):
            return None, 0  # finished since our scan; the unused claim is harmless
        failures = found.failures
        if found.held:
            failures += 1  # we took over an expired claim
            self.counts.add("reclaims")
            log.info("%s: re-claimed %s (attempt %d)", self.worker_id, rid, attempt)
        self.counts.add("claims")
        held = Held(view.step, rid, attempt, path, view.requests[rid], failures)
        if failures >= self.max_attempts:
            self.answers.give_up(held)
            return None, 0
        return held, 0

    def _has_result(self, step: int, rid: str) -> bool:
        try:
            os.stat(self.layout.result(step, rid))
        except FileNotFoundError:
            return False
        except OSError:
            return False  # cannot tell: benchmark it; a second result is only a duplicate
        return True

    def _content(self) -> dict[str, Any]:
        return {"kind": "claim", "version": schema.VERSION, "worker_id": self.worker_id,
                "nonce": self.nonce, "claimed_at": time.time()}
