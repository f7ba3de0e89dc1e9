"""Claim order: workers try different requests first, so O_EXCL collisions are rare.

Deterministic: no timing. Workers run in this thread, in turn, with fixed ids and nonces.
"""

from __future__ import annotations

import random
from collections.abc import Collection, Sequence
from pathlib import Path

import pytest

from hargo_hpc.handoff import HandoffSettings, Trainer, Worker
from hargo_hpc.handoff import claimer as claimer_module
from hargo_hpc.handoff.claimer import claim_order, order_key
from hargo_hpc.handoff.claims import scan_claims
from hargo_hpc.handoff.layout import Layout

from .conftest import make_requests
from .doubles import noop_workload_double

RING = [f"r{i}" for i in range(10)]


def test_all_fresh_is_the_whole_ring_from_the_keys_point() -> None:
    assert claim_order(RING, set(RING), 0.0) == RING
    assert claim_order(RING, set(RING), 0.35) == [*RING[3:], *RING[:3]]
    assert claim_order(RING, set(), 0.5) == []
    assert claim_order([], set(), 0.5) == []


def test_the_share_is_the_tail_of_the_longest_fresh_run_even_across_the_end() -> None:
    fresh = {"r2", "r3", "r7", "r8", "r9", "r0"}  # runs r2-r3 and r7..r0 (wraps around)
    assert claim_order(RING, fresh, 0.0) == ["r7", "r8", "r9", "r0"]
    assert claim_order(RING, fresh, 0.5) == ["r9", "r0"]
    assert claim_order(RING, fresh, 0.99) == ["r0"]


def test_keys_differ_per_worker_nonce_step_and_scan() -> None:
    keys = {order_key(w, n, step, scan) for w in ("a", "b") for n in ("x", "y")
            for step in (0, 1) for scan in (1, 2)}
    assert len(keys) == 16 and all(0.0 <= k < 1.0 for k in keys)
    assert order_key("a", "x", 0, 1) == order_key("a", "x", 0, 1)


def _workers(root: Path, count: int) -> list[Worker]:
    settings = HandoffSettings(lease_s=60, poll_interval_s=0.02, fsync=False)
    return [Worker(root, noop_workload_double, settings=settings, worker_id=f"slurm1_{i}-cn1",
                   nonce=f"{i:08x}", handle_signals=False) for i in range(count)]


def _claim_in_turn(workers: list[Worker]) -> list[str]:
    """Each worker in turn takes one claim and answers it at once, until none is left; the
    request ids in the order they were claimed."""
    claimed = []
    active = list(workers)
    while active:
        for worker in list(active):
            held = worker._take()
            if held is None:  # its scan found nothing unclaimed
                active.remove(worker)
                continue
            claimed.append(held.rid)
            worker._finish(held, noop_workload_double(held.request), "")
    return claimed


def test_two_workers_start_on_different_requests(root: Path) -> None:
    Trainer(root, HandoffSettings(), progress=False).submit(0, make_requests(100))
    first, second = _workers(root, 2)
    assert first._take().rid != second._take().rid
    assert first.counts["collisions"] == second.counts["collisions"] == 0


def _random_order(rng: random.Random):
    def shuffled(ring: Sequence[str], fresh: Collection[str], key: float) -> list[str]:
        queue = [rid for rid in ring if rid in fresh]
        rng.shuffle(queue)
        return queue

    return shuffled


@pytest.mark.parametrize("order", ["workers' own", "random (control)"])
def test_eight_workers_rarely_collide_and_claim_each_request_once(
    root: Path, monkeypatch: pytest.MonkeyPatch, order: str
) -> None:
    total = 1000
    Trainer(root, HandoffSettings(), progress=False).submit(0, make_requests(total))
    if order == "random (control)":  # the earlier order: it must fail the bound below
        monkeypatch.setattr(claimer_module, "claim_order", _random_order(random.Random(3)))
        monkeypatch.setattr(claimer_module, "RESCAN_AFTER_COLLISIONS", 16)
    workers = _workers(root, 8)
    claimed = _claim_in_turn(workers)
    # exactly once, whatever the order: one claim (attempt 1) and one result per request
    assert sorted(claimed) == sorted(r["id"] for r in make_requests(total))
    attempts = scan_claims(Layout(root).claims(0))
    assert len(attempts) == total and {a.latest for a in attempts.values()} == {1}
    assert len(list(Layout(root).results(0).iterdir())) == total
    claims = sum(w.counts["claims"] for w in workers)
    collisions = sum(w.counts["collisions"] for w in workers)
    assert claims == total
    if order == "workers' own":
        assert collisions / claims <= 0.05, collisions  # the goal is 0.1; measured 0.026
        assert all(w.counts["claims"] >= total / 8 / 2 for w in workers), "a worker starved"
    else:
        assert collisions / claims > 0.5, collisions
