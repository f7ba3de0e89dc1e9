"""Waiting for a condition with a deadline, never a fixed sleep: the tests' one poll loop."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest


def wait_until(condition: Callable[[], Any], timeout: float, what: str | Callable[[], str], *,
               poll: float = 0.2, context: Callable[[], str] | None = None) -> Any:
    """condition()'s first true value, polled every `poll` seconds. After `timeout` seconds the
    test fails naming `what` (a string, or a callable that says it then), followed by
    `context()` when given (the queue, say)."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            said = what if isinstance(what, str) else what()
            extra = f"\n{context()}" if context is not None else ""
            pytest.fail(f"not within {timeout:.0f} s: {said}{extra}")
        time.sleep(poll)
