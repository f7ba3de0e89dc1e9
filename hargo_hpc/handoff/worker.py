"""The bench worker: claim a request, benchmark it, write its result; renew leases; heartbeat.

One process runs `threads` workload threads and a main loop. The main loop renews the leases of
held claims every `lease_s / 4`, rewrites the heartbeat, and ends the worker on the stop
sentinel, after `max_idle_s` without work, after `max_requests` claims, or on SIGTERM / SIGUSR1
(Slurm's time limit and preemption), in which case every held claim is released at once (a
`.released` marker next to it) so that another worker takes it over without waiting for the
lease.

The workload is any callable request-dict -> result-dict; the default is the real bench
(`hargo_hpc.bench.run_request`). A workload exception or an `infra_error` record is an
infrastructure failure: the attempt is marked `.failed` and the request retried, until
`max_attempts` failures, after which the `infra_error` result is written.
"""

from __future__ import annotations

import logging
import os
import random
import re
import secrets
import signal
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from hargo_hpc.handoff import schema
from hargo_hpc.handoff.atomic import (
    create_exclusive,
    describe,
    encode,
    open_exclusive,
    read_json,
    touch,
    write_atomic,
)
from hargo_hpc.handoff.claims import Attempts, ClaimIndex, LeaseObserver
from hargo_hpc.handoff.errors import HandoffError, SchemaError
from hargo_hpc.handoff.layout import Layout
from hargo_hpc.handoff.settings import HandoffSettings

log = logging.getLogger("hargo_hpc.handoff.worker")

Workload = Callable[[dict[str, Any]], dict[str, Any]]
RESCAN_AFTER_COLLISIONS = 16  # in a row: the queue is stale, list the step again
SLURM_KEYS = ("SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURM_JOB_ID")


def worker_id_from_env(
    env: Mapping[str, str] | None = None, host: str | None = None, pid: int | None = None
) -> str:
    """`slurm<array job>_<task>` (or `slurm<job>`), then host and pid, as one file-safe name."""
    env = os.environ if env is None else env
    parts = []
    if env.get("SLURM_ARRAY_JOB_ID") and env.get("SLURM_ARRAY_TASK_ID"):
        parts.append(f"slurm{env['SLURM_ARRAY_JOB_ID']}_{env['SLURM_ARRAY_TASK_ID']}")
    elif env.get("SLURM_JOB_ID"):
        parts.append(f"slurm{env['SLURM_JOB_ID']}")
    parts.append(host or socket.gethostname().split(".")[0])
    parts.append(f"pid{os.getpid() if pid is None else pid}")
    return re.sub(r"[^A-Za-z0-9_.-]", "_", "-".join(parts))


def bench_workload(settings: Any = None, cache_dir: str | None = None) -> Workload:
    """The real compile-and-time bench as a workload (`hargo_hpc.bench.run_request`)."""
    try:
        from hargo_hpc.bench import run_request
        from hargo_hpc.bench.settings import BenchSettings
    except ImportError as err:
        raise HandoffError(f"the bench is not available: {err}") from None
    bench_settings = settings if settings is not None else BenchSettings()

    def run_bench(request: dict[str, Any]) -> dict[str, Any]:
        return run_request(request, bench_settings, cache_dir=cache_dir)

    return run_bench


@dataclass
class Held:
    """A claim this process holds."""

    step: int
    rid: str
    attempt: int
    path: Path
    request: dict[str, Any]
    failures: int
    released: bool = False


@dataclass
class StepView:
    """What this worker knows of one open step."""

    step: int
    requests: dict[str, dict[str, Any]]
    queue: list[str] = field(default_factory=list)
    attempts: dict[str, Attempts] = field(default_factory=dict)
    last_scan: float = float("-inf")
    claims: ClaimIndex = field(default_factory=ClaimIndex)


