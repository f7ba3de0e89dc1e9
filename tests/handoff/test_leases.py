"""Leases: expiry by observation, take-over of dead claims, immunity to clock skew."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from waiting import wait_until

from hargo_hpc.handoff import HandoffSettings, Trainer, Worker
from hargo_hpc.handoff.claims import Attempts, LeaseObserver, scan_claims
from hargo_hpc.handoff.layout import Layout

from .conftest import make_requests, running_workers
from .doubles import CountingWorkloadDouble

SKEW_NS = 30 * 10**9


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_observer_expires_only_after_a_lease_without_change(tmp_path: Path) -> None:
    clock = FakeClock()
    observer = LeaseObserver(5.0, clock)
    claim = tmp_path / "r.1.claim"
    claim.write_text("{}")
    assert not observer.expired(claim)  # first sight starts the watch
    clock.now += 4.9
    assert not observer.expired(claim)
    os.utime(claim, ns=(1, 1))  # renewed (to any value at all)
    clock.now += 4.9
    assert not observer.expired(claim)
    clock.now += 5.0
    assert observer.expired(claim)
    claim.unlink()
    assert not observer.expired(claim)


def test_skewed_mtimes_neither_expire_live_nor_keep_dead_claims(tmp_path: Path) -> None:
    """±30 s between 'nodes': only changes matter, never how far the mtime is from now."""
    clock = FakeClock()
    observer = LeaseObserver(1.0, clock)
    behind, ahead = tmp_path / "a.1.claim", tmp_path / "b.1.claim"
    behind.write_text("{}")
    ahead.write_text("{}")
    base = time.time_ns()
    os.utime(ahead, ns=(base + SKEW_NS, base + SKEW_NS))  # dead, stamped by a fast clock
    for tick in range(5):  # a live holder whose clock runs 30 s slow renews each 0.5 s
        stamp = base - SKEW_NS + tick * 10**9
        os.utime(behind, ns=(stamp, stamp))
        observer.expired(ahead)
        assert not observer.expired(behind)
        clock.now += 0.5
    assert observer.expired(ahead)


def test_attempt_states() -> None:
    attempts = Attempts({1: {"claim"}, 2: {"claim", "failed"}, 3: {"released"}, 4: {"claim"}})
    assert attempts.latest == 4
    assert attempts.state(2) == "failed"
    assert attempts.failures == 2  # 1 superseded, 2 failed; 3 released does not count
    assert attempts.held


class SkewedWorker(Worker):
    """A worker on a node whose clock is off by `skew_ns`: it stamps its renewals with it."""

    skew_ns = -SKEW_NS

    def renew(self, path: Path) -> None:
        stamp = time.time_ns() + self.skew_ns
        os.utime(path, ns=(stamp, stamp))


def test_slow_holder_on_a_skewed_node_keeps_its_claims(root: Path) -> None:
    settings = HandoffSettings(lease_s=0.4, poll_interval_s=0.02, step_timeout_s=20)
    trainer = Trainer(root, settings, progress=False)
    trainer.submit(0, make_requests(6))
    slow = CountingWorkloadDouble(delay_s=1.5)  # each request takes ~4 leases
    holder = SkewedWorker(root, slow, settings=settings, threads=6, handle_signals=False,
                          max_idle_s=30)
    thread = threading.Thread(target=holder.run, daemon=True)
    thread.start()
    wait_until(lambda: len(scan_claims(Layout(root).claims(0))) == 6, 10,
               "the holder claimed all 6 requests", poll=0.02)
    rival = CountingWorkloadDouble()
    with running_workers(root, rival, settings, count=2):
        results = trainer.collect(0, timeout=15)
    trainer.stop()
    thread.join(10)
    assert len(results) == 6 and all(r["status"] == "ok" for r in results.values())
    assert rival.calls == {}, "a renewed claim was taken over because of clock skew"
    assert holder.counts["duplicates"] == 0


def test_dead_claim_stamped_in_the_future_is_taken_over(root: Path) -> None:
    settings = HandoffSettings(lease_s=0.5, poll_interval_s=0.02, step_timeout_s=20)
    trainer = Trainer(root, settings, progress=False)
    trainer.submit(0, make_requests(3))
    layout = Layout(root)
    dead = layout.claim(0, "r00001", 1)
    dead.write_text('{"kind": "claim", "version": 2, "worker_id": "gone", "nonce": "x", '
                    '"claimed_at": 0}')
    future = time.time_ns() + SKEW_NS
    os.utime(dead, ns=(future, future))
    workload = CountingWorkloadDouble()
    started = time.monotonic()
    with running_workers(root, workload, settings, count=1):
        results = trainer.collect(0, timeout=15)
    assert results["r00001"]["status"] == "ok"
    assert results["r00001"]["handoff"]["attempt"] == 2
    assert time.monotonic() - started >= 0.5  # waited one lease, not 30 s
    assert scan_claims(layout.claims(0))["r00001"].latest == 2
