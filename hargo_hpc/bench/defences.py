"""The sandbox's defences, one small object each: its name in the result record, what it needs,
whether a run asks for it (`wanted`) and this machine allows it (`probe`), what the parent does
before the fork (`prepare`) and what the child does between fork and exec (`apply`, in `step`
order). What each one stops: docs/bench.md, "Sandbox: what each layer stops"; `hargo bench
doctor` prints the table.

The record lists a wanted defence that probes true under its `label`, and one that probes false
under its `missing` line (`sandbox_unavailable`). The judge reports three more defences itself,
on its SANDBOX lines (JUDGE_DEFENCES, `judge_layers`).

The child's order: one unshare(2) with every namespace's flags, the channel fd, then the mount
view (2), the cgroup (3), the rlimits (4) and the uid drop (5, last: it gives up root). The cgroup
is entered before the rlimits lower RLIMIT_NOFILE: the child still holds every descriptor of the
worker until the exec (close_fds acts after preexec_fn), so with 32 or more open in the worker
(a torch process has dozens) the open of cgroup.procs under the judge's limit of 32 fails.
"""

from __future__ import annotations

import os
import resource
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from hargo_hpc.bench import namespaces as ns

if TYPE_CHECKING:
    from hargo_hpc.bench.cgroups import RunCgroup


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


@dataclass(frozen=True)
class Job:
    """One sandboxed command, as the defences see it (run_sandboxed's arguments)."""

    workdir: str
    limits: Limits
    ids: tuple[int, int] | None = None
    network: bool = False
    view: Sequence[str] | None = None
    cgroup: RunCgroup | None = None


@dataclass
class Prepared:
    """What the parent made for one run's child before the fork (run_sandboxed cleans it up)."""

    flags: int = 0  # the namespaces of the child's one unshare(2)
    plan: list[ns.Bind] = field(default_factory=list)  # the mount view
    point: str = ""  # where the view's root is built
    map_ids: tuple[int, int] | None = None  # in a new user namespace: our ids onto themselves
    err_read: int = -1  # a pipe for why the view could not be built
    err_write: int = -1


class Defence:
    """One isolation layer; by default always wanted, always possible, applied by
    run_sandboxed itself (its cwd, session, environment)."""

    name = ""
    needs = "nothing"
    missing = ""  # the sandbox_unavailable line when wanted and not possible ('' = never)
    step = 0  # when `apply` runs in the child (0: nothing to do there)
    recorded = True  # listed in run_sandboxed's layers (False: the caller reports it)

    def wanted(self, job: Job) -> bool:
        return True

    def probe(self) -> bool:
        """Can it apply on this machine (probes are cached per process)."""
        return True

    def label(self, job: Job) -> str:
        return self.name

    def prepare(self, job: Job, prep: Prepared) -> None:
        """In the parent, before the fork."""

    def apply(self, job: Job, prep: Prepared) -> None:
        """In the child, between fork and exec."""


class TempDir(Defence):
    name = "tempdir"  # the caller's fresh directory: the cwd, $HOME and $TMPDIR


class ProcessGroup(Defence):
    name = "pgroup"  # start_new_session; the group is killed at the limit and after the exit


class ScrubbedEnv(Defence):
    name = "env"  # base_env: nothing inherited


class Rlimits(Defence):
    name = "rlimits"
    step = 4

    def apply(self, job: Job, prep: Prepared) -> None:
        lim = job.limits
        for res, value in (
            (resource.RLIMIT_AS, lim.address_space_mb << 20),
            (resource.RLIMIT_CPU, max(1, lim.cpu_s)),
            (resource.RLIMIT_NPROC, lim.processes),
            (resource.RLIMIT_FSIZE, lim.file_size_bytes),
            (resource.RLIMIT_NOFILE, lim.open_files),
            (resource.RLIMIT_STACK, lim.stack_mb << 20),
            (resource.RLIMIT_CORE, 0),
        ):
            resource.setrlimit(res, (value, value))


class Uid(Defence):
    name = "uid"
    needs = "root (the compile; the judge drops its kernel process itself)"
    step = 5

    def wanted(self, job: Job) -> bool:
        return bool(job.ids)

    def label(self, job: Job) -> str:
        return f"uid:{job.ids[0]}" if job.ids else self.name

    def prepare(self, job: Job, prep: Prepared) -> None:
        os.chown(job.workdir, *job.ids)  # the run directory is handed to that user

    def apply(self, job: Job, prep: Prepared) -> None:
        os.setgroups([])
        os.setgid(job.ids[1])
        os.setuid(job.ids[0])


