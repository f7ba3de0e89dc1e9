"""Where this process sits in the job (rank, world size, local rank, the rendezvous address)
and how ranks agree.

`detect` reads the standard variables (torchrun, the deepspeed launcher), else Slurm's (srun,
submitit), else takes one process on a free local port; `init` / `teardown` create and end the
process group, `end_process` ends a process whose group's threads outlive it; the gather
helpers give every rank everyone's values in rank order, so all compute the same batch
statistics. The rules and why: docs/engine.md, "Where a process sits".
"""

from __future__ import annotations

import atexit
import contextlib
import datetime
import os
import socket
import sys
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import torch
import torch.distributed as dist

from hargo_hpc.errors import HargoError

Source = Literal["env", "slurm", "single"]
T = TypeVar("T")

STANDARD = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


class DistributedError(HargoError, ValueError):
    """The environment names an impossible or incomplete distributed setup (one line)."""


@dataclass(frozen=True)
class DistEnv:
    rank: int
    world_size: int
    local_rank: int
    master_addr: str
    master_port: int
    source: Source = "single"

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def export(self, environ: dict[str, str] | None = None, visible: int | None = None) -> None:
        """Set RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT in `environ` (os.environ).

        LOCAL_RANK is what DeepSpeed passes to `set_device`, so it is written as this rank's
        device among the `visible` ones (`device_index`; default: the accelerator's count,
        none on the CPU): under one-GPU-per-task binding rank 1 of a node sees one device, 0."""
        target = os.environ if environ is None else environ
        visible = visible_devices() if visible is None else visible
        target.update(
            RANK=str(self.rank), WORLD_SIZE=str(self.world_size),
            LOCAL_RANK=str(device_index(self.local_rank, visible)),
            MASTER_ADDR=self.master_addr, MASTER_PORT=str(self.master_port),
        )


def visible_devices() -> int:
    """How many accelerator devices this process sees (0 on the CPU). Slurm's binding decides
    it: `--gpus-per-task=1` or `--gpu-bind=single:1` leaves one per task, a plain
    `--gres=gpu:N` all N of the node (CUDA_VISIBLE_DEVICES)."""
    accelerator = getattr(torch, "accelerator", None)  # torch >= 2.6
    return int(accelerator.device_count()) if accelerator and accelerator.is_available() else 0


def job_device() -> torch.device:
    """Where a one-process job (`hargo eval`, the SFT sample check) computes: the accelerator's
    current device when one is visible (the job's GPU), else the CPU."""
    if visible_devices():
        return torch.device(torch.accelerator.current_accelerator().type,
                            torch.accelerator.current_device_index())
    return torch.device("cpu")


def device_index(local_rank: int, visible: int) -> int:
    """The device of the rank with node-local rank `local_rank` when it sees `visible` devices:
    `local_rank mod visible` (its own device when every device of the node is visible and
    there is one per rank; device 0 when binding leaves it one), `local_rank` itself when it
    sees none (the CPU, where the index names no device)."""
    return local_rank % visible if visible > 0 else local_rank


