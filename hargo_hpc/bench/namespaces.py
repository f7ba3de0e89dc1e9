"""Namespaces for the sandbox (sandbox.py, defences.py): whether this machine can make a private
network or mount namespace (probed once per process, as root or through unprivileged user
namespaces), and the compile's file view: a tmpfs root holding read-only binds of the toolchain
and the build directory read-write, entered with pivot_root.
"""

from __future__ import annotations

import ctypes
import functools
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
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


def _libc():
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


_LIBC = _libc()
_UNSHARE = getattr(_LIBC, "unshare", None)


def unshare(flags: int) -> bool:
    """unshare(2) through libc (in the sandboxed child, before its exec); False on failure."""
    return _UNSHARE is not None and _UNSHARE(flags) == 0


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


def map_ids(uid: int, gid: int) -> None:
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
                        map_ids(uid, gid)
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
class Bind:
    kind: str  # "dir" | "file" (read-only), "dev" (device node), "link" (symlink), "rw" (workdir)
    path: str
    extra: int | str = 0  # locked mount flags, or the symlink's target


def view_plan(view: Sequence[str], workdir: str) -> list[Bind]:
    """What the new root holds: each existing path of `view` (a symlink as a symlink, plus its
    target), without paths inside another bound directory; the devices; `workdir` read-write."""
    plan: list[Bind] = []
    dirs: list[str] = []
    wanted: list[str] = []
    for path in view:
        path = os.path.abspath(path)
        if os.path.islink(path):
            plan.append(Bind("link", path, os.readlink(path)))
            path = os.path.realpath(path)
        wanted.append(path)
    for path in sorted(set(wanted), key=len):
        if any(path == d or path.startswith(d + "/") for d in dirs) or not os.path.exists(path):
            continue
        if os.path.isdir(path):
            dirs.append(path)
            plan.append(Bind("dir", path, _locked_flags(path)))
        else:
            plan.append(Bind("file", path, _locked_flags(path)))
    plan = [b for b in plan if b.kind != "link" or not any(
        b.path == d or b.path.startswith(d + "/") for d in dirs)]
    plan += [Bind("dev", d) for d in DEVICES if os.path.exists(d)]
    plan.append(Bind("rw", os.path.realpath(workdir)))
    return plan


def enter_view(point: str, plan: list[Bind]) -> None:
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

