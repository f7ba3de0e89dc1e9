"""Run one command under the harness's isolation layers, with a wall-clock limit.

Layers (each listed in the result record when in force; see docs/bench.md for what each stops):

``tempdir``  a fresh empty directory owned by the run, removed afterwards; the cwd, $HOME, $TMPDIR.
``pgroup``   its own session/process group; the whole group gets SIGKILL at the wall-clock limit
             and again after a normal exit (stragglers).
``env``      a scrubbed environment (PATH, LANG, and what the harness sets; nothing inherited).
``rlimits``  address space, CPU seconds, processes, file size, open files, no core files.
``netns``    a new, empty network namespace (only loopback, down) - needs root or user namespaces.
``uid``      when the worker runs as root: setgroups([]), setgid/setuid to the request's own uid
             (uids.py; the compile) - the judge keeps the worker's uid and drops its kernel
             process to that uid itself; the run directory is handed to that user.
``seccomp``  set by the judge (judge.c) in its kernel process after the fork and the uid drop,
             before the kernel's binary is loaded; the judge, which writes the verdict, never
             maps the kernel's code and shares only the buffers with it.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import pwd
import resource
import select
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"


class InfraError(Exception):
    """The harness or the machine failed (not the policy's fault): status infra_error."""


@dataclass(frozen=True)
class Limits:
    """Resource limits of one sandboxed command."""

    wall_s: float
    cpu_s: int
    address_space_mb: int
    processes: int = 256
    file_size_bytes: int = 64 << 20
    open_files: int = 64
    stack_mb: int = 8


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


def _libc_unshare():
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.unshare
    except (OSError, AttributeError):
        return None


_UNSHARE = _libc_unshare()
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


def probe_netns() -> str | None:
    """Which unshare flags give a private network namespace here (None = not available)."""
    if _UNSHARE is None:
        return None
    for flags, name in ((CLONE_NEWNET, "root"), (CLONE_NEWUSER | CLONE_NEWNET, "userns")):
        if os.geteuid() != 0 and name == "root":
            continue
        try:
            pid = os.fork()
        except OSError:
            return None
        if pid == 0:  # pragma: no cover - child
            os._exit(0 if _UNSHARE(flags) == 0 else 1)
        _, status = os.waitpid(pid, 0)
        if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0:
            return name
    return None


_NETNS: str | bool | None = False  # False = not probed yet


def netns_mode() -> str | None:
    global _NETNS
    if _NETNS is False:
        _NETNS = probe_netns()
    return _NETNS  # type: ignore[return-value]


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
) -> Outcome:
    """Run `argv` in `workdir` under the layers above; never raises for the command's behaviour.

    `ids` (uid, gid) to drop to before the exec (None: keep the worker's; the judge keeps it and
    drops its kernel process itself).

    stdout and stderr go to `workdir/output.txt` (RLIMIT_FSIZE bounds it); with `channel_fd` the
    file `workdir/channel.txt` is open as fd 3 for the driver's verdict.
    """
    layers = ["tempdir", "pgroup", "env", "rlimits"]
    unavailable: list[str] = []
    if ids:
        os.chown(workdir, *ids)
        layers.append(f"uid:{ids[0]}")
    ns = None if network else netns_mode()
    if ns:
        layers.append("netns")
    elif not network:
        unavailable.append("netns (no namespaces here)")

    out_path = os.path.join(workdir, "output.txt")
    chan_path = os.path.join(workdir, "channel.txt")
    out = open(out_path, "wb")  # noqa: SIM115 - closed below
    chan = open(chan_path, "wb") if channel_fd else None  # noqa: SIM115
    chan_fd = chan.fileno() if chan else -1
    flags = {"root": CLONE_NEWNET, "userns": CLONE_NEWUSER | CLONE_NEWNET}.get(ns or "", 0)
    unshare = _UNSHARE

    def child_setup() -> None:  # runs in the child between fork and exec
        if flags and unshare is not None and unshare(flags) != 0:
            os._exit(121)
        for res, value in (
            (resource.RLIMIT_AS, limits.address_space_mb << 20),
            (resource.RLIMIT_CPU, max(1, limits.cpu_s)),
            (resource.RLIMIT_NPROC, limits.processes),
            (resource.RLIMIT_FSIZE, limits.file_size_bytes),
            (resource.RLIMIT_NOFILE, limits.open_files),
            (resource.RLIMIT_STACK, limits.stack_mb << 20),
            (resource.RLIMIT_CORE, 0),
        ):
            resource.setrlimit(res, (value, value))
        if chan_fd >= 0:
            if chan_fd == 3:
                os.set_inheritable(3, True)
            else:
                os.dup2(chan_fd, 3, inheritable=True)
        if ids:
            os.setgroups([])
            os.setgid(ids[1])
            os.setuid(ids[0])

    _become_subreaper()
    start = time.monotonic()
    try:
        proc = subprocess.Popen(
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
        raise InfraError(
            f"cannot start {os.path.basename(argv[0])} in the sandbox: {err} (the sandbox user "
            "must be able to traverse the temp dir: set TMPDIR to a world-traversable directory)"
        ) from None
    finally:
        out.close()
        if chan:
            chan.close()
    timed_out = not _wait(proc, limits.wall_s)
    _kill_group(proc)
    proc.wait()
    wall = time.monotonic() - start
    rc = proc.returncode
    size = os.path.getsize(out_path)
    with open(out_path, "rb") as fh:
        text = fh.read(output_cap).decode("utf-8", "replace")
    if size > output_cap:
        text += f"\n[... {size - output_cap} more bytes]"
    channel = ""
    if channel_fd:
        with open(chan_path, "rb") as fh:
            channel = fh.read(1 << 20).decode("utf-8", "replace")
    return Outcome(
        returncode=rc if rc is not None and rc >= 0 else None,
        signal=-rc if rc is not None and rc < 0 else None,
        timed_out=timed_out,
        wall_s=wall,
        output=text,
        output_bytes=size,
        channel=channel,
        layers=layers,
        unavailable=unavailable,
    )


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
