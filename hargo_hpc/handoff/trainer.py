"""The trainer's side: submit one step's requests, poll its results as they arrive.

- `submit(step, requests)` writes `steps/step-N/requests.json` once (exclusively). A restarted
  trainer submitting the same ids again gets the stored batch back, and finished requests are
  not run again.
- `poll(step, ids, timeout, on_tick)` yields one record per id as results arrive, then an
  `infra_error` record for every straggler at the timeout. It is the one loop that waits for
  results (with the step's progress line); `on_tick` lets its caller look at something else
  once a tick (the trainer's local workers: a dead one ends the wait). The timeout record is
  written as the request's result through the same first-wins link as a worker's, so a
  restarted trainer (or a late worker) sees the same outcome: polling is idempotent.
  `infra_error` records carry `scored: false`; the trainer drops them from the loss instead of
  scoring them.
- Each poll lists only the step's `results/` directory and reads only names it has not read
  before, so its cost grows with new files, not with every file of the run.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from pydantic import ValidationError

from hargo_hpc.handoff import schema
from hargo_hpc.handoff.atomic import create_exclusive, read_json, write_atomic
from hargo_hpc.handoff.claims import scan_claims
from hargo_hpc.handoff.errors import HandoffError, SchemaError, describe
from hargo_hpc.handoff.layout import Layout, parse_result_name
from hargo_hpc.handoff.progress import StepProgress
from hargo_hpc.handoff.settings import HandoffSettings

log = logging.getLogger("hargo_hpc.handoff.trainer")

TRAINER_ID = "trainer"
TIMEOUT_WRITE_GRACE_S = 60.0  # after the deadline: then poll raises instead of retrying


class Trainer:
    """Submits requests to, and collects results from, one handoff directory."""

    def __init__(
        self,
        root: str | Path,
        settings: HandoffSettings | None = None,
        *,
        progress: bool = True,
        stream: IO[str] | None = None,
        create: bool = True,
    ) -> None:
        self.settings = settings or HandoffSettings()
        self.layout = Layout(root)
        self.progress = progress
        self.stream = stream
        self.counts: Counter[str] = Counter()
        self._batches: dict[int, list[dict[str, Any]]] = {}
        self._seen: dict[int, set[str]] = {}
        self._results: dict[int, dict[str, dict[str, Any]]] = {}
        self._id_sets: dict[int, set[str]] = {}
        self._compacted_read: dict[int, bool] = {}
        if create:
            for path in (self.layout.steps, self.layout.workers):
                try:
                    path.mkdir(parents=True, exist_ok=True)
                except OSError as err:
                    raise describe(err, "create", path) from None
        elif not self.layout.root.is_dir():
            raise HandoffError(f"handoff directory {self.layout.root} does not exist")

    # ------------------------------------------------------------------ requests

    def submit(self, step: int, requests: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
        """Write the step's batch (once); return the batch as stored. Submitting a step again
        (a resumed trainer) keeps the stored batch when it is the same, request by request;
        HandoffError (one line) when it differs."""
        items = [self._request(step, i, r) for i, r in enumerate(requests)]
        ids = [r.id for r in items]
        if len(set(ids)) != len(ids):
            dup = next(rid for rid, n in Counter(ids).items() if n > 1)
            raise ValueError(f"step {step}: request id {dup!r} appears twice")
        path = self.layout.requests(step)
        if not path.exists():
            # Never submitted, or pruned since: whatever this object remembers of it is stale.
            self._forget(step)
            step_dir = self.layout.step(step)
            for sub in (step_dir, self.layout.claims(step), self.layout.results(step),
                        self.layout.duplicates(step)):
                try:
                    sub.mkdir(parents=True, exist_ok=True)
                except OSError as err:
                    raise describe(err, "create", sub) from None
            batch = schema.RequestBatch(step=step, created_at=time.time(), requests=items)
            if create_exclusive(path, schema.dump(batch), fsync=self.settings.fsync):
                self._batches[step] = [_plain(r) for r in items]
                return self._batches[step]
        stored, mine = self.requests(step), [_plain(r) for r in items]
        if stored != mine:
            differs = next((a["id"] for a, b in zip(mine, stored, strict=False) if a != b),
                           f"{len(stored)} stored, {len(mine)} now")
            raise HandoffError(
                f"step {step} already holds a different batch for this step (request "
                f"{differs} differs): a restarted trainer must resubmit the same requests "
                "(the same completions) or use a new handoff step"
            )
        log.info("step %d was already submitted; keeping the stored batch", step)
        return stored

    def _forget(self, step: int) -> None:
        for cache in (self._batches, self._seen, self._results, self._id_sets,
                      self._compacted_read):
            cache.pop(step, None)

    @staticmethod
    def _request(step: int, index: int, request: dict[str, Any]) -> schema.Request:
        try:
            return schema.Request.model_validate(request)
        except ValidationError as err:
            where = schema.first_error(err, "request")
            raise ValueError(f"step {step}: request #{index}: {where}") from None

    def requests(self, step: int) -> list[dict[str, Any]]:
        """The stored batch of `step` (HandoffError when the step was never submitted)."""
        if step not in self._batches:
            path = self.layout.requests(step)
            try:
                batch = schema.parse(schema.RequestBatch, read_json(path), path)
            except FileNotFoundError:
                raise HandoffError(f"step {step} was never submitted ({path} missing)") from None
            self._batches[step] = [_plain(r) for r in batch.requests]
        return self._batches[step]

    # ------------------------------------------------------------------ results

    def poll(
        self, step: int, ids: Iterable[str] | None = None, timeout: float | None = None,
        on_tick: Callable[[int, int], None] | None = None,
    ) -> Iterator[dict[str, Any]]:
        """Yield one record per id as results arrive; stragglers become `infra_error`.

        on_tick(waiting, total): called once a tick while results are pending, after the
        tick's listing of `results/` and before its sleep, with how many of the `total` ids
        have no record yet; an exception it raises ends the wait (the progress line closed)."""
        known = [r["id"] for r in self.requests(step)]
        wanted = list(ids) if ids is not None else known
        unknown = set(wanted) - set(known)
        if unknown:
            raise ValueError(f"step {step}: not submitted: {', '.join(sorted(unknown)[:5])}")
        timeout = self.settings.step_timeout_s if timeout is None else timeout
        deadline = time.monotonic() + timeout
        pending = set(wanted)
        cache = self._results.setdefault(step, {})
        bar = StepProgress(step, len(wanted), stream=self.stream, enabled=self.progress)
        failed = 0
        running = 0
        counted_at = float("-inf")
        give_up_at = deadline + max(TIMEOUT_WRITE_GRACE_S, 10 * self.settings.poll_interval_s)
        try:
            arrived = list(cache)
            while True:
                arrived += self._ingest_or_log(step)
                for rid in arrived:
                    if rid in pending:
                        pending.discard(rid)
                        failed += cache[rid]["status"] == "infra_error"
                        yield cache[rid]
                arrived = []
                if not pending:
                    break
                now = time.monotonic()
                if now >= deadline:
                    for rid in sorted(pending):
                        write_errors = self.counts["timeout_write_errors"]
                        record = self._time_out(step, rid, timeout)
                        if record is None:  # not saved: stays pending, retried next poll
                            if self.counts["timeout_write_errors"] > write_errors:
                                break  # full or read-only: the others would fail alike
                            continue
                        pending.discard(rid)
                        failed += record["status"] == "infra_error"
                        yield record
                    if not pending:
                        break
                    if now >= give_up_at:
                        raise HandoffError(
                            f"step {step}: cannot record the timeout of {len(pending)} "
                            f"request(s) (e.g. {sorted(pending)[0]}) in "
                            f"{self.layout.results(step)}; see the log"
                        )
                if now - counted_at >= 1.0:
                    running = self._running(step, pending, running)
                    counted_at = now
                done = len(wanted) - len(pending)
                bar.update(done, running, len(pending) - running, failed)
                if on_tick is not None:
                    on_tick(len(pending), len(wanted))
                pause = self.settings.poll_interval_s
                time.sleep(pause if now >= deadline else min(pause, deadline - now))
        finally:
            done = len(wanted) - len(pending)
            bar.close(done, 0 if not pending else running, len(pending), failed)
        if all(rid in cache for rid in known):
            try:
                self.close(step)
            except (HandoffError, OSError) as err:  # every record is delivered already
                log.warning("step %d: cannot mark it closed (next poll will): %s", step, err)

    def collect(
        self, step: int, ids: Iterable[str] | None = None, timeout: float | None = None,
        on_tick: Callable[[int, int], None] | None = None,
    ) -> dict[str, dict[str, Any]]:
        """`poll` to the end: every id's record."""
        return {record["request_id"]: record
                for record in self.poll(step, ids, timeout, on_tick)}

    def _ingest(self, step: int) -> list[str]:
        """Read result files not read before; return the ids that got a record."""
        cache = self._results.setdefault(step, {})
        seen = self._seen.setdefault(step, set())
        try:
            names = os.listdir(self.layout.results(step))
        except FileNotFoundError:
            return self._ingest_compacted(step)
        except OSError as err:
            raise describe(err, "list", self.layout.results(step)) from None
        new = []
        if not self._compacted_read.get(step) and self._exists(self.layout.compacted(step)):
            new += self._ingest_compacted(step)  # a compaction is removing results/
        for name in names:
            if name in seen:
                continue
            rid = parse_result_name(name)
            if rid is None:
                seen.add(name)
                continue
            path = self.layout.results(step) / name
            try:
                result = schema.parse(schema.Result, read_json(path), path)
            except FileNotFoundError:
                continue  # compacted meanwhile; read below
            except HandoffError as err:  # EIO, ESTALE: the file may be fine; read it again
                self.counts["read_errors"] += 1
                log.warning("step %d: %s; will read it again", step, err)
                continue
            except SchemaError as err:
                if not self._quarantine(step, rid, path, str(err)):
                    seen.add(name)
                continue
            if result.request_id != rid or result.step != step:
                why = f"{path}: names request {result.request_id!r} of step {result.step}"
                if not self._quarantine(step, rid, path, why, result.attempt):
                    seen.add(name)
                continue
            seen.add(name)
            if rid not in cache:
                if not self._known(step, rid):
                    self.counts["unknown_results"] += 1
                    log.warning("step %d: ignoring a result for unknown request %r", step, rid)
                    continue
                cache[rid] = _delivered(result)
                new.append(rid)
        return new

    @staticmethod
    def _exists(path: Path) -> bool:
        try:
            os.stat(path)
        except FileNotFoundError:
            return False
        except OSError as err:
            raise describe(err, "stat", path) from None
        return True

    def _known(self, step: int, rid: str) -> bool:
        ids = self._id_sets.get(step)
        if ids is None:
            ids = self._id_sets[step] = {r["id"] for r in self.requests(step)}
        return rid in ids

    def _ingest_or_log(self, step: int) -> list[str]:
        """`_ingest`, but an I/O error (ESTALE, EIO) is logged and retried at the next poll."""
        try:
            return self._ingest(step)
        except HandoffError as err:
            self.counts["poll_errors"] += 1
            log.warning("step %d: %s; retrying at the next poll", step, err)
            return []

    def _ingest_compacted(self, step: int) -> list[str]:
        path = self.layout.compacted(step)
        try:
            compacted = schema.parse(schema.Compacted, read_json(path), path)
        except FileNotFoundError:
            return []
        self._compacted_read[step] = True
        cache = self._results.setdefault(step, {})
        new = []
        for result in compacted.results:
            if result.request_id not in cache:
                cache[result.request_id] = _delivered(result)
                new.append(result.request_id)
        return new

    def _quarantine(
        self, step: int, rid: str, path: Path, why: str, attempt: int | None = None
    ) -> bool:
        """Move a corrupt result aside (dot name: ignored) so that the request is run again.

        Only for a file that was read completely and is not a valid result (results appear
        whole, through `link`); an I/O error is never a reason. The attempt that wrote it gets
        a `.released` marker, so the request is claimable at once and the good attempt does
        not count as a failure. A result that cannot be moved aside stays; its request then
        times out as infra_error.
        """
        self.counts["corrupt_results"] += 1
        if attempt is None:
            attempt = _attempt_of(path)
        aside = path.with_name(f".corrupt-{path.name}.{secrets.token_hex(3)}")
        try:
            os.rename(path, aside)
        except OSError as err:
            log.error("%s; cannot move it aside (%s)", why, err)
            return False
        log.error("%s; moved aside to %s, the request will run again", why, aside.name)
        self._release(step, rid, attempt)
        return True

    def _release(self, step: int, rid: str, attempt: int | None) -> None:
        """Mark the attempt that wrote a quarantined result `.released` (best effort)."""
        if attempt is None or attempt < 1:
            try:
                found = scan_claims(self.layout.claims(step)).get(rid)
            except HandoffError:
                found = None
            if found is None or not found.held:
                return
            attempt = found.latest
        marker = schema.Released(worker_id=TRAINER_ID, reason="result quarantined",
                                 at=time.time())
        try:
            write_atomic(self.layout.claim(step, rid, attempt, "released"),
                         schema.dump(marker), fsync=False)
        except HandoffError as err:
            log.warning("step %d: cannot release %s attempt %d: %s", step, rid, attempt, err)

    def _time_out(self, step: int, rid: str, timeout: float) -> dict[str, Any] | None:
        """The record of a straggler, as saved; None when nothing could be saved (yet).

        Only a record that is durably the request's result is returned: ours when our link
        won, otherwise whatever won (read back). When neither is possible (full disk, an
        unreadable winner that was just moved aside) the id stays pending for the next poll.
        """
        record = schema.infra_record(
            rid, f"no result within {timeout:g} s (straggler); dropped from the loss"
        )
        envelope = schema.result_envelope(step, rid, 0, TRAINER_ID, record)
        cache = self._results.setdefault(step, {})
        try:
            if create_exclusive(self.layout.result(step, rid), envelope,
                                fsync=self.settings.fsync):
                self.counts["timeouts"] += 1
                cache[rid] = _delivered(schema.Result.model_validate(envelope))
                return cache[rid]
        except HandoffError as err:
            self.counts["timeout_write_errors"] += 1
            log.error("step %d: cannot record the timeout of %s: %s; retrying", step, rid, err)
            return None
        self._ingest_or_log(step)  # another result won the race: deliver that one
        if rid in cache:
            return cache[rid]
        log.warning("step %d: %s has a result that cannot be read yet; retrying", step, rid)
        return None

    def _running(self, step: int, pending: set[str], previous: int = 0) -> int:
        try:
            claims = scan_claims(self.layout.claims(step))
        except HandoffError as err:
            log.warning("step %d: %s", step, err)
            return previous
        return sum(1 for rid in pending if rid in claims and claims[rid].held)

    # ------------------------------------------------------------------ step and run control

    def close(self, step: int) -> None:
        """Mark the step closed: workers skip it and it may be compacted or pruned."""
        path = self.layout.closed(step)
        if path.exists():
            return
        cache = self._results.get(step, {})
        failed = sum(1 for record in cache.values() if record["status"] == "infra_error")
        closed = schema.Closed(step=step, at=time.time(), results=len(cache), failed=failed)
        write_atomic(path, schema.dump(closed), fsync=self.settings.fsync)

    def stop(self, reason: str = "trainer finished") -> None:
        """Write the stop sentinel: every worker exits at its next look."""
        sentinel = schema.Stop(reason=reason, at=time.time())
        write_atomic(self.layout.stop, schema.dump(sentinel), fsync=self.settings.fsync)

    def clear_stop(self) -> None:
        """Remove a stop sentinel left by an earlier run, before starting workers again."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.layout.stop)


def _attempt_of(path: Path) -> int | None:
    """The `attempt` field of a result file that failed validation, if it still has one."""
    try:
        obj = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    attempt = obj.get("attempt") if isinstance(obj, dict) else None
    return attempt if isinstance(attempt, int) and not isinstance(attempt, bool) else None


def _plain(request: schema.Request) -> dict[str, Any]:
    return request.model_dump(mode="json")


def _delivered(result: schema.Result) -> dict[str, Any]:
    """The bench record as the trainer uses it, plus where it came from."""
    record = result.record.model_dump(mode="json")
    record["scored"] = record["status"] != "infra_error"
    record["handoff"] = {
        "step": result.step, "attempt": result.attempt, "worker_id": result.worker_id,
        "written_at": result.written_at, "received_at": time.time(),
        "timed_out": result.worker_id == TRAINER_ID,
    }
    return record
