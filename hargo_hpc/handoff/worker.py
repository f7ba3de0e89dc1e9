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
from hargo_hpc.handoff.layout import Layout, list_names, parse_result_name
from hargo_hpc.handoff.settings import HandoffSettings

log = logging.getLogger("hargo_hpc.handoff.worker")
FAILURE_PREFIX = "failed"

Workload = Callable[[dict[str, Any]], dict[str, Any]]
RESCAN_AFTER_COLLISIONS = 16  # in a row: the queue is stale, list the step again
IDLE_SCAN_MAX_S = 2.0  # back-off bound between scans of a step that had nothing to claim
COMPLETE_RECHECK_S = 30.0  # a step whose results cover every request is looked at this often
STEP_BACKOFF_MAX_S = 30.0  # bound of the back-off of a step that raised an I/O error
CLOSED_RECHECK_S = 60.0  # closed steps are re-checked this often (pruned and resubmitted?)
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
    identity: tuple[int, int] | None = None  # requests.json (inode, mtime): a new batch?
    idle_delay: float = 0.0  # current back-off between scans that found nothing to claim
    complete: bool = False  # results cover every request (re-checked every COMPLETE_RECHECK_S)
    watching: dict[Path, float] = field(default_factory=dict)  # others' live claims: since


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
        try:  # here, not in run(): once constructed, the worker's part of the layout exists
            self.layout.workers.mkdir(exist_ok=True)
        except OSError as err:
            raise describe(err, "create", self.layout.workers) from None
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
        # _lock guards only the held claims and counters (never held during file I/O, so
        # lease renewal is never stuck behind a slow listing); _claim_lock serializes the
        # claim scanning state of the workload threads.
        self._lock = threading.Lock()
        self._claim_lock = threading.Lock()
        self._count_lock = threading.Lock()
        self._held: dict[Path, Held] = {}
        self._views: dict[int, StepView] = {}
        # Steps seen closed, and steps skipped (unsupported batch). Both are forgotten when
        # steps/ changes (its mtime: a step was added, pruned or submitted again) and every
        # CLOSED_RECHECK_S, so a pruned step number submitted again is served.
        self._closed: set[int] = set()
        self._closed_checked = time.monotonic()
        self._steps_token: tuple[int, int] | None = None
        self._bad_steps: dict[int, tuple[int, int] | None] = {}  # step -> requests.json id
        self._step_backoff: dict[int, tuple[float, float]] = {}  # step -> (until, delay)
        self._steps: list[int] = []
        self._steps_listed = float("-inf")
        self._crashed = ""
        self._watch_until = float("-inf")  # not idle before: others' claims are watched
        self._stop = threading.Event()
        self._signal = ""
        self._claims_taken = 0
        self._last_activity = time.monotonic()
        self._started = time.time()
        self._heartbeat_path = self.layout.workers / f"{self.worker_id}.{self.nonce}.json"

    # ------------------------------------------------------------------ main loop

    def run(self) -> str:
        """Work until a stop condition; release held claims; return why it stopped."""
        previous = self._install_signals()
        self._heartbeat("running")
        workers = [
            threading.Thread(target=self._work, name=f"hargo-worker-{i}", daemon=True)
            for i in range(self.threads)
        ]
        renewer = threading.Thread(target=self._renew_loop, name="hargo-renew", daemon=True)
        for thread in workers:
            thread.start()
        renewer.start()
        tick = min(0.2, self.lease_s / 8)
        last_beat = time.monotonic()
        reason = ""
        try:
            while not reason:
                time.sleep(tick)
                now = time.monotonic()
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

    @staticmethod
    def failed(reason: str) -> bool:
        """Whether an exit reason means the worker broke (the CLI exits non-zero)."""
        return reason in ("", "error") or reason.startswith(FAILURE_PREFIX)

    def _stop_present(self) -> bool:
        try:
            os.stat(self.layout.stop)
        except FileNotFoundError:
            return False
        except OSError as err:  # ESTALE, EIO: look again at the next tick
            self._count("errors")
            log.error("%s: %s", self.worker_id, describe(err, "look for", self.layout.stop))
            return False
        return True

    def _exit_reason(self, now: float, workers: list[threading.Thread]) -> str:
        if self._signal:
            return f"signal {self._signal}"
        if self._stop_present():
            return "stop sentinel"
        if self._crashed:
            return f"{FAILURE_PREFIX}: {self._crashed}"
        with self._lock:
            busy = bool(self._held)
            watch_until = self._watch_until
        if self.max_requests is not None and self._claims_taken >= self.max_requests and not busy:
            return f"max requests ({self.max_requests})"
        if not busy and now - self._last_activity >= self.max_idle_s and now >= watch_until:
            return f"idle for {self.max_idle_s:g} s"
        if not all(thread.is_alive() for thread in workers):
            return f"{FAILURE_PREFIX}: a workload thread ended"
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
        try:
            self._work_loop()
        except Exception as err:  # a bug: end the worker (non-zero exit), not just a thread
            self._crashed = f"{threading.current_thread().name}: {type(err).__name__}: {err}"
            log.exception("%s: workload thread crashed", self.worker_id)

    def _work_loop(self) -> None:
        backoff = 0.0
        while not self._stop.is_set():
            try:
                held = self._take()
            except (HandoffError, OSError) as err:  # ESTALE, EIO, read-only, full: back off
                self._count("errors")
                if isinstance(err, OSError):
                    err = describe(err, "claim a request in", self.layout.steps)
                backoff = min(STEP_BACKOFF_MAX_S, max(self.poll_s, 0.5, backoff * 2))
                log.error("%s: %s (retrying in %.1f s)", self.worker_id, err, backoff)
                self._stop.wait(backoff)
                continue
            backoff = 0.0
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
        with self._claim_lock:  # file I/O happens here, never under self._lock
            with self._lock:
                if self._stop.is_set():
                    return None
                if self.max_requests is not None and self._claims_taken >= self.max_requests:
                    return None
            held = self._next_claim()
            if held is None:
                return None
            with self._lock:
                if not self._stop.is_set():
                    self._held[held.path] = held
                    self._claims_taken += 1
                    self._last_activity = time.monotonic()
                    return held
            # Stopping: _release_all may already have run without this claim. Give it back.
            self._release(held, "worker stopping")
            return None

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
                record = schema.infra_record(
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
            return f"workload returned a bad record: {schema.first_error(err, 'record')}"
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
        envelope = schema.result_envelope(held.step, held.rid, held.attempt, self.worker_id,
                                          record)
        target = self.layout.result(held.step, held.rid)
        if create_exclusive(target, envelope, fsync=self.fsync):
            self._count("results")
            return
        self._count("duplicates")
        log.info("%s: %s already has a result; ignoring ours", self.worker_id, held.rid)
        dup_dir = self.layout.duplicates(held.step)
        try:  # never re-create duplicates/: it is gone only when the step was compacted
            write_atomic(dup_dir / f"{held.rid}.{self.nonce}-{held.attempt}.json", envelope,
                         fsync=self.fsync)
        except HandoffError as err:
            log.info("%s: %s: duplicate not kept: %s", self.worker_id, held.rid, err)

    # ------------------------------------------------------------------ claiming

    def _next_claim(self) -> Held | None:
        """The next claim of any open step; an I/O error on one step backs that step off
        (exponentially, up to STEP_BACKOFF_MAX_S) and the other steps are still served."""
        for step in self._open_steps():
            now = time.monotonic()
            backoff = self._step_backoff.get(step)
            if backoff is not None and now < backoff[0]:
                continue
            try:
                view = self._view(step)
                held = self._claim_from(view) if view is not None else None
            except (HandoffError, OSError) as err:
                if isinstance(err, OSError):
                    err = describe(err, "serve", self.layout.step(step))
                delay = min(STEP_BACKOFF_MAX_S,
                            backoff[1] * 2 if backoff else max(self.poll_s, 0.5))
                self._step_backoff[step] = (now + delay, delay)
                self._count("errors")
                log.error("%s: step %d: %s (retrying it in %.1f s)", self.worker_id, step, err,
                          delay)
                continue
            self._step_backoff.pop(step, None)
            if held is not None:
                return held
        return None

    def _open_steps(self) -> list[int]:
        now = time.monotonic()
        if now - self._steps_listed < self.poll_s:
            return self._steps
        self._steps_listed = now
        try:
            st = os.stat(self.layout.steps)
            token: tuple[int, int] | None = (st.st_ino, st.st_mtime_ns)
        except FileNotFoundError:
            token = None
        except OSError as err:
            raise describe(err, "stat", self.layout.steps) from None
        steps = self.layout.step_numbers()
        if token != self._steps_token or now - self._closed_checked >= CLOSED_RECHECK_S:
            self._steps_token = token
            self._closed_checked = now
            self._closed.clear()
            for step, view in list(self._views.items()):
                if self._identity(step) != view.identity:
                    del self._views[step]  # pruned (and maybe submitted again): a new batch
            for step, identity in list(self._bad_steps.items()):
                if self._identity(step) != identity:
                    del self._bad_steps[step]
        present = set(steps)
        for cache in (self._bad_steps, self._views, self._step_backoff):
            for step in [s for s in cache if s not in present]:
                del cache[step]  # pruned
        self._closed &= present
        open_steps = []
        for step in steps:
            if step in self._closed or step in self._bad_steps:
                continue
            try:
                os.stat(self.layout.closed(step))
            except FileNotFoundError:
                open_steps.append(step)
                continue
            except OSError as err:
                self._count("errors")
                log.error("%s: %s", self.worker_id, describe(err, "stat",
                                                             self.layout.closed(step)))
                continue
            self._closed.add(step)
            self._views.pop(step, None)
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
            self._bad_steps[step] = self._identity(step)
            self._count("skipped_steps")
            log.error("%s: skipping step %d: %s", self.worker_id, step, err)
            return None
        requests = {r.id: r.model_dump(mode="json", exclude_none=True) for r in batch.requests}
        view = StepView(step=step, requests=requests, identity=self._identity(step),
                        idle_delay=self.poll_s)
        self._views[step] = view
        return view

    def _identity(self, step: int) -> tuple[int, int] | None:
        """(inode, mtime) of the step's requests.json: tells a resubmitted batch apart."""
        try:
            st = os.stat(self.layout.requests(step))
        except OSError:
            return None
        return st.st_ino, st.st_mtime_ns

    def _scan(self, view: StepView) -> None:
        now = view.last_scan = time.monotonic()
        self._count("scans")
        names = list_names(self.layout.results(view.step))
        done = {rid for rid in map(parse_result_name, names) if rid is not None}
        attempts = view.claims.update(self.layout.claims(view.step))
        fresh, retry = [], []
        watching: dict[Path, float] = {}
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
                if path in self._held:
                    continue
                if self._observer.expired(path):
                    retry.append(rid)
                else:
                    watching[path] = view.watching.get(path, now)
        random.shuffle(fresh)
        random.shuffle(retry)
        view.queue = fresh + retry  # popped from the end: retries first, they are the oldest
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
        # must stay to see the lease run out and take it over, however short its --max-idle
        # (at most 1.5 leases per claim: one that kept changing that long has a live holder).
        if watching:
            until = max(watching.values()) + 1.5 * self.lease_s
            with self._lock:
                self._watch_until = max(self._watch_until, until)

    def _claim_from(self, view: StepView) -> Held | None:
        since = time.monotonic() - view.last_scan
        if view.complete and since < COMPLETE_RECHECK_S:
            return None  # every request has its result; only a quarantine could undo that
        if (not view.queue and since >= view.idle_delay) or (
            view.queue and since >= self.lease_s / 2
        ):
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
            if self._has_result(view.step, rid):
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

    def _has_result(self, step: int, rid: str) -> bool:
        try:
            os.stat(self.layout.result(step, rid))
        except FileNotFoundError:
            return False
        except OSError:
            return False  # cannot tell: benchmark it; a second result is only a duplicate
        return True

    def _give_up(self, held: Held) -> None:
        self._count("gave_up")
        log.warning("%s: %s gave up after %d failed attempts", self.worker_id, held.rid,
                    held.failures)
        errors = self._attempt_errors(held)
        record = schema.infra_record(
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

    def _renew_loop(self) -> None:
        """Renew held leases every lease/4, in a thread of its own that touches only held
        claims: no scan, listing or heartbeat can delay it."""
        every = self.lease_s / 4
        while not self._stop.wait(every):
            try:
                self._renew()
            except Exception:  # never let the renewer die quietly
                self._count("errors")
                log.exception("%s: lease renewal", self.worker_id)

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
        for item in held:
            self._release(item, reason)
        return len(held)

    def _release(self, item: Held, reason: str) -> None:
        marker = schema.dump(schema.Released(worker_id=self.worker_id, reason=reason,
                                             at=time.time()))
        try:
            write_atomic(self.layout.claim(item.step, item.rid, item.attempt, "released"),
                         marker, fsync=False)
            self._count("released")
        except HandoffError as err:
            log.error("%s: cannot release %s: %s", self.worker_id, item.path, err)

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