class Worker:
    """Claims and benchmarks requests of every open step in one handoff directory."""

    def __init__(
        self,
        root: str | Path,
        workload: Workload | None = None,
        *,
        settings: HandoffSettings | None = None,
        threads: int = 1,
        max_idle_s: float | None = None,
        max_requests: int | None = None,
        worker_id: str | None = None,
        handle_signals: bool = True,
    ) -> None:
        self.settings = settings or HandoffSettings()
        self.layout = Layout(root)
        if not self.layout.root.is_dir():
            raise HandoffError(f"handoff directory {self.layout.root} does not exist")
        self.workload = workload or bench_workload()
        self.threads = max(1, threads)
        self.max_idle_s = self.settings.worker_max_idle_s if max_idle_s is None else max_idle_s
        self.max_requests = max_requests
        self.worker_id = worker_id or worker_id_from_env()
        self.nonce = secrets.token_hex(4)
        self.host = socket.gethostname()
        self.handle_signals = handle_signals
        self.lease_s = self.settings.lease_s
        self.max_attempts = self.settings.max_attempts
        self.fsync = self.settings.fsync
        self.beat_every = min(max(self.lease_s / 4, 0.5), 10.0)
        self.poll_s = min(self.settings.poll_interval_s, self.lease_s / 4)
        self.counts: Counter[str] = Counter()
        self._observer = LeaseObserver(self.lease_s)
        self._lock = threading.Lock()
        self._count_lock = threading.Lock()
        self._held: dict[Path, Held] = {}
        self._views: dict[int, StepView] = {}
        self._closed: set[int] = set()
        self._bad_steps: set[int] = set()
        self._steps: list[int] = []
        self._steps_listed = float("-inf")
        self._stop = threading.Event()
        self._signal = ""
        self._claims_taken = 0
        self._last_activity = time.monotonic()
        self._started = time.time()
        self._heartbeat_path = self.layout.workers / f"{self.worker_id}.{self.nonce}.json"

    # ------------------------------------------------------------------ main loop

    def run(self) -> str:
        """Work until a stop condition; release held claims; return why it stopped."""
        try:
            self.layout.workers.mkdir(exist_ok=True)
        except OSError as err:
            raise describe(err, "create", self.layout.workers) from None
        previous = self._install_signals()
        self._heartbeat("running")
        workers = [
            threading.Thread(target=self._work, name=f"hargo-worker-{i}", daemon=True)
            for i in range(self.threads)
        ]
        for thread in workers:
            thread.start()
        tick = min(0.2, self.lease_s / 8)
        renew_every = self.lease_s / 4
        last_renew = last_beat = time.monotonic()
        reason = ""
        try:
            while not reason:
                time.sleep(tick)
                now = time.monotonic()
                if now - last_renew >= renew_every:
                    self._renew()
                    last_renew = now
                if now - last_beat >= self.beat_every:
                    self._heartbeat("running")
                    last_beat = now
                reason = self._exit_reason(now, workers)
        finally:
            self._stop.set()
            released = self._release_all(reason or "error")
            if released:
                log.info("%s: released %d claim(s)", self.worker_id, released)
            if not released:  # nothing in flight: the threads end at their next look
                for thread in workers:
                    thread.join(timeout=1.0)
            self._heartbeat("exited", reason or "error")
            self._restore_signals(previous)
        log.info("%s: exit (%s) %s", self.worker_id, reason, dict(self.counts))
        return reason

    def _exit_reason(self, now: float, workers: list[threading.Thread]) -> str:
        if self._signal:
            return f"signal {self._signal}"
        if self.layout.stop.exists():
            return "stop sentinel"
        with self._lock:
            busy = bool(self._held)
        if self.max_requests is not None and self._claims_taken >= self.max_requests and not busy:
            return f"max requests ({self.max_requests})"
        if not busy and now - self._last_activity >= self.max_idle_s:
            return f"idle for {self.max_idle_s:g} s"
        if not any(thread.is_alive() for thread in workers):
            return "all workload threads ended"
        return ""

    def _install_signals(self) -> dict[int, Any]:
        if not self.handle_signals or threading.current_thread() is not threading.main_thread():
            return {}
        previous = {}
        for sig in (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT):
            previous[sig] = signal.signal(sig, self._on_signal)
        return previous

    def _restore_signals(self, previous: dict[int, Any]) -> None:
        for sig, handler in previous.items():
            signal.signal(sig, handler)

    def _on_signal(self, signum: int, frame: object) -> None:
        self._signal = signal.Signals(signum).name
        self._stop.set()

    # ------------------------------------------------------------------ workload threads

    def _work(self) -> None:
        while not self._stop.is_set():
            try:
                held = self._take()
            except HandoffError as err:  # read-only or full filesystem: back off, keep going
                self._count("errors")
                log.error("%s: %s", self.worker_id, err)
                self._stop.wait(max(self.poll_s, 1.0))
                continue
            if held is None:
                self._stop.wait(self.poll_s)
                continue
            record: dict[str, Any] | None = None
            error = ""
            try:
                record = self.workload(dict(held.request))
            except Exception as err:  # the workload's failure is the request's infra failure
                error = f"{type(err).__name__}: {err}"
            try:
                self._finish(held, record, error)
            except Exception:  # a bug here must not silently end this thread
                self._count("errors")
                log.exception("%s: %s: cannot finish", self.worker_id, held.rid)

    def _take(self) -> Held | None:
        with self._lock:
            if self._stop.is_set():
                return None
            if self.max_requests is not None and self._claims_taken >= self.max_requests:
                return None
            held = self._next_claim()
            if held is not None:
                self._held[held.path] = held
                self._claims_taken += 1
                self._last_activity = time.monotonic()
            return held

    def _finish(self, held: Held, record: dict[str, Any] | None, error: str) -> None:
        try:
            if record is not None:
                error = self._check_record(held, record)
                if error:
                    record = None
            with self._lock:
                if held.released:
                    self._count("dropped_after_release")
                    return
            infra = record is None or record.get("status") == "infra_error"
            if infra and held.failures + 1 < self.max_attempts:
                why = error or str(record.get("reason") or record.get("error") or "infra_error")
                self._fail_attempt(held, why)
                return
            if record is None:
                record = _infra_record(
                    held.rid, f"attempt {held.attempt}, failure {held.failures + 1} of "
                    f"{self.max_attempts}: {error}"
                )
            self._write_result(held, record)
        except HandoffError as err:
            # The claim stays; its lease runs out and another worker takes the request over.
            self._count("errors")
            log.error("%s: %s: %s", self.worker_id, held.rid, err)
        finally:
            with self._lock:
                self._held.pop(held.path, None)
                self._last_activity = time.monotonic()

    @staticmethod
    def _check_record(held: Held, record: Any) -> str:
        try:
            parsed = schema.Record.model_validate(record)
        except ValidationError as err:
            first = err.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "record"
            return f"workload returned a bad record: {where}: {first['msg']}"
        if parsed.request_id != held.rid:
            return f"workload returned the record of {parsed.request_id!r}"
        try:
            encode(record)
        except (TypeError, ValueError) as err:
            return f"workload returned a record that is not JSON: {err}"
        return ""

    def _fail_attempt(self, held: Held, error: str) -> None:
        marker = schema.AttemptFailed(worker_id=self.worker_id, error=error[:2000], at=time.time())
        write_atomic(
            self.layout.claim(held.step, held.rid, held.attempt, "failed"),
            schema.dump(marker), fsync=False,  # if lost, the attempt just looks expired
        )
        self._count("failed_attempts")
        log.warning("%s: %s attempt %d failed: %s", self.worker_id, held.rid, held.attempt, error)

    def _write_result(self, held: Held, record: dict[str, Any]) -> None:
        envelope = {
            "kind": "result", "version": schema.VERSION, "step": held.step,
            "request_id": held.rid, "attempt": held.attempt, "worker_id": self.worker_id,
            "written_at": time.time(), "record": record,
        }
        target = self.layout.result(held.step, held.rid)
        if create_exclusive(target, envelope, fsync=self.fsync):
            self._count("results")
            return
        self._count("duplicates")
        log.info("%s: %s already has a result; ignoring ours", self.worker_id, held.rid)
        dup_dir = self.layout.duplicates(held.step)
        dup_dir.mkdir(exist_ok=True)
        write_atomic(
            dup_dir / f"{held.rid}.{self.nonce}-{held.attempt}.json", envelope, fsync=self.fsync
        )

    # ------------------------------------------------------------------ claiming

    def _next_claim(self) -> Held | None:
        for step in self._open_steps():
            view = self._view(step)
            if view is None:
                continue
            held = self._claim_from(view)
            if held is not None:
                return held
        return None

    def _open_steps(self) -> list[int]:
        now = time.monotonic()
        if now - self._steps_listed < self.poll_s:
            return self._steps
        self._steps_listed = now
        open_steps = []
        for step in self.layout.step_numbers():
            if step in self._closed or step in self._bad_steps:
                continue
            if self.layout.closed(step).exists():
                self._closed.add(step)
                self._views.pop(step, None)
                continue
            open_steps.append(step)
        self._steps = open_steps
        return open_steps

    def _view(self, step: int) -> StepView | None:
        view = self._views.get(step)
        if view is not None or step in self._bad_steps:
            return view
        path = self.layout.requests(step)
        try:
            batch = schema.parse(schema.RequestBatch, read_json(path), path)
        except FileNotFoundError:
            return None  # the trainer is still writing the step
        except SchemaError as err:
            self._bad_steps.add(step)
            self._count("skipped_steps")
            log.error("%s: skipping step %d: %s", self.worker_id, step, err)
            return None
        requests = {r.id: r.model_dump(mode="json", exclude_none=True) for r in batch.requests}
        view = StepView(step=step, requests=requests)
        self._views[step] = view
        return view

    def _scan(self, view: StepView) -> None:
        view.last_scan = time.monotonic()
        self._count("scans")
        try:
            names = os.listdir(self.layout.results(view.step))
        except FileNotFoundError:
            names = []
        done = {name[:-5] for name in names if name.endswith(".json") and name[0] != "."}
        attempts = view.claims.update(self.layout.claims(view.step))
        fresh, retry = [], []
        for rid in view.requests:
            if rid in done:
                continue
            found = attempts.get(rid)
            if found is None:
                fresh.append(rid)
            elif not found.held:
                retry.append(rid)  # failed or released: nobody is on it
            else:
                path = self.layout.claim(view.step, rid, found.latest)
                if path not in self._held and self._observer.expired(path):
                    retry.append(rid)
        random.shuffle(fresh)
        random.shuffle(retry)
        view.queue = fresh + retry  # popped from the end: retries first, they are the oldest
        view.attempts = attempts

    def _claim_from(self, view: StepView) -> Held | None:
        since = time.monotonic() - view.last_scan
        if (not view.queue and since >= self.poll_s) or since >= self.lease_s / 2:
            self._scan(view)  # also look for expired claims while fresh work remains
        missed = 0
        while view.queue:
            if missed >= RESCAN_AFTER_COLLISIONS:
                self._scan(view)  # others took most of our queue: look again
                missed = 0
                continue
            rid = view.queue.pop()
            found = view.attempts.get(rid) or Attempts()
            attempt = found.latest + 1
            path = self.layout.claim(view.step, rid, attempt)
            if not open_exclusive(path, self._claim_content()):
                self._count("collisions")
                missed += 1
                continue  # another worker was first
            self._observer.forget(self.layout.claim(view.step, rid, found.latest))
            if self.layout.result(view.step, rid).exists():
                continue  # finished since our scan; the unused claim is harmless
            failures = found.failures
            if found.held:
                failures += 1  # we took over an expired claim
                self._count("reclaims")
                log.info("%s: re-claimed %s (attempt %d)", self.worker_id, rid, attempt)
            self._count("claims")
            held = Held(view.step, rid, attempt, path, view.requests[rid], failures)
            if failures >= self.max_attempts:
                self._give_up(held)
                continue
            return held
        return None

    def _give_up(self, held: Held) -> None:
        self._count("gave_up")
        log.warning("%s: %s gave up after %d failed attempts", self.worker_id, held.rid,
                    held.failures)
        errors = self._attempt_errors(held)
        record = _infra_record(
            held.rid, f"gave up after {held.failures} failed attempts (max_attempts "
            f"{self.max_attempts}): {'; '.join(errors) or 'leases expired'}"
        )
        self._write_result(held, record)

    def _attempt_errors(self, held: Held) -> list[str]:
        errors = []
        for attempt in range(1, held.attempt):
            path = self.layout.claim(held.step, held.rid, attempt, "failed")
            try:
                errors.append(schema.parse(schema.AttemptFailed, read_json(path), path).error)
            except (FileNotFoundError, SchemaError, HandoffError):
                continue
        return errors

    def _claim_content(self) -> dict[str, Any]:
        return {"kind": "claim", "version": schema.VERSION, "worker_id": self.worker_id,
                "nonce": self.nonce, "claimed_at": time.time()}

    def _count(self, key: str) -> None:
        with self._count_lock:
            self.counts[key] += 1

    def _counts_copy(self) -> dict[str, int]:
        with self._count_lock:
            return dict(self.counts)

    # ------------------------------------------------------------------ leases, heartbeat

    def _renew(self) -> None:
        with self._lock:
            held = [h for h in self._held.values() if not h.released]
        for item in held:
            try:
                self.renew(item.path)
            except FileNotFoundError:
                log.warning("%s: claim %s vanished (compacted or pruned?)", self.worker_id,
                            item.path.name)
            except OSError as err:
                self._count("errors")
                log.error("%s: cannot renew %s: %s", self.worker_id, item.path, err)

    def renew(self, path: Path) -> None:
        """Renew one lease: move the claim's mtime (a seam for clock-skew tests)."""
        touch(path)

    def _release_all(self, reason: str) -> int:
        """Mark every held attempt `.released`; the claim stays, so its number is never reused."""
        with self._lock:
            held = [h for h in self._held.values() if not h.released]
            for item in held:
                item.released = True
        marker = schema.dump(schema.Released(worker_id=self.worker_id, reason=reason,
                                             at=time.time()))
        for item in held:
            try:
                write_atomic(self.layout.claim(item.step, item.rid, item.attempt, "released"),
                             marker, fsync=False)
                self._count("released")
            except HandoffError as err:
                log.error("%s: cannot release %s: %s", self.worker_id, item.path, err)
        return len(held)

    def _heartbeat(self, state: str, reason: str = "") -> None:
        with self._lock:
            held = [f"{h.step}/{h.rid}" for h in self._held.values() if not h.released]
        beat = schema.Heartbeat(
            worker_id=self.worker_id, nonce=self.nonce, host=self.host, pid=os.getpid(),
            slurm={k: os.environ[k] for k in SLURM_KEYS if k in os.environ},
            started_at=self._started, updated_at=time.time(), state=state,  # type: ignore[arg-type]
            exit_reason=reason, held=held, counts=self._counts_copy(), interval_s=self.beat_every,
        )
        try:
            write_atomic(self._heartbeat_path, schema.dump(beat), fsync=False)
        except HandoffError as err:
            self._count("errors")
            log.error("%s: heartbeat: %s", self.worker_id, err)


def _infra_record(rid: str, error: str) -> dict[str, Any]:
    return {"request_id": rid, "status": "infra_error", "reward": None, "error": error}
