"""Run one command under the harness's isolation layers, with a wall-clock limit.

`run_sandboxed` runs a compile or a judge run in a fresh directory, its own process group,
a scrubbed environment (`base_env`) and rlimits, plus the namespaces, uid, cgroup and judge
layers this machine allows; each layer is a `defences.Defence`, and the record lists those in
force. What each layer does and stops, and what is reported when one is unavailable:
docs/bench.md, "Sandbox: what each layer stops" (`hargo bench doctor` lists them).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import pwd
import select
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING

from hargo_hpc.bench import namespaces
from hargo_hpc.bench.defences import Job, Limits, Prepared, plan_defences
from hargo_hpc.errors import HargoError

if TYPE_CHECKING:
    from hargo_hpc.bench.cgroups import RunCgroup

__all__ = ["InfraError", "Limits", "Outcome", "base_env", "run_sandboxed", "sandbox_ids"]
SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"


class InfraError(HargoError):
    """The harness or the machine failed (not the policy's fault): status infra_error."""


@dataclass
class Outcome:
    """What happened: exit status or signal, wall time, captured output (capped)."""

    returncode: int | None
    signal: int | None
    timed_out: bool
    wall_s: float
    output: str
    output_bytes: int
    channel: str = ""
    layers: list[str] = field(default_factory=list)
    unavailable: list[str] = field(default_factory=list)


PR_SET_CHILD_SUBREAPER = 36
_SUBREAPER = False


def _become_subreaper() -> None:
    """Make this worker the reaper of its sandboxed descendants (Linux).

    When a process group is killed, members whose parent died first (the driver's kernel process,
    a compiler's cc1) are re-parented.  Without this they go to PID 1, and stay zombies - which
    `kill(-pgid, 0)` still counts - until PID 1 gets round to reaping them.  As subreaper the
    worker reaps them itself in `_kill_group` (waitpid on the group)."""
    global _SUBREAPER
    if _SUBREAPER:
        return
    _SUBREAPER = True
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)



def sandbox_ids(user: str, leased: int | None = None) -> tuple[int, int] | None:
    """(uid, gid) to drop to when running as root: the request's leased uid (`uids.py`, its
    own gid too), else `user`'s; None without root (or without such a user)."""
    if os.geteuid() != 0:
        return None
    if leased is not None:
        return leased, leased
    if not user:
        return None
    try:
        pw = pwd.getpwnam(user)
    except KeyError:
        return None
    return pw.pw_uid, pw.pw_gid



def run_sandboxed(
    argv: Sequence[str],
    workdir: str,
    limits: Limits,
    env: dict[str, str],
    *,
    ids: tuple[int, int] | None = None,
    network: bool = False,
    channel_fd: bool = False,
    output_cap: int = 4096,
    view: Sequence[str] | None = None,
    cgroup: RunCgroup | None = None,
) -> Outcome:
    """Run `argv` in `workdir` under the sandbox's layers (defences.py); never raises for the
    command's behaviour.

    `ids` (uid, gid) to drop to before the exec (None: keep the worker's; the judge keeps it and
    drops its kernel process itself).

    `view`: the host paths the command may see (read-only), besides `workdir` (read-write, at
    its own path) and /dev/null, /dev/zero, /dev/random, /dev/urandom: the `mountns` layer.
    Where no mount namespace can be made, the command sees the whole filesystem and `mountns`
    is listed unavailable. None: no filesystem isolation (the judge).

    stdout and stderr go to `workdir/output.txt` (RLIMIT_FSIZE bounds it); with `channel_fd` the
    file `workdir/channel.txt` is open as fd 3 for the driver's verdict.
    """
    job = Job(workdir, limits, ids, network, view, cgroup)
    defences, unavailable = plan_defences(job)
    prep = Prepared()
    for d in defences:
        d.prepare(job, prep)
    steps = sorted((d for d in defences if d.step), key=lambda d: d.step)
    out_path = os.path.join(workdir, "output.txt")
    chan_path = os.path.join(workdir, "channel.txt")
    out = open(out_path, "wb")  # noqa: SIM115 - closed below
    chan = open(chan_path, "wb") if channel_fd else None  # noqa: SIM115
    chan_fd = chan.fileno() if chan else -1

    def child_setup() -> None:  # runs in the child between fork and exec
        if prep.flags and not namespaces.unshare(prep.flags):
            os._exit(121)
        if chan_fd >= 0:
            if chan_fd == 3:
                os.set_inheritable(3, True)
            else:
                os.dup2(chan_fd, 3, inheritable=True)
        for d in steps:
            d.apply(job, prep)

    _become_subreaper()
    start = time.monotonic()
    try:
        proc = _start(argv, workdir, env, out, channel_fd, child_setup, prep)
    finally:
        out.close()
        if chan:
            chan.close()
        for fd in (prep.err_read, prep.err_write):
            if fd >= 0:
                os.close(fd)
        if prep.point:
            with contextlib.suppress(OSError):
                os.rmdir(prep.point)
    timed_out = not _wait(proc, limits.wall_s)
    _kill_group(proc)
    proc.wait()
    wall = time.monotonic() - start
    rc = proc.returncode
    text, size = _read_capped(out_path, output_cap)
    return Outcome(
        returncode=rc if rc is not None and rc >= 0 else None,
        signal=-rc if rc is not None and rc < 0 else None,
        timed_out=timed_out,
        wall_s=wall,
        output=text,
        output_bytes=size,
        channel=_read_capped(chan_path, 1 << 20, note=False)[0] if channel_fd else "",
        layers=[d.label(job) for d in defences if d.recorded],
        unavailable=unavailable,
    )