class NetNs(Defence):
    name = "netns"
    needs = "root or unprivileged user namespaces"
    missing = "netns (no namespaces here)"

    def wanted(self, job: Job) -> bool:
        return not job.network

    def probe(self) -> bool:
        return ns.netns_mode() is not None

    def prepare(self, job: Job, prep: Prepared) -> None:
        user = ns.CLONE_NEWUSER if ns.netns_mode() == "userns" else 0
        prep.flags |= ns.CLONE_NEWNET | user


class MountNs(Defence):
    name = "mountns"
    needs = "root or unprivileged user namespaces, pivot_root"
    missing = ("mountns (no mount namespace here: the compiler can read every file the sandbox "
               "user can; only the text checks stop includes)")  # fmt: skip
    step = 2

    def wanted(self, job: Job) -> bool:
        return job.view is not None

    def probe(self) -> bool:
        return ns.mountns_mode() is not None

    def prepare(self, job: Job, prep: Prepared) -> None:
        user = ns.CLONE_NEWUSER if ns.mountns_mode() == "userns" else 0
        prep.flags |= ns.CLONE_NEWNS | user
        if prep.flags & ns.CLONE_NEWUSER:
            prep.map_ids = (os.geteuid(), os.getegid())
        prep.plan = ns.view_plan(job.view or (), job.workdir)
        prep.point = tempfile.mkdtemp(prefix="hargo-root-")
        prep.err_read, prep.err_write = os.pipe()

    def apply(self, job: Job, prep: Prepared) -> None:
        try:
            if prep.map_ids:
                ns.map_ids(*prep.map_ids)
            ns.enter_view(prep.point, prep.plan)
        except BaseException as err:
            os.write(prep.err_write, f"cannot build the compile's file view: {err}".encode())
            raise


class Cgroup(Defence):
    name = "cgroup"  # made by the caller (cgroups.py), which reports it: `cgroup:v<n>` or why not
    needs = "root or a delegated cgroup (pids and cpuset controllers)"
    step = 3
    recorded = False

    def wanted(self, job: Job) -> bool:
        return job.cgroup is not None

    def apply(self, job: Job, prep: Prepared) -> None:
        job.cgroup.enter()  # before the exec: every process of the run is inside it


# in the record's order
DEFENCES: tuple[Defence, ...] = (TempDir(), ProcessGroup(), ScrubbedEnv(), Rlimits(), Uid(),
                                 NetNs(), MountNs(), Cgroup())  # fmt: skip


def register_defence(defence: Defence) -> None:
    """Add a defence of your own after the shipped ones (docs/bench.md, "Adding a defence");
    its `step` orders its `apply` among theirs in the child. A name is taken once."""
    global DEFENCES
    if not defence.name or any(d.name == defence.name for d in DEFENCES):
        raise ValueError(f"defence {defence.name!r}: a name of its own, not one of "
                         f"{', '.join(d.name for d in DEFENCES)}")
    DEFENCES = (*DEFENCES, defence)


def plan_defences(job: Job) -> tuple[list[Defence], list[str]]:
    """(the defences in force for `job`, the missing lines of those it wants and cannot have)."""
    wanted = [d for d in DEFENCES if d.wanted(job)]
    return [d for d in wanted if d.probe()], [d.missing for d in wanted if d.missing and
                                              not d.probe()]  # fmt: skip


@dataclass(frozen=True)
class JudgeDefence:
    """A defence the judge applies in its kernel process and reports as `SANDBOX <fact>=<v>`."""

    name: str
    fact: str  # uid=<n> (-1: the worker's own), seccomp=on|off, rt=on|off
    needs: str
    missing: str

    def layer(self, facts: dict[str, str]) -> tuple[str | None, str | None]:
        """(record label or None, sandbox_unavailable line or None); no fact: neither, except
        for the uid, whose absence means the worker's own."""
        value = facts.get(self.fact)
        if self.fact == "uid":
            on = value not in (None, "-1")
            return (f"uid:{value}", None) if on else (None, self.missing)
        if value == "on":
            return self.name, None
        return None, self.missing if value == "off" else None


JUDGE_DEFENCES = (
    JudgeDefence("uid", "uid", "root (a leased uid per request, uids.py)",
                 "uid (the worker is not root: the kernel keeps its uid)"),
    JudgeDefence("seccomp", "seccomp", "a kernel with seccomp filters",
                 "seccomp (not supported on this machine)"),
    JudgeDefence("rt-priority", "rt", "root or RLIMIT_RTPRIO",
                 "rt-priority (not permitted: other load on the node slows threaded kernels and "
                 "the reference unevenly)"),
)


def judge_layers(facts: dict[str, str]) -> tuple[list[str], list[str]]:
    """The judge's defences in force and missing, from its SANDBOX facts, in JUDGE_DEFENCES'
    order (uid: absent means the worker's own)."""
    pairs = [d.layer(facts) for d in JUDGE_DEFENCES]
    return [a for a, _ in pairs if a], [m for _, m in pairs if m]
