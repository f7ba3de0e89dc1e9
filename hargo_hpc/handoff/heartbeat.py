"""What a worker reports about itself: its counters and its heartbeat file.

The heartbeat `workers/<worker-id>.<nonce>.json` is rewritten (temp + rename) every
`interval_s`; `hargo handoff status` shows a worker as live while the file is younger than three
intervals plus 2 s. No decision of the protocol depends on it: it is for people.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from typing import Literal

from hargo_hpc.handoff import schema
from hargo_hpc.handoff.atomic import write_atomic
from hargo_hpc.handoff.errors import HandoffError
from hargo_hpc.handoff.layout import Layout

log = logging.getLogger("hargo_hpc.handoff.worker")
SLURM_KEYS = ("SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURM_JOB_ID")


class Counts(Mapping[str, int]):
    """Thread-safe event counters (`claims`, `collisions`, `results`, `errors`, ...); a missing
    key reads as 0."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: Counter[str] = Counter()

    def add(self, key: str, n: int = 1) -> None:
        with self._lock:
            self._values[key] += n

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._values)

    def __getitem__(self, key: str) -> int:
        with self._lock:
            return self._values[key]

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._values

    def __iter__(self) -> Iterator[str]:
        return iter(self.snapshot())

    def __len__(self) -> int:
        with self._lock:
            return len(self._values)

    def __repr__(self) -> str:
        return f"Counts({self.snapshot()})"


class Heartbeat:
    """Writes one worker process's heartbeat file."""

    def __init__(self, layout: Layout, worker_id: str, nonce: str, interval_s: float,
                 counts: Counts, first_infra_error: Callable[[], str] = str) -> None:
        """`first_infra_error()`: the first infra_error message of this worker ('' = none)."""
        self.path = layout.workers / f"{worker_id}.{nonce}.json"
        self.first_infra_error = first_infra_error
        self.worker_id = worker_id
        self.nonce = nonce
        self.interval_s = interval_s
        self.counts = counts
        self.host = socket.gethostname()
        self.started = time.time()

    def write(self, state: Literal["running", "exited"], held: list[str], reason: str = ""
              ) -> None:
        """state `running` or `exited` (with the exit's text); an I/O error is logged only."""
        beat = schema.Heartbeat(
            worker_id=self.worker_id, nonce=self.nonce, host=self.host, pid=os.getpid(),
            slurm={k: os.environ[k] for k in SLURM_KEYS if k in os.environ},
            started_at=self.started, updated_at=time.time(), state=state,
            exit_reason=reason, held=held, counts=self.counts.snapshot(),
            interval_s=self.interval_s, first_infra_error=self.first_infra_error(),
        )
        try:
            write_atomic(self.path, schema.dump(beat), fsync=False)
        except HandoffError as err:
            self.counts.add("errors")
            log.error("%s: heartbeat: %s", self.worker_id, err)