# One process listens on port 0: the kernel picks a free port as the store binds it. A port
# found free beforehand (`free_port`) can be taken by anyone before the bind (EADDRINUSE, seen
# when a bench worker and an evaluation started beside the trainer).
SINGLE_PORT = 0


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now (the kernel's pick for port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _int(environ: Mapping[str, str], name: str) -> int:
    raw = environ[name]
    try:
        return int(raw)
    except ValueError:
        raise DistributedError(f"{name}={raw!r} is not an integer") from None


def _from_standard(environ: Mapping[str, str]) -> DistEnv:
    rank, world = _int(environ, "RANK"), _int(environ, "WORLD_SIZE")
    if world < 1 or not 0 <= rank < world:
        raise DistributedError(f"RANK={rank} with WORLD_SIZE={world}: need 0 <= RANK < WORLD_SIZE")
    if world > 1:
        missing = [n for n in ("LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT") if not environ.get(n)]
        if missing:
            raise DistributedError(
                f"RANK and WORLD_SIZE={world} are set but {', '.join(missing)} not"
            )
    step_tasks = environ.get("SLURM_STEP_NUM_TASKS")
    if environ.get("SLURM_STEP_ID") is not None and step_tasks and step_tasks.isdigit() \
            and world < int(step_tasks):
        raise DistributedError(
            f"WORLD_SIZE={world} but this Slurm step runs {step_tasks} tasks: RANK and "
            "WORLD_SIZE were inherited from the shell that submitted the job; unset "
            f"{', '.join(STANDARD)} there"
        )
    local = _int(environ, "LOCAL_RANK") if environ.get("LOCAL_RANK") else 0
    port = (_int(environ, "MASTER_PORT") if environ.get("MASTER_PORT")
            else SINGLE_PORT if world == 1 else free_port())
    addr = environ.get("MASTER_ADDR") or "127.0.0.1"
    return DistEnv(rank, world, local, addr, port, "env")


@contextlib.contextmanager
def _submitit_sees_slurm() -> Iterator[None]:
    """SUBMITIT_EXECUTOR=slurm for the duration (submitit's own jobs already have it)."""
    before = os.environ.get("SUBMITIT_EXECUTOR")
    os.environ["SUBMITIT_EXECUTOR"] = "slurm"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("SUBMITIT_EXECUTOR", None)
        else:
            os.environ["SUBMITIT_EXECUTOR"] = before


def _from_slurm(environ: Mapping[str, str]) -> DistEnv:
    from submitit.helpers import TorchDistributedEnvironment

    tasks = _int(environ, "SLURM_NTASKS")
    if tasks > 1 and environ.get("SLURM_STEP_ID") is None:
        raise DistributedError(
            f"SLURM_NTASKS={tasks} but this is the batch step, one process (no SLURM_STEP_ID): "
            "launch the trainer with srun, one task per rank"
        )

    with _submitit_sees_slurm():
        try:
            slurm = TorchDistributedEnvironment()
        except (KeyError, ValueError, RuntimeError) as err:
            raise DistributedError(f"cannot read the Slurm task environment: {err}") from None
    # One node: the rendezvous stays on the loopback (a node name need not resolve there).
    one_node = environ.get("SLURM_JOB_NUM_NODES", environ.get("SLURM_NNODES", "")) == "1"
    # One task meets nobody: the kernel picks its store's port (a port drawn from the job id
    # can be some other process's ephemeral port at that moment: EADDRINUSE, a failed task)
    world = int(slurm.world_size)
    return DistEnv(
        int(slurm.rank), world, int(slurm.local_rank),
        "127.0.0.1" if one_node else str(slurm.master_addr),
        SINGLE_PORT if world == 1 else int(slurm.master_port), "slurm",
    )


def detect(environ: Mapping[str, str] | None = None) -> DistEnv:
    """This process's place: standard variables, else Slurm's, else one process (module doc).

    `environ` defaults to os.environ; the Slurm path always reads os.environ (submitit does).
    """
    env = os.environ if environ is None else environ
    if env.get("RANK") is not None and env.get("WORLD_SIZE") is not None:
        return _from_standard(env)
    if env.get("RANK") is not None or env.get("WORLD_SIZE") is not None:
        raise DistributedError("set both RANK and WORLD_SIZE, or neither")
    if env.get("SLURM_PROCID") is not None and env.get("SLURM_NTASKS") is not None:
        return _from_slurm(env)
    return DistEnv(0, 1, 0, "127.0.0.1", SINGLE_PORT, "single")


# What a collective may wait beyond the reward wait: one step's generation, update and
# checkpoint on the slowest rank (generous; a hung job still ends, just later).
GROUP_MARGIN_S = 1800.0
# torch's own default for a process group's collectives (NCCL's is 10 min).
DEFAULT_GROUP_TIMEOUT_S = 1800.0


def group_timeout_s(reward_wait_s: float | None) -> float:
    """How long a collective waits for the other ranks before the job fails: while rank 0
    waits up to `reward_wait_s` for the bench (handoff.step_timeout_s), ranks >= 1 wait in a
    broadcast, so the group's timeout is that wait plus GROUP_MARGIN_S; torch's default
    (DEFAULT_GROUP_TIMEOUT_S) when nothing waits for the bench (None: SFT, text tasks)."""
    if reward_wait_s is None:
        return DEFAULT_GROUP_TIMEOUT_S
    return float(reward_wait_s) + GROUP_MARGIN_S


def init(env: DistEnv | None = None, *, backend: str | None = None,
         timeout_s: float = DEFAULT_GROUP_TIMEOUT_S) -> DistEnv:
    """Export `env` (default: `detect()`) and create the default process group if none exists,
    its collectives failing after `timeout_s` (`group_timeout_s`).

    backend None lets torch pick per device type (gloo for CPU, NCCL for CUDA). With an
    accelerator (torch.accelerator) the current device is `device_index` of the local rank.
    DeepSpeed's `initialize` later finds the group and uses it.
    """
    env = detect() if env is None else env
    visible = visible_devices()
    env.export(visible=visible)
    if visible:  # the device before any collective (NCCL objects go to the current one)
        torch.accelerator.set_device_index(device_index(env.local_rank, visible))
    if not dist.is_initialized():
        dist.init_process_group(backend=backend, rank=env.rank, world_size=env.world_size,
                                timeout=datetime.timedelta(seconds=timeout_s))
    return env


def teardown() -> None:
    """Barrier, then destroy the process group (a no-op without one)."""
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


# How torch's process groups name their worker threads (gloo's loops, NCCL's watchdog).
GROUP_THREAD_PREFIXES = ("pt_gloo", "gloo_", "pt_nccl")


def group_threads() -> list[str]:
    """The names of this process's threads that serve torch's process groups, from Linux's
    /proc (none elsewhere)."""
    names = []
    with contextlib.suppress(OSError):
        for task in os.listdir("/proc/self/task"):
            with contextlib.suppress(OSError), open(f"/proc/self/task/{task}/comm") as comm:
                names.append(comm.read().strip())
    return [name for name in names if name.startswith(GROUP_THREAD_PREFIXES)]


def end_process(status: int | str | None) -> None:
    """End the process with `status` (as `sys.exit` takes it) without Python's finalization
    while threads of a process group still run; return otherwise (the caller exits as usual).

    `destroy_process_group` leaves a group's threads running while anything still holds the
    group: DeepSpeed does (a module global, and engines that its gradient hooks keep alive
    until finalization). A group thread that takes the GIL while the interpreter finalizes is
    ended by `pthread_exit` through a C++ frame that may not unwind, and the process aborts
    ("terminate called without an active exception", status -6) after a run that succeeded:
    one rank of a four-rank Slurm job in the suite did. The ordinary end's own steps are
    kept: non-daemon threads joined, atexit handlers run, the standard streams flushed."""
    if not group_threads():
        return
    for thread in threading.enumerate():
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join()
    if status is None:
        code = 0
    elif isinstance(status, int):
        code = status
    else:
        print(status, file=sys.stderr)
        code = 1
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def _active() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def rank() -> int:
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def world_size() -> int:
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def is_main() -> bool:
    """Rank 0 (or no process group): the one that writes metrics and talks to the handoff."""
    return rank() == 0


def barrier() -> None:
    if _active():
        dist.barrier()


def gather_objects(obj: T) -> list[T]:
    """Every rank's `obj`, in rank order, on every rank (picklable objects)."""
    if not _active():
        return [obj]
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def gather_floats(values: list[float]) -> list[float]:
    """Concatenation of every rank's `values` in rank order, on every rank.

    Ranks may contribute lists of different lengths (e.g. after dropped records).
    """
    return [float(v) for part in gather_objects([float(v) for v in values]) for v in part]


def sum_across_ranks(value: float) -> float:
    """Σ_r value_r on every rank (e.g. the global token count of a batch, for the loss
    denominators), added in rank order so every rank gets the same float."""
    return float(sum(float(v) for v in gather_objects(float(value))))


def broadcast_object(obj: T, src: int = 0) -> T:
    """Rank `src`'s `obj` on every rank."""
    if not _active():
        return obj
    box: list[Any] = [obj]
    dist.broadcast_object_list(box, src=src)
    return box[0]
