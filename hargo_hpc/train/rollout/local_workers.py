"""Local bench workers: `hargo worker` processes the trainer starts on its own handoff directory.

Outside Slurm (a laptop, a test, `make local`) nobody else benchmarks the GEMM completions:
`handoff.local_workers = N` makes `hargo train` (and `hargo eval`) start N workers here, watch
them (`check`: a worker gone early is `WorkerDied`, one line) and stop them at the end, with
nothing left behind, not even after the trainer is killed. Under `hargo submit` the bench
worker array does that job and the field is 0. How each step works: docs/rewards.md, "Local
workers".
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import psutil
import tomli_w

from hargo_hpc.errors import HargoError
from hargo_hpc.handoff.errors import HandoffError
from hargo_hpc.handoff.settings import HandoffSettings
from hargo_hpc.handoff.status import live_workers
from hargo_hpc.handoff.trainer import Trainer

log = logging.getLogger("hargo_hpc.train.rollout.local_workers")

# Local workers live as long as the trainer, which stops them: they must not leave on their own
# during a long generation phase (the default `handoff.worker_max_idle_s` is 600 s).
DEFAULT_MAX_IDLE_S = 86400.0
STOP_TIMEOUT_S = 20.0  # after the stop sentinel, before SIGTERM
TERM_TIMEOUT_S = 10.0  # after SIGTERM, before SIGKILL
KILL_TIMEOUT_S = 10.0  # after SIGKILL: only a process stuck in the kernel takes this long
_TICK_S = 0.02

# `python -c BOOTSTRAP <trainer pid> worker ...`: ask for SIGTERM when the trainer dies, then
# run the `hargo` command line. Inline (not a module of this package) so that a worker never
# imports more than `hargo worker` does.
BOOTSTRAP = """\
import os, signal, sys
if sys.platform.startswith("linux"):
    import ctypes
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
if os.getppid() != int(sys.argv[1]):
    sys.exit("hargo worker: the trainer that started it is already gone")
