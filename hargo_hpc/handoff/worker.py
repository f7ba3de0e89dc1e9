"""The bench worker: claim a request, benchmark it, write its result, until told to stop.

One process runs `threads` workload threads, a lease renewal thread and a main loop. It is
composed of parts that can be read one by one:

* `steps.StepCatalogue`: which steps are open, closed or skipped, and all that is remembered
  of each (one entry per step, one invalidation rule);
* `claimer.Claimer`: the per-step scan, the claim order, the O_EXCL claim;
* `leases.Leases`: the held claims, their renewal thread and their release (the lease
  invariants are stated there);
* `answers.Answers`: result, duplicate or `.failed` marker once the workload returned;
* `heartbeat.Heartbeat` and `heartbeat.Counts`: what the worker reports about itself;
* `exits`: why it stops (`ExitReason`), and the idle clock.

The main loop ends the worker on the stop sentinel, when idle, after `max_requests`, on a
signal or when a workload thread crashed, releasing every held claim at once. The default
workload (`workloads.Dispatch`) runs each request by its kind. docs/handoff.md, "Worker side".
"""

from __future__ import annotations

import logging
import os
import re
import secrets
import signal
import socket
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hargo_hpc.handoff.answers import Answers, InfraWatch
from hargo_hpc.handoff.atomic import touch
from hargo_hpc.handoff.claimer import Claimer
from hargo_hpc.handoff.errors import HandoffError, describe
from hargo_hpc.handoff.exits import Activity, Exit, ExitReason
from hargo_hpc.handoff.heartbeat import Counts, Heartbeat
from hargo_hpc.handoff.layout import Layout
from hargo_hpc.handoff.leases import Held, Leases
from hargo_hpc.handoff.settings import HandoffSettings
from hargo_hpc.handoff.steps import STEP_BACKOFF_MAX_S, StepCatalogue
from hargo_hpc.handoff.workloads import Dispatch, Workload

__all__ = ["Exit", "ExitReason", "Held", "Worker", "Workload", "worker_id_from_env"]

