"""Run one command under the harness's isolation layers, with a wall-clock limit.

Layers (each listed in the result record when in force; see docs/bench.md for what each stops):

``tempdir``  a fresh empty directory owned by the run, removed afterwards; the cwd, $HOME, $TMPDIR.
``pgroup``   its own session/process group; the whole group gets SIGKILL at the wall-clock limit
             and again after a normal exit (stragglers).
``env``      a scrubbed environment (PATH, LANG, and what the harness sets; nothing inherited).
``rlimits``  address space, CPU seconds, processes, file size, open files, no core files.
``netns``    a new, empty network namespace (only loopback, down) - needs root or user namespaces.
``mountns``  (with `view`: the compile) a new mount namespace whose root is an empty tmpfs holding
             read-only bind mounts of just the paths in `view` (the toolchain), a few device nodes
             and `workdir` read-write; the old root is detached (pivot_root), so nothing else of
             the machine's filesystem exists for the command - needs root or user namespaces.
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
import functools
import os
import pwd
import resource
import select
import signal
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from hargo_hpc.errors import HargoError

if TYPE_CHECKING:
    from hargo_hpc.bench.cgroups import RunCgroup

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"
# mount(2) flags
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 1, 2, 4, 8, 32
MS_NOATIME, MS_NODIRATIME, MS_BIND, MS_REC, MS_PRIVATE, MS_RELATIME = (
    1024, 2048, 4096, 16384, 1 << 18, 1 << 21)  # fmt: skip
MNT_DETACH = 2
# flags a bind mount keeps from its source (statvfs f_flag -> mount flag): in a user namespace a
# read-only remount must repeat them ("locked" flags), as root it is harmless
LOCKED_FLAGS = ((os.ST_NOSUID, MS_NOSUID), (os.ST_NODEV, MS_NODEV), (os.ST_NOEXEC, MS_NOEXEC),
                (os.ST_NOATIME, MS_NOATIME), (os.ST_NODIRATIME, MS_NODIRATIME),
                (os.ST_RELATIME, MS_RELATIME))  # fmt: skip
# device nodes every view gets (bound from the host; compilers write /dev/null)
DEVICES = ("/dev/null", "/dev/zero", "/dev/random", "/dev/urandom")
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "riscv64": 41}.get(os.uname().machine)


class InfraError(HargoError):
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


def _libc():
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


_LIBC = _libc()
_UNSHARE = getattr(_LIBC, "unshare", None)
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


@functools.cache
def netns_mode() -> str | None:
    """`probe_netns()`, once per process."""
    return probe_netns()


def _mount(source: str | None, target: str, fstype: str | None, flags: int,
           data: str | None = None) -> None:
    """mount(2) through libc; raises OSError."""
    enc = [x.encode() if x is not None else None for x in (source, target, fstype, data)]
    if _LIBC.mount(enc[0], enc[1], enc[2], ctypes.c_ulong(flags), enc[3]) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {source or ''} on {target}: {os.strerror(err)}")


def _locked_flags(path: str) -> int:
    """The mount flags of `path`'s mount that a read-only remount of a bind must keep."""
    try:
        have = os.statvfs(path).f_flag
    except OSError:
        return 0
    return sum(flag for st, flag in LOCKED_FLAGS if have & st)


def _map_ids(uid: int, gid: int) -> None:
    """In a fresh user namespace: map our own uid/gid onto themselves (no root inside: after
    the exec the command has no capabilities, and files keep their owners)."""
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"),
                       ("gid_map", f"{gid} {gid} 1")):  # fmt: skip
        with open(f"/proc/self/{name}", "w") as fh:
            fh.write(text)


def probe_mountns() -> str | None:
    """How a private mount namespace with a tmpfs root and read-only binds can be made here:
    "root", "userns" (unprivileged user namespaces), or None."""
    if _UNSHARE is None or not hasattr(_LIBC, "mount") or SYS_PIVOT_ROOT is None:
        return None
    root = os.geteuid() == 0
    flags = CLONE_NEWNS if root else CLONE_NEWUSER | CLONE_NEWNS
    uid, gid = os.geteuid(), os.getegid()
    with tempfile.TemporaryDirectory(prefix="hargo-mountns-probe-") as point:
        try:
            pid = os.fork()
        except OSError:
            return None
        if pid == 0:  # pragma: no cover - child
            code = 1
            try:
                if _UNSHARE(flags) == 0:
                    if not root:
                        _map_ids(uid, gid)
                    _mount(None, "/", None, MS_REC | MS_PRIVATE)
                    _mount("tmpfs", point, "tmpfs", MS_NOSUID | MS_NODEV, "size=64k,mode=0755")
                    os.mkdir(os.path.join(point, "usr"))
                    target = os.path.join(point, "usr")
                    _mount("/usr", target, None, MS_BIND | MS_REC)
                    _mount(None, target, None,
                           MS_REMOUNT | MS_BIND | MS_RDONLY | _locked_flags("/usr"))
                    code = 0
            except BaseException:
                code = 1
            os._exit(code)
        _, status = os.waitpid(pid, 0)
    if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0:
        return "root" if root else "userns"
    return None


@functools.cache
def mountns_mode() -> str | None:
    """`probe_mountns()`, once per process."""
    return probe_mountns()


@dataclass(frozen=True)
class _Bind:
    kind: str  # "dir" | "file" (read-only), "dev" (device node), "link" (symlink), "rw" (workdir)
    path: str
    extra: int | str = 0  # locked mount flags, or the symlink's target