from hargo_hpc.cli import main
main(args=sys.argv[2:], prog_name="hargo")
"""


class WorkerDied(HargoError, RuntimeError):
    """A local bench worker exited before the trainer stopped it (one line)."""


@dataclass
class _Child:
    index: int
    proc: subprocess.Popen[bytes]
    log_path: Path
    descendants: list[psutil.Process] = field(default_factory=list)

    @property
    def pid(self) -> int:
        return self.proc.pid


class LocalWorkers:
    """`count` local `hargo worker` processes on `handoff_dir`; a context manager.

    `args` are extra `hargo worker` options (e.g. `["--threads", "2"]`), placed last so they
    win over the defaults here. `bench` / `handoff`: the settings the workers run with, written
    as the `[bench]` and `[handoff]` sections of `<log dir>/worker-config.toml` and passed as
    `--config` (None: the worker's defaults, or whatever `--config` `args` name). `log_dir`:
    where the logs go (default `<handoff_dir>/logs`). `max_idle_s`: the workers' `--max-idle`.
    `log`: where the one line saying they started goes (besides the logging record).
    """

    def __init__(
        self,
        handoff_dir: str | Path,
        count: int,
        *,
        args: Sequence[str] = (),
        log_dir: str | Path | None = None,
        bench: Any = None,
        handoff: HandoffSettings | None = None,
        max_idle_s: float = DEFAULT_MAX_IDLE_S,
        stop_timeout_s: float = STOP_TIMEOUT_S,
        term_timeout_s: float = TERM_TIMEOUT_S,
        log: Callable[[str], object] | None = None,
    ) -> None:
        if count < 0:
            raise ValueError(f"local workers: count must be >= 0, got {count}")
        if isinstance(args, str):
            raise ValueError("local workers: args must be a list of options, not one string")
        self.handoff_dir = Path(handoff_dir)
        self.count = count
        self.args = [str(a) for a in args]
        self.log_dir = Path(log_dir) if log_dir is not None else self.handoff_dir / "logs"
        self.bench = bench
        self.handoff = handoff
        self.max_idle_s = max_idle_s
        self.stop_timeout_s = stop_timeout_s
        self.term_timeout_s = term_timeout_s
        self.announce = log
        self._children: list[_Child] = []
        self._stopping = False

    # ------------------------------------------------------------------ start

    def __enter__(self) -> LocalWorkers:
        self.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop("trainer finished" if kind is None else f"trainer failed: {kind.__name__}")

    @property
    def pids(self) -> list[int]:
        return [child.pid for child in self._children]

    @property
    def logs(self) -> list[Path]:
        return [child.log_path for child in self._children]

    def _worker_argv(self) -> list[str]:
        """`hargo worker` and its options (after the bootstrap's trainer pid)."""
        config = ["--config", str(self._write_config())] if self._has_config() else []
        return ["worker", "--handoff", str(self.handoff_dir), *config,
                "--max-idle", f"{self.max_idle_s:g}", *self.args]  # fmt: skip

    def start(self) -> None:
        """Clear a stale stop sentinel and start the workers (does not wait for them)."""
        if self._children:
            raise RuntimeError("local workers are already started")
        if self.count == 0:
            if self.announce is not None and not live_workers(self.handoff_dir):
                self.announce(
                    f"no bench worker serves {self.handoff_dir} yet and none is started here "
                    "(0 local workers): its requests wait for one (a submission's bench array, "
                    f"or `hargo worker --handoff {self.handoff_dir}`)")
            return
        try:
            self.handoff_dir.mkdir(parents=True, exist_ok=True)
            self.log_dir.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise HandoffError(f"local workers: cannot create {err.filename}: "
                               f"{err.strerror}") from None  # fmt: skip
        others = live_workers(self.handoff_dir)
        if others:  # a submission's bench array: the stop sentinel at our end would end it
            raise HandoffError(
                f"local workers: {self.handoff_dir} is served by {len(others)} live worker(s) "
                f"already ({', '.join(w.worker_id for w in others[:3])}), a submission's bench "
                "array perhaps, which this run's stop sentinel would end: start no local "
                "workers (--local-workers 0); they serve it")
        trainer = Trainer(self.handoff_dir, self.handoff, progress=False)
        trainer.clear_stop()  # left by an earlier run: it would stop the new workers at once
        argv = [sys.executable, "-c", BOOTSTRAP, str(os.getpid()), *self._worker_argv()]
        self._stopping = False
        try:
            for index in range(self.count):
                self._children.append(self._spawn(index, argv))
        except BaseException:
            self.stop("start failed")
            raise
        log.info("started %d local bench worker(s), pids %s, logs in %s", self.count,
                 " ".join(map(str, self.pids)), self.log_dir)  # fmt: skip
        if self.announce is not None:
            self.announce(f"started {self.count} local bench worker(s) on {self.handoff_dir} "
                          f"(logs in {self.log_dir})")

    def _has_config(self) -> bool:
        return self.bench is not None or self.handoff is not None

    def _write_config(self) -> Path:
        """`[bench]` and `[handoff]` of the workers' experiment file (the rest: defaults)."""
        sections = {}
        if self.bench is not None:
            sections["bench"] = self.bench.model_dump(mode="json", exclude_none=True)
        if self.handoff is not None:
            sections["handoff"] = self.handoff.model_dump(mode="json", exclude_none=True)
        path = self.log_dir / "worker-config.toml"
        self.log_dir.mkdir(parents=True, exist_ok=True)
        path.write_text(tomli_w.dumps(sections), encoding="utf-8")
        return path

    def _spawn(self, index: int, argv: list[str]) -> _Child:
        path = self.log_dir / f"worker-{index}.log"
        with open(path, "ab") as log_file:  # the child keeps its own descriptor
            log_file.write(f"--- hargo worker {index}, started by trainer pid {os.getpid()} at "
                           f"{time.strftime('%Y-%m-%d %H:%M:%S')}\n".encode())  # fmt: skip
            log_file.flush()
            try:
                proc = subprocess.Popen(
                    argv, stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT,
                    process_group=0, close_fds=True,
                )
            except OSError as err:
                raise HandoffError(f"local worker {index}: cannot start {argv[0]}: "
                                   f"{err.strerror or err}") from None  # fmt: skip
        return _Child(index, proc, path)

    # ------------------------------------------------------------------ health

    def check(self, during: str = "") -> None:
        """Raise `WorkerDied` for the first worker that has exited (`during`: what was going
        on, for the message). Does not reap it: `stop` does."""
        if self._stopping:
            return
        for child in self._children:
            status = _exit_status(child.pid)
            if status is None:
                continue
            where = f" {during}" if during else ""
            raise WorkerDied(
                f"local bench worker {child.index} (pid {child.pid}) exited{where} with "
                f"{_describe_status(status)}: {_last_line(child.log_path) or '(empty log)'} "
                f"(log: {child.log_path})"
            )

    def alive(self) -> int:
        """How many workers are still running."""
        return sum(_exit_status(child.pid) is None for child in self._children)

    # ------------------------------------------------------------------ stop

    def stop(self, reason: str = "trainer finished") -> None:
        """Sentinel, then SIGTERM, then SIGKILL, each after a deadline; then kill what they
        left behind and reap every worker. Safe to call twice."""
        if not self._children:
            return
        self._stopping = True
        children, self._children = self._children, []
        try:
            for child in children:
                child.descendants = _descendants(child.pid)
            running = [c for c in children if _exit_status(c.pid) is None]
            if running:
                patience = self.stop_timeout_s
                try:
                    Trainer(self.handoff_dir, self.handoff, progress=False).stop(reason)
                except (HandoffError, OSError) as err:
                    log.warning("local workers: no stop sentinel (%s); sending SIGTERM", err)
                    patience = 0.0
                running = _wait_exit(running, patience)
            for sig, timeout in ((signal.SIGTERM, self.term_timeout_s),
                                 (signal.SIGKILL, KILL_TIMEOUT_S)):  # fmt: skip
                if not running:
                    break
                log.warning("local workers: %d still running; sending %s", len(running),
                            sig.name)  # fmt: skip
                for child in running:
                    _signal_group(child.pid, sig)
                running = _wait_exit(running, timeout)
            for child in running:
                log.error("local worker %d (pid %d) survives SIGKILL", child.index, child.pid)
        finally:
            for child in children:
                self._reap(child)

    @staticmethod
    def _reap(child: _Child) -> None:
        """Kill what is left of the worker's process group (while its exited leader still
        holds the group id) and of its descendants, then reap the worker."""
        if _exit_status(child.pid) is not None:
            _signal_group(child.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.proc.wait(timeout=KILL_TIMEOUT_S)
        left = [p for p in child.descendants if p.is_running()]
        for proc in left:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        if left:
            psutil.wait_procs(left, timeout=KILL_TIMEOUT_S)


def _exit_status(pid: int) -> int | None:
    """The wait status of child `pid` once it has exited, without reaping it (so that its
    process group id stays reserved); None while it runs. Status 0 when something else reaped
    it already (its status is lost then)."""
    try:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return 0
    if info is None or info.si_pid == 0:
        return None
    if info.si_code == os.CLD_EXITED:
        return info.si_status
    return -info.si_status  # killed or dumped: minus the signal number, as Popen reports


def _describe_status(status: int) -> str:
    if status < 0:
        with contextlib.suppress(ValueError):
            return f"signal {signal.Signals(-status).name}"
        return f"signal {-status}"
    return f"status {status}"


def _wait_exit(children: list[_Child], timeout: float) -> list[_Child]:
    """Wait until every child has exited or `timeout` passed; the ones still running."""
    deadline = time.monotonic() + timeout
    while True:
        running = [c for c in children if _exit_status(c.pid) is None]
        left = deadline - time.monotonic()
        if not running or left <= 0:
            return running
        time.sleep(min(_TICK_S, left))


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def _last_line(path: Path, tail: int = 4096) -> str:
    """The last non-empty line of a log (at most 300 characters), '' when there is none."""
    try:
        with open(path, "rb") as fh:
            fh.seek(max(0, os.path.getsize(path) - tail))
            text = fh.read().decode("utf-8", "replace")
    except OSError:
        return ""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""