def _start(argv: Sequence[str], workdir: str, env: dict[str, str], out: IO[bytes],
           channel_fd: bool, child_setup: Callable[[], None],
           prep: Prepared) -> subprocess.Popen:  # fmt: skip
    """Popen in its own session with `child_setup` between fork and exec; InfraError (with the
    view's own account, when it could not be built) if it does not start."""
    try:
        return subprocess.Popen(
            list(argv),
            cwd=workdir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=child_setup,
            pass_fds=(3,) if channel_fd else (),
            close_fds=True,
        )
    except (OSError, subprocess.SubprocessError) as err:
        why = ""
        if prep.err_write >= 0:
            os.close(prep.err_write)
            prep.err_write = -1
            why = os.read(prep.err_read, 4096).decode("utf-8", "replace")
        raise InfraError(why or (
            f"cannot start {os.path.basename(argv[0])} in the sandbox: {err} (the sandbox user "
            "must be able to traverse the temp dir: set TMPDIR to a world-traversable directory)"
        )) from None


def _read_capped(path: str, cap: int, *, note: bool = True) -> tuple[str, int]:
    """(the first `cap` bytes of `path` as text, with a note of how many more, its size)."""
    size = os.path.getsize(path)
    with open(path, "rb") as fh:
        text = fh.read(cap).decode("utf-8", "replace")
    if note and size > cap:
        text += f"\n[... {size - cap} more bytes]"
    return text, size


def _wait(proc: subprocess.Popen, timeout: float) -> bool:
    """Wait for `proc` to exit, at most `timeout` seconds; True if it exited.

    Uses a pidfd (woken exactly at exit) where the kernel has one: Popen.wait(timeout) polls
    with sleeps of up to 50 ms, which would add that much to every compile and run.
    """
    try:
        pidfd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):
        try:
            proc.wait(timeout=timeout)
            return True
        except subprocess.TimeoutExpired:
            return False
    try:
        ready, _, _ = select.select([pidfd], [], [], timeout)
    finally:
        os.close(pidfd)
    if ready:
        proc.wait()
    return bool(ready)


def _kill_group(proc: subprocess.Popen, grace_s: float = 5.0) -> None:
    """SIGKILL the whole process group, reap the leader, then wait (bounded) until the other
    members are gone: a killed compiler with gigabytes mapped takes a moment to exit."""
    pgid = proc.pid
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
        proc.wait()
        end = time.monotonic() + grace_s
        while time.monotonic() < end:
            _reap_group(pgid)
            os.killpg(pgid, 0)  # raises ProcessLookupError once the group is empty
            time.sleep(0.002)


def _reap_group(pgid: int) -> None:
    """Reap members of the group that were re-parented to this (subreaper) worker."""
    with contextlib.suppress(ChildProcessError, OSError):
        while os.waitpid(-pgid, os.WNOHANG)[0] > 0:
            pass


def base_env(workdir: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The scrubbed environment: nothing from the worker but what is named here."""
    env = {"PATH": SAFE_PATH, "LANG": "C", "LC_ALL": "C", "HOME": workdir, "TMPDIR": workdir}
    env.update(extra or {})
    return env
