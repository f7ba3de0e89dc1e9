"""Fixtures of the handoff tests: a directory, fast settings, in-process workers."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from hargo_hpc.handoff import HandoffSettings, Trainer, Worker

HERE = Path(__file__).parent


@pytest.fixture
def root(tmp_path: Path) -> Path:
    path = tmp_path / "handoff"
    path.mkdir()
    return path


@pytest.fixture
def fast() -> HandoffSettings:
    return HandoffSettings(lease_s=0.6, poll_interval_s=0.02, step_timeout_s=20, max_attempts=3)


def make_requests(n: int, prefix: str = "r") -> list[dict[str, Any]]:
    """n requests of the test kind `double` (the doubles of doubles.py read their payload)."""
    return [
        {"id": f"{prefix}{i:05d}", "kind": "double",
         "payload": {"completion": "x" * (i % 7 + 1), "problem": {"n": 64}, "stage": i % 3}}
        for i in range(n)
    ]


@contextlib.contextmanager
def running_workers(
    root: Path, workload: Callable[[dict[str, Any]], dict[str, Any]],
    settings: HandoffSettings, count: int = 2, **kwargs: Any,
) -> Iterator[list[Worker]]:
    """Workers in threads of this process; stopped (sentinel) and joined on exit."""
    kwargs.setdefault("max_idle_s", 30.0)
    workers = [Worker(root, workload, settings=settings, handle_signals=False, **kwargs)
               for _ in range(count)]
    threads = [threading.Thread(target=w.run, daemon=True) for w in workers]
    for thread in threads:
        thread.start()
    try:
        yield workers
    finally:
        Trainer(root, settings, progress=False).stop("test over")
        for thread in threads:
            thread.join(timeout=10)
        assert not any(t.is_alive() for t in threads), "a worker did not stop"
        Trainer(root, settings, progress=False).clear_stop()