log = logging.getLogger("hargo_hpc.handoff.worker")


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
        nonce: str | None = None,
        handle_signals: bool = True,
        idle_from_first_step: bool = False,
    ) -> None:
        """`nonce` (default: random) tells apart processes with the same worker id;
        `idle_from_first_step`: the idle clock starts only once the handoff holds a step (a
        submission's workers start before training and wait out its queueing; the stop
        sentinel ends them in any case)."""
        settings = settings or HandoffSettings()
        self.layout = Layout(root)
        if not self.layout.root.is_dir():
            raise HandoffError(f"handoff directory {self.layout.root} does not exist")
        try:  # here, not in run(): once constructed, the worker's part of the layout exists
            self.layout.workers.mkdir(exist_ok=True)
        except OSError as err:
            raise describe(err, "create", self.layout.workers) from None
        self.workload = workload or Dispatch()
        self.threads = max(1, threads)
        self.max_idle_s = settings.worker_max_idle_s if max_idle_s is None else max_idle_s
        self.max_requests = max_requests
        self.worker_id = worker_id or worker_id_from_env()
        self.nonce = nonce or secrets.token_hex(4)
        self.handle_signals = handle_signals
        self._waiting_for_steps = idle_from_first_step
        self.lease_s = settings.lease_s
        self.poll_s = min(settings.poll_interval_s, self.lease_s / 4)
        beat_every = min(max(self.lease_s / 4, 0.5), 10.0)
        self.counts = Counts()
        self.activity = Activity()
        self._stop = threading.Event()
        self._claim_lock = threading.Lock()  # one workload thread at a time scans and claims
        self._signal = ""
        self._crashed = ""
        self.infra = InfraWatch(self.counts, settings.max_infra_share, settings.infra_min_runs)
        self.heartbeat = Heartbeat(self.layout, self.worker_id, self.nonce, beat_every,
                                   self.counts, lambda: self.infra.first)
        self.leases = Leases(self.layout, self.worker_id, self.lease_s, self._stop,
                             lambda path: self.renew(path), self.counts)
        self.answers = Answers(self.layout, self.worker_id, self.nonce, settings.max_attempts,
                               settings.fsync, self.counts, self.infra)
        self.catalogue = StepCatalogue(self.layout, self.poll_s, self.counts, self.worker_id)
        self.claimer = Claimer(
            self.layout, self.catalogue, self.leases, self.answers, self.activity, self.counts,
            worker_id=self.worker_id, nonce=self.nonce, lease_s=self.lease_s,
            max_attempts=settings.max_attempts, poll_s=self.poll_s,
        )

    def renew(self, path: Path) -> None:
        """Renew one lease: move the claim's mtime (a seam for clock-skew tests)."""
        touch(path)

    # ------------------------------------------------------------------ main loop

    def run(self) -> Exit:
        """Work until a stop condition; release held claims; return why it stopped."""
        previous = self._install_signals()
        self.heartbeat.write("running", self.leases.names())
        workers = [threading.Thread(target=self._work, name=f"hargo-worker-{i}", daemon=True)
                   for i in range(self.threads)]
        renewer = threading.Thread(target=self.leases.renew_loop, name="hargo-renew",
                                   daemon=True)
        for thread in [*workers, renewer]:
            thread.start()
        outcome = Exit(ExitReason.ERROR)
        try:
            outcome = self._watch(workers)
        except BaseException as err:
            outcome = Exit(ExitReason.ERROR, f"{type(err).__name__}: {err}")
            raise
        finally:
            self._shut_down(outcome, workers)
            self._restore_signals(previous)
        log.info("%s: exit (%s) %s", self.worker_id, outcome, self.counts.snapshot())
        return outcome

    def _watch(self, workers: list[threading.Thread]) -> Exit:
        """Tick: rewrite the heartbeat when due, and return once there is a reason to stop."""
        tick = min(0.2, self.lease_s / 8)
        last_beat = time.monotonic()
        while True:
            time.sleep(tick)
            now = time.monotonic()
            if now - last_beat >= self.heartbeat.interval_s:
                self.heartbeat.write("running", self.leases.names())
                last_beat = now
            outcome = self._exit_reason(now, workers)
            if outcome is not None:
                return outcome

    def _exit_reason(self, now: float, workers: list[threading.Thread]) -> Exit | None:
        if self._signal:
            return Exit(ExitReason.SIGNAL, self._signal)
        if self._stop_present():
            return Exit(ExitReason.STOP_SENTINEL)
        if self._crashed:
            return Exit(ExitReason.CRASHED, self._crashed)
        broken = self.infra.tripped()
        if broken:
            return Exit(ExitReason.INFRA, broken)
        busy = self.leases.busy
        if self.max_requests is not None and self.leases.taken >= self.max_requests and not busy:
            return Exit.max_requests(self.max_requests)
        if not busy and not self._before_first_step() and self.activity.idle(now, self.max_idle_s):
            return Exit.idle(self.max_idle_s)
        if not all(thread.is_alive() for thread in workers):
            return Exit(ExitReason.CRASHED, "a workload thread ended")
        return None

    def _before_first_step(self) -> bool:
        """True while an `idle_from_first_step` worker has seen no step in the handoff; the
        idle clock restarts when the first one appears."""
        if self._waiting_for_steps:
            try:
                if not any(self.layout.steps.iterdir()):
                    return True
            except FileNotFoundError:
                return True
            self._waiting_for_steps = False
            self.activity.touch()
            log.info("%s: the first step is open; idle after %g s without work from now",
                     self.worker_id, self.max_idle_s)
        return False

    def _shut_down(self, outcome: Exit, workers: list[threading.Thread]) -> None:
        """Stop the threads, release what is held (at once: running benchmarks are not
        waited for), and write the last heartbeat."""
        self._stop.set()
        released = self.leases.release_all(str(outcome))
        if released:
            log.info("%s: released %d claim(s)", self.worker_id, released)
        else:  # nothing in flight: the threads end at their next look
            for thread in workers:
                thread.join(timeout=1.0)
        self.heartbeat.write("exited", self.leases.names(), str(outcome))

    def _stop_present(self) -> bool:
        try:
            os.stat(self.layout.stop)
        except FileNotFoundError:
            return False
        except OSError as err:  # ESTALE, EIO: look again at the next tick
            self.counts.add("errors")
            log.error("%s: %s", self.worker_id, describe(err, "look for", self.layout.stop))
            return False
        return True

    def _install_signals(self) -> dict[int, Any]:
        if not self.handle_signals or threading.current_thread() is not threading.main_thread():
            return {}
        return {sig: signal.signal(sig, self._on_signal)
                for sig in (signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2, signal.SIGINT)}

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
        """Take a claim, run the workload, answer; back off on errors outside any step."""
        backoff = 0.0
        while not self._stop.is_set():
            try:
                held = self._take()
            except (HandoffError, OSError) as err:  # ESTALE, EIO, read-only, full: back off
                self.counts.add("errors")
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
                self.counts.add("errors")
                log.exception("%s: %s: cannot finish", self.worker_id, held.rid)

    def _take(self) -> Held | None:
        """The next claim, now held and renewed; None when there is none or we stop."""
        with self._claim_lock:
            # a tripped infra watch takes nothing more: the main loop stops the worker next tick
            if self._stop.is_set() or self._quota_reached() or self.infra.tripped():
                return None
            held = self.claimer.next_claim()
            if held is None:
                return None
            if self.leases.hold(held):
                self.activity.touch()
                return held
            # Stopping: release_all may already have run without this claim. Give it back.
            self.leases.release(held, "worker stopping")
            return None

    def _quota_reached(self) -> bool:
        return self.max_requests is not None and self.leases.taken >= self.max_requests

    def _finish(self, held: Held, record: dict[str, Any] | None, error: str) -> None:
        try:
            if self.leases.was_released(held):
                self.counts.add("dropped_after_release")
                return
            self.answers.answer(held, record, error)
        except HandoffError as err:
            # The claim stays; its lease runs out and another worker takes the request over.
            self.counts.add("errors")
            log.error("%s: %s: %s", self.worker_id, held.rid, err)
        finally:
            self.leases.drop(held)
            self.activity.touch()
