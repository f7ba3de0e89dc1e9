"""The trainer's progress line: done / running / queued / failed of one step.

A rich progress bar on a terminal; elsewhere (Slurm log files) a plain line every few seconds
and one at the end, so logs stay readable.
"""

from __future__ import annotations

import sys
import time
from typing import IO

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn


class StepProgress:
    """Shows how far one step is; `update` as often as you like, then `close`."""

    def __init__(
        self, step: int, total: int, *, stream: IO[str] | None = None, enabled: bool = True,
        plain_every_s: float = 5.0,
    ) -> None:
        self.step = step
        self.total = total
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.plain_every_s = plain_every_s
        self._last_plain = float("-inf")
        self._last_line = ""
        self._bar: Progress | None = None
        self._task = None
        if enabled and self.stream.isatty():
            console = Console(file=self.stream)
            self._bar = Progress(
                TextColumn(f"step {step}"), BarColumn(), TextColumn("{task.fields[counts]}"),
                TimeElapsedColumn(), console=console, transient=False,
            )
            self._task = self._bar.add_task("step", total=total, counts="")
            self._bar.start()

    @staticmethod
    def line(done: int, running: int, queued: int, failed: int, total: int) -> str:
        return f"{done}/{total} done, {running} running, {queued} queued, {failed} failed"

    def update(self, done: int, running: int, queued: int, failed: int) -> None:
        self._show(done, running, queued, failed, final=False)

    def close(self, done: int, running: int, queued: int, failed: int) -> None:
        self._show(done, running, queued, failed, final=True)

    def _show(self, done: int, running: int, queued: int, failed: int, *, final: bool) -> None:
        """The bar on a terminal; else a plain line every `plain_every_s` and the last one."""
        if not self.enabled:
            return
        text = self.line(done, running, queued, failed, self.total)
        if self._bar is not None and self._task is not None:
            self._bar.update(self._task, completed=done, counts=text)
            if final:
                self._bar.stop()
            return
        now = time.monotonic()
        if text != self._last_line and (final or now - self._last_plain >= self.plain_every_s):
            self._emit(text)
            self._last_plain = now

    def _emit(self, text: str) -> None:
        self._last_line = text
        print(f"handoff step {self.step}: {text}", file=self.stream, flush=True)
