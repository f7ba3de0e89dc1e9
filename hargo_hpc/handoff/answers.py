"""What becomes of an attempt once its workload returned: a result, a failure marker, or both.

* A record that passes `check_record` is written as the request's result, through an exclusive
  link: the first result wins. A later one (from a slow worker whose lease expired, or a
  straggler after the trainer's timeout) goes to `duplicates/` and is counted, never seen by the
  trainer.
* A workload exception, an `infra_error` record or a record that breaks the contract is an
  infrastructure failure. Before the last attempt the attempt is marked `.failed` (the request
  is claimable again at once). At the last attempt the `infra_error` result is written.
* `give_up` writes the `infra_error` result of a request whose attempts are used up by expired
  leases (the claimer notices it when it takes the request over).
* `InfraWatch` counts the workload's runs and infrastructure failures (`workload_runs`,
  `infra_errors` in the heartbeat) and keeps the first failure's message: past
  `max_infra_share` the worker stops with it (an `infra_error` is never scored, so a harness
  bug that fails every request would otherwise only shrink the training data, silently).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from pydantic import ValidationError

from hargo_hpc.handoff import schema
from hargo_hpc.handoff.atomic import create_exclusive, encode, read_json, write_atomic
from hargo_hpc.handoff.errors import HandoffError, SchemaError
from hargo_hpc.handoff.heartbeat import Counts
from hargo_hpc.handoff.layout import Layout
from hargo_hpc.handoff.leases import Held

log = logging.getLogger("hargo_hpc.handoff.worker")


class InfraWatch:
    """The share of this worker's workload runs that were infrastructure failures."""

    def __init__(self, counts: Counts, max_share: float, min_runs: int) -> None:
        self.counts = counts
        self.max_share = max_share
        self.min_runs = min_runs
        self.first = ""  # the first failure's message
        self._lock = threading.Lock()

    def record(self, infra: bool, message: str) -> None:
        self.counts.add("workload_runs")
        if infra:
            self.counts.add("infra_errors")
            with self._lock:
                self.first = self.first or message[:500]

    def tripped(self) -> str:
        """'' while the share is acceptable, else why the worker must stop."""
        runs, infra = self.counts["workload_runs"], self.counts["infra_errors"]
        if runs < self.min_runs or infra <= self.max_share * runs:
            return ""
        return (f"{infra} of {runs} workload runs ended infra_error (more than "
                f"{self.max_share:.0%}); the first: {self.first}")  # fmt: skip


class Answers:
    """Writes results, duplicates and `.failed` markers for one worker process."""

    def __init__(self, layout: Layout, worker_id: str, nonce: str, max_attempts: int,
                 fsync: bool, counts: Counts, watch: InfraWatch) -> None:
        self.layout = layout
        self.worker_id = worker_id
        self.nonce = nonce
        self.max_attempts = max_attempts
        self.fsync = fsync
        self.counts = counts
        self.watch = watch

    def answer(self, held: Held, record: dict[str, Any] | None, error: str) -> None:
        """Result or failure marker for the workload's `record` (None: it raised `error`).

        HandoffError when nothing could be written: the claim then stays, its lease runs out
        and another worker does the request again.
        """
        if record is not None:
            error = check_record(held, record)
            if error:
                record = None
        infra = record is None or record.get("status") == "infra_error"
        why = ""
        if infra:
            why = error or str(record.get("reason") or record.get("error") or "infra_error")
        self.watch.record(infra, why)
        if infra and held.failures + 1 < self.max_attempts:
            self.fail_attempt(held, why)
            return
        if record is None:
            record = schema.infra_record(
                held.rid, f"attempt {held.attempt}, failure {held.failures + 1} of "
                f"{self.max_attempts}: {error}"
            )
        self.write_result(held, record)

    def fail_attempt(self, held: Held, error: str) -> None:
        marker = schema.AttemptFailed(worker_id=self.worker_id, error=error[:2000], at=time.time())
        write_atomic(
            self.layout.claim(held.step, held.rid, held.attempt, "failed"),
            schema.dump(marker), fsync=False,  # if lost, the attempt just looks expired
        )
        self.counts.add("failed_attempts")
        log.warning("%s: %s attempt %d failed: %s", self.worker_id, held.rid, held.attempt, error)

    def write_result(self, held: Held, record: dict[str, Any]) -> None:
        """Link the result into place; if another result won, keep ours in duplicates/."""
        envelope = schema.result_envelope(held.step, held.rid, held.attempt, self.worker_id,
                                          record)
        target = self.layout.result(held.step, held.rid)
        if create_exclusive(target, envelope, fsync=self.fsync):
            self.counts.add("results")
            return
        self.counts.add("duplicates")
        log.info("%s: %s already has a result; ignoring ours", self.worker_id, held.rid)
        dup_dir = self.layout.duplicates(held.step)
        try:  # never re-create duplicates/: it is gone only when the step was compacted
            write_atomic(dup_dir / f"{held.rid}.{self.nonce}-{held.attempt}.json", envelope,
                         fsync=self.fsync)
        except HandoffError as err:
            log.info("%s: %s: duplicate not kept: %s", self.worker_id, held.rid, err)

    def give_up(self, held: Held) -> None:
        """`infra_error` for a request whose earlier attempts used up max_attempts."""
        self.counts.add("gave_up")
        log.warning("%s: %s gave up after %d failed attempts", self.worker_id, held.rid,
                    held.failures)
        errors = self._attempt_errors(held)
        record = schema.infra_record(
            held.rid, f"gave up after {held.failures} failed attempts (max_attempts "
            f"{self.max_attempts}): {'; '.join(errors) or 'leases expired'}"
        )
        self.write_result(held, record)

    def _attempt_errors(self, held: Held) -> list[str]:
        errors = []
        for attempt in range(1, held.attempt):
            path = self.layout.claim(held.step, held.rid, attempt, "failed")
            try:
                errors.append(schema.parse(schema.AttemptFailed, read_json(path), path).error)
            except (FileNotFoundError, SchemaError, HandoffError):
                continue
        return errors


def check_record(held: Held, record: Any) -> str:
    """Why the workload's record breaks the contract ('' when it does not)."""
    try:
        parsed = schema.Record.model_validate(record)
    except ValidationError as err:
        return f"workload returned a bad record: {schema.first_error(err, 'record')}"
    if parsed.request_id != held.rid:
        return f"workload returned the record of {parsed.request_id!r}"
    try:
        encode(record)
    except (TypeError, ValueError) as err:
        return f"workload returned a record that is not JSON: {err}"
    return ""
