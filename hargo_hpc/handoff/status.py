"""`hargo handoff status`: per step queued / claimed / done / failed, workers, oldest pending.

Ages shown here compare file times with this node's clock, so they are for people to read;
no decision of the protocol depends on them (leases never compare clocks, see claims.py).
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from hargo_hpc.handoff import schema
from hargo_hpc.handoff.atomic import read_json
from hargo_hpc.handoff.claims import scan_claims
from hargo_hpc.handoff.errors import HandoffError, SchemaError
from hargo_hpc.handoff.layout import Layout, list_names, parse_result_name


@dataclass
class StepStatus:
    step: int
    total: int
    queued: int
    claimed: int
    done: int
    failed: int
    duplicates: int
    state: str  # open, closed, compacted
    oldest_pending: str = ""
    oldest_pending_age_s: float | None = None


@dataclass
class WorkerStatus:
    worker_id: str
    host: str
    pid: int
    state: str
    live: bool
    last_heartbeat_age_s: float
    held: int
    counts: dict[str, int]
    exit_reason: str = ""
    first_infra_error: str = ""


@dataclass
class HandoffStatus:
    root: str
    stop: bool
    steps: list[StepStatus] = field(default_factory=list)
    workers: list[WorkerStatus] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def gather(root: str | Path, *, now: float | None = None) -> HandoffStatus:
    layout = Layout(root)
    if not layout.root.is_dir():
        raise HandoffError(f"handoff directory {layout.root} does not exist")
    now = time.time() if now is None else now
    status = HandoffStatus(root=str(layout.root), stop=layout.stop.exists())
    for step in layout.step_numbers():
        try:
            status.steps.append(_step(layout, step, now))
        except (SchemaError, HandoffError) as err:
            status.skipped.append(str(err))
    status.workers = _workers(layout, now, status.skipped)
    return status


def _step(layout: Layout, step: int, now: float) -> StepStatus:
    requests_path = layout.requests(step)
    try:
        batch = schema.parse(schema.RequestBatch, read_json(requests_path), requests_path)
        ids = [r.id for r in batch.requests]
        submitted = os.stat(requests_path).st_mtime
    except FileNotFoundError:
        ids, submitted = [], now
    if layout.compacted(step).exists() and not layout.results(step).exists():
        path = layout.compacted(step)
        compacted = schema.parse(schema.Compacted, read_json(path), path)
        failed = sum(1 for r in compacted.results if r.record.status == "infra_error")
        total = len(ids) or len(compacted.results)
        return StepStatus(step, total, 0, 0, len(compacted.results), failed,
                          compacted.duplicates, "compacted")
    results: dict[str, str] = {}
    for name in list_names(layout.results(step)):
        rid = parse_result_name(name)
        if rid is None:
            continue
        path = layout.results(step) / name
        try:
            results[rid] = schema.parse(schema.Result, read_json(path), path).record.status
        except (FileNotFoundError, SchemaError, HandoffError):
            results[rid] = "unreadable"
    claims = scan_claims(layout.claims(step))
    pending = [rid for rid in ids if rid not in results]
    claimed = sum(1 for rid in pending if rid in claims and claims[rid].held)
    duplicates = len(list_names(layout.duplicates(step)))
    state = "closed" if layout.closed(step).exists() else "open"
    item = StepStatus(
        step, len(ids), len(pending) - claimed, claimed,
        sum(1 for rid in ids if rid in results),
        sum(1 for rid in ids if results.get(rid) == "infra_error"), duplicates, state,
    )
    if pending:
        item.oldest_pending = pending[0]
        item.oldest_pending_age_s = max(0.0, now - submitted)
    return item


def live_workers(root: str | Path) -> list[WorkerStatus]:
    """The workers whose heartbeat says running and is fresh, on the handoff at `root`."""
    return [w for w in _workers(Layout(root), time.time(), []) if w.live]


def _workers(layout: Layout, now: float, skipped: list[str]) -> list[WorkerStatus]:
    found = []
    for name in sorted(list_names(layout.workers)):
        if not name.endswith(".json"):
            continue
        path = layout.workers / name
        try:
            beat = schema.parse(schema.Heartbeat, read_json(path), path)
            age = max(0.0, now - os.stat(path).st_mtime)
        except FileNotFoundError:
            continue
        except (SchemaError, HandoffError) as err:
            skipped.append(str(err))
            continue
        live = beat.state == "running" and age <= 3 * beat.interval_s + 2.0
        found.append(WorkerStatus(
            beat.worker_id, beat.host, beat.pid, beat.state, live, age, len(beat.held),
            beat.counts, beat.exit_reason, beat.first_infra_error,
        ))
    return found


def render(status: HandoffStatus, *, all_workers: bool = False) -> str:
    """Plain text for people."""
    lines = [f"handoff {status.root}" + ("  (STOP sentinel present)" if status.stop else "")]
    if not status.steps:
        lines.append("no steps submitted")
    else:
        lines.append(f"{'step':>8} {'state':<9} {'total':>7} {'queued':>7} {'claimed':>7} "
                     f"{'done':>7} {'failed':>7} {'dups':>5}")
        for s in status.steps:
            lines.append(f"{s.step:>8} {s.state:<9} {s.total:>7} {s.queued:>7} {s.claimed:>7} "
                         f"{s.done:>7} {s.failed:>7} {s.duplicates:>5}")
    pending = [s for s in status.steps if s.oldest_pending_age_s is not None]
    if pending:
        oldest = max(pending, key=lambda s: s.oldest_pending_age_s or 0.0)
        lines.append(f"oldest pending: step {oldest.step} request {oldest.oldest_pending} "
                     f"(waiting {oldest.oldest_pending_age_s:.0f} s)")
    live = [w for w in status.workers if w.live]
    lines.append(f"workers: {len(live)} live, {len(status.workers) - len(live)} gone")
    runs = sum(w.counts.get("workload_runs", 0) for w in status.workers)
    infra = sum(w.counts.get("infra_errors", 0) for w in status.workers)
    if runs:  # infra_error is never scored: a high share silently shrinks the training data
        first = next((w.first_infra_error for w in status.workers if w.first_infra_error), "")
        lines.append(f"infra errors: {infra} of {runs} workload runs ({infra / runs:.1%})"
                     + (f"; first: {first}" if first else ""))
    for w in status.workers:
        if not (w.live or all_workers):
            continue
        counts = ", ".join(f"{k} {v}" for k, v in sorted(w.counts.items())) or "no work yet"
        note = f" ({w.exit_reason})" if w.exit_reason else ""
        lines.append(f"  {w.worker_id} {'live' if w.live else w.state}{note}: last heartbeat "
                     f"{w.last_heartbeat_age_s:.0f} s ago, holding {w.held}; {counts}")
    for why in status.skipped:
        lines.append(f"skipped: {why}")
    return "\n".join(lines)
