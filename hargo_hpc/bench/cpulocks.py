"""One timed run at a time per CPU: a run holds a lock for every CPU it may use.

Timed runs that share a CPU would slow each other (and the reference and the kernel unevenly:
a neighbour's spinning threads at the same priority preempt for whole time slices), so a run
takes `flock` on `<lock dir>/cpu<N>` for each CPU of the worker's affinity mask, in increasing
order (no deadlock), and releases them when it ends. Runs on disjoint CPUs (Slurm jobs with
their own cores) proceed in parallel; compiles never wait. The lock dir is node-local shared
memory (`/dev/shm/hargo-cpus`, `$HARGO_CPU_LOCK_DIR` overrides it); flock is fine there.
A killed holder's locks are released by the kernel with its file descriptors.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from hargo_hpc.bench.sandbox import InfraError


def lock_dir() -> Path:
    if os.environ.get("HARGO_CPU_LOCK_DIR"):
        path = Path(os.environ["HARGO_CPU_LOCK_DIR"])
    else:
        base = Path("/dev/shm") if os.access("/dev/shm", os.W_OK) else Path(tempfile.gettempdir())
        path = base / "hargo-cpus"
    path.mkdir(mode=0o777, parents=True, exist_ok=True)
    return path


@contextlib.contextmanager
def cpus_held(cpus: set[int], timeout_s: float) -> Iterator[float]:
    """Hold the locks of `cpus` for the `with` block; yields the seconds spent waiting.
    InfraError when they are not all free within `timeout_s`."""
    directory = lock_dir()
    start = time.monotonic()
    fds: list[int] = []
    try:
        for cpu in sorted(cpus):
            fd = os.open(directory / f"cpu{cpu}", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
            fds.append(fd)
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() - start > timeout_s:
                        raise InfraError(f"CPU {cpu} stayed busy with another timed run for "
                                         f"{timeout_s:.0f} s") from None  # fmt: skip
                    time.sleep(0.002)
        yield time.monotonic() - start
    finally:
        for fd in fds:
            os.close(fd)  # closing releases the lock