def view_plan(view: Sequence[str], workdir: str) -> list[_Bind]:
    """What the new root holds: each existing path of `view` (a symlink as a symlink, plus its
    target), without paths inside another bound directory; the devices; `workdir` read-write."""
    plan: list[_Bind] = []
    dirs: list[str] = []
    wanted: list[str] = []
    for path in view:
        path = os.path.abspath(path)
        if os.path.islink(path):
            plan.append(_Bind("link", path, os.readlink(path)))
            path = os.path.realpath(path)
        wanted.append(path)
    for path in sorted(set(wanted), key=len):
        if any(path == d or path.startswith(d + "/") for d in dirs) or not os.path.exists(path):
            continue
        if os.path.isdir(path):
            dirs.append(path)
            plan.append(_Bind("dir", path, _locked_flags(path)))
        else:
            plan.append(_Bind("file", path, _locked_flags(path)))
    plan = [b for b in plan if b.kind != "link" or not any(
        b.path == d or b.path.startswith(d + "/") for d in dirs)]
    plan += [_Bind("dev", d) for d in DEVICES if os.path.exists(d)]
    plan.append(_Bind("rw", os.path.realpath(workdir)))
    return plan


def _enter_view(point: str, plan: list[_Bind]) -> None:
    """In the child, inside its new mount namespace: build the root on a tmpfs at `point` from
    `plan`, pivot into it and detach the old root; the cwd becomes the workdir."""
    os.umask(0o022)  # the path down to the workdir must be traversable by the dropped uid
    _mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing we mount propagates out
    _mount("tmpfs", point, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,nr_inodes=4096,mode=0755")
    workdir = "/"
    for b in plan:
        target = point + b.path
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if b.kind == "link":
            os.symlink(str(b.extra), target)
            continue
        if b.kind in ("dir", "rw"):
            os.makedirs(target, exist_ok=True)
        else:
            os.close(os.open(target, os.O_WRONLY | os.O_CREAT, 0o644))
        _mount(b.path, target, None, MS_BIND | (MS_REC if b.kind == "dir" else 0))
        if b.kind in ("dir", "file"):
            _mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | int(b.extra))
        if b.kind == "rw":
            workdir = b.path
    os.chdir(point)
    if _LIBC.syscall(SYS_PIVOT_ROOT, b".", b".") != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"pivot_root: {os.strerror(err)}")
    if _LIBC.umount2(b".", MNT_DETACH) != 0:  # the old root, stacked on the new one
        err = ctypes.get_errno()
        raise OSError(err, f"detaching the old root: {os.strerror(err)}")
    os.chdir("/")
    _mount(None, "/", None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
    os.chdir(workdir)


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
    """Run `argv` in `workdir` under the layers above; never raises for the command's behaviour.

    `ids` (uid, gid) to drop to before the exec (None: keep the worker's; the judge keeps it and
    drops its kernel process itself).

    `view`: the host paths the command may see (read-only), besides `workdir` (read-write, at
    its own path) and /dev/null, /dev/zero, /dev/random, /dev/urandom: the `mountns` layer.
    Where no mount namespace can be made, the command sees the whole filesystem and `mountns`
    is listed unavailable. None: no filesystem isolation (the judge).

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
    mns = mountns_mode() if view is not None else None
    plan: list[_Bind] = []
    point = ""
    if mns:
        layers.append("mountns")
        plan = view_plan(view, workdir)
        point = tempfile.mkdtemp(prefix="hargo-root-")
    elif view is not None:
        unavailable.append("mountns (no mount namespace here: the compiler can read every file "
                           "the sandbox user can; only the text checks stop includes)")

    out_path = os.path.join(workdir, "output.txt")
    chan_path = os.path.join(workdir, "channel.txt")
    out = open(out_path, "wb")  # noqa: SIM115 - closed below
    chan = open(chan_path, "wb") if channel_fd else None  # noqa: SIM115
    chan_fd = chan.fileno() if chan else -1
    flags = {"root": CLONE_NEWNET, "userns": CLONE_NEWUSER | CLONE_NEWNET}.get(ns or "", 0)
    if mns:
        flags |= CLONE_NEWNS | (CLONE_NEWUSER if mns == "userns" else 0)
    map_ids = (os.geteuid(), os.getegid()) if flags & CLONE_NEWUSER and mns else None
    unshare = _UNSHARE
    err_read, err_write = os.pipe() if mns else (-1, -1)

    def child_setup() -> None:  # runs in the child between fork and exec
        if flags and unshare is not None and unshare(flags) != 0:
            os._exit(121)
        if mns:
            try:
                if map_ids:
                    _map_ids(*map_ids)
                _enter_view(point, plan)
            except BaseException as err:
                os.write(err_write, f"cannot build the compile's file view: {err}".encode())
                raise
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
        if cgroup is not None:  # before the exec: every process of the run is inside it
            cgroup.enter()
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
        why = ""
        if err_write >= 0:
            os.close(err_write)
            err_write = -1
            why = os.read(err_read, 4096).decode("utf-8", "replace")
        raise InfraError(why or (
            f"cannot start {os.path.basename(argv[0])} in the sandbox: {err} (the sandbox user "
            "must be able to traverse the temp dir: set TMPDIR to a world-traversable directory)"
        )) from None
    finally:
        out.close()
        if chan:
            chan.close()
        for fd in (err_read, err_write):
            if fd >= 0:
                os.close(fd)
        if point:
            with contextlib.suppress(OSError):
                os.rmdir(point)
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
