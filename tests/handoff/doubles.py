"""Workload doubles for protocol tests: stand-ins for the bench, named as such.

Importable on its own (worker subprocesses load them with `--workload doubles:NAME` and
PYTHONPATH pointing here).
"""

from __future__ import annotations

import os
import random
import time
from typing import Any


def _ok(request: dict[str, Any], reward: float = 1.0) -> dict[str, Any]:
    return {"request_id": request["id"], "status": "ok", "reward": reward}


def noop_workload_double(request: dict[str, Any]) -> dict[str, Any]:
    """Answers at once."""
    return _ok(request)


def sleeping_workload_double(request: dict[str, Any]) -> dict[str, Any]:
    """Sleeps 5-30 ms (or HANDOFF_DOUBLE_SLEEP_S); logs each call if HANDOFF_DOUBLE_LOG is set."""
    _log_call(request)
    fixed = os.environ.get("HANDOFF_DOUBLE_SLEEP_S")
    time.sleep(float(fixed) if fixed else random.uniform(0.005, 0.03))
    return _ok(request, reward=float(len(request["payload"]["completion"])))


def _log_call(request: dict[str, Any]) -> None:
    path = os.environ.get("HANDOFF_DOUBLE_LOG")
    if not path:
        return
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{request['id']} {os.getpid()}\n".encode())
    finally:
        os.close(fd)


class CountingWorkloadDouble:
    """Counts calls per request id; answers ok with reward = len(completion)."""

    def __init__(self, delay_s: float = 0.0) -> None:
        self.delay_s = delay_s
        self.calls: dict[str, int] = {}

    def __call__(self, request: dict[str, Any]) -> dict[str, Any]:
        self.calls[request["id"]] = self.calls.get(request["id"], 0) + 1
        if self.delay_s:
            time.sleep(self.delay_s)
        return _ok(request, reward=float(len(request["payload"]["completion"])))


class FlakyWorkloadDouble(CountingWorkloadDouble):
    """Fails (raises, or returns infra_error) for the first `failures` calls of each id."""

    def __init__(self, failures: int, *, mode: str = "raise") -> None:
        super().__init__()
        self.failures = failures
        self.mode = mode

    def __call__(self, request: dict[str, Any]) -> dict[str, Any]:
        record = super().__call__(request)
        if self.calls[request["id"]] <= self.failures:
            if self.mode == "raise":
                raise OSError("node scratch disk vanished")
            return {"request_id": request["id"], "status": "infra_error", "reward": 0.0,
                    "error": "compiler not found"}
        return record


def broken_harness_double(request: dict[str, Any]) -> dict[str, Any]:
    """A harness bug: every request comes back infra_error (never scored)."""
    return {"request_id": request["id"], "status": "infra_error", "reward": None,
            "reason": "harness error: KeyError: 'gflops'"}


class SometimesBrokenDouble(CountingWorkloadDouble):
    """infra_error for every `every`-th call, ok otherwise."""

    def __init__(self, every: int) -> None:
        super().__init__()
        self.every = every
        self.total = 0

    def __call__(self, request: dict[str, Any]) -> dict[str, Any]:
        record = super().__call__(request)
        self.total += 1
        if self.total % self.every == 0:
            return {"request_id": request["id"], "status": "infra_error", "reward": None,
                    "reason": "node scratch disk full"}
        return record
