"""Where a process sits in the job: standard variables, Slurm's (through submitit), or alone;
the one-process behaviour of the gather helpers (two ranks: test_engine's torchrun test)."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from hargo_hpc.train.backend import distributed
from hargo_hpc.train.backend.distributed import DistEnv, DistributedError, detect

TORCHRUN = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "MASTER_ADDR": "node7",
            "MASTER_PORT": "29511"}
SLURM = {"SLURM_JOB_ID": "4242", "SLURM_PROCID": "3", "SLURM_NTASKS": "4", "SLURM_LOCALID": "1",
         "SLURM_JOB_NUM_NODES": "2", "SLURM_NODEID": "1", "SLURM_STEP_ID": "0",
         "SLURM_JOB_NODELIST": "gpu[03-04]"}


def test_standard_variables() -> None:
    env = detect(TORCHRUN)
    assert env == DistEnv(1, 2, 1, "node7", 29511, "env")
    assert not env.is_main
    exported: dict[str, str] = {}
    env.export(exported)
    assert exported == TORCHRUN


@pytest.mark.parametrize(("local_rank", "visible", "device"), [
    (3, 8, 3),   # --gres=gpu:8, 8 tasks a node: every GPU visible, one per rank
    (1, 1, 0),   # --gpus-per-task=1 / --gpu-bind=single:1: each task sees only its own
    (5, 4, 1),   # two ranks per GPU
    (1, 0, 1),   # the CPU: no device, the index stays the local rank
])
def test_device_index_follows_the_visible_devices(local_rank: int, visible: int,
                                                  device: int) -> None:
    assert distributed.device_index(local_rank, visible) == device


def test_local_rank_is_exported_as_the_device_deepspeed_selects() -> None:
    """DeepSpeed calls set_device(LOCAL_RANK): with one GPU bound to the task, rank 1 of the
    node must ask for device 0, not 1 (which does not exist in its view)."""
    exported: dict[str, str] = {}
    detect(TORCHRUN).export(exported, visible=1)
    assert exported["LOCAL_RANK"] == "0" and exported["RANK"] == "1"
    exported.clear()
    detect(TORCHRUN).export(exported, visible=8)
    assert exported["LOCAL_RANK"] == "1"


def test_the_group_outwaits_rank_0s_wait_for_the_bench() -> None:
    """Ranks >= 1 sit in a broadcast while rank 0 waits up to handoff.step_timeout_s for the
    bench: the group's timeout is that wait plus the margin; torch's default without one."""
    assert distributed.group_timeout_s(None) == distributed.DEFAULT_GROUP_TIMEOUT_S == 1800.0
    assert distributed.group_timeout_s(900.0) == 900.0 + distributed.GROUP_MARGIN_S
    assert distributed.group_timeout_s(7200.0) == 7200.0 + distributed.GROUP_MARGIN_S


def test_init_gives_the_process_group_its_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, object] = {}
    monkeypatch.setattr(os, "environ", dict(os.environ))  # init exports RANK, WORLD_SIZE, ...
    monkeypatch.setattr(distributed.dist, "is_initialized", lambda: False)
    monkeypatch.setattr(distributed.dist, "init_process_group",  # a recording test double
                        lambda **kwargs: seen.update(kwargs))
    distributed.init(DistEnv(0, 2, 0, "127.0.0.1", 29500, "env"), timeout_s=2700.0)
    assert seen["timeout"].total_seconds() == 2700.0  # type: ignore[attr-defined]
    assert (seen["rank"], seen["world_size"]) == (0, 2)
    assert os.environ["WORLD_SIZE"] == "2"  # the copy; the suite's own environment is untouched


def test_a_launcher_inside_a_slurm_step_keeps_its_world() -> None:
    # torchrun on each of 2 srun tasks, 4 ranks a task: the launcher's world is the larger
    inside = {"SLURM_STEP_ID": "0", "SLURM_STEP_NUM_TASKS": "2", "RANK": "5", "WORLD_SIZE": "8",
              "LOCAL_RANK": "1", "MASTER_ADDR": "node1", "MASTER_PORT": "29500"}
    env = detect(inside)
    assert (env.rank, env.world_size, env.source) == (5, 8, "env")


def test_one_process_when_nothing_is_set() -> None:
    env = detect({})
    assert (env.rank, env.world_size, env.local_rank, env.master_addr) == (0, 1, 0, "127.0.0.1")
    # port 0: the store binds a port the kernel picks then (one found free earlier could be
    # taken before the bind: EADDRINUSE under a busy suite)
    assert env.source == "single" and env.is_main and env.master_port == 0
    alone = detect({"RANK": "0", "WORLD_SIZE": "1"})  # a one-rank torchrun-like setting
    assert (alone.rank, alone.world_size, alone.master_addr, alone.source, alone.master_port) == (
        0, 1, "127.0.0.1", "env", 0)


@pytest.mark.parametrize(
    ("environ", "match"),
    [({"RANK": "0"}, "set both RANK and WORLD_SIZE"),
     ({"RANK": "2", "WORLD_SIZE": "2"}, "need 0 <= RANK < WORLD_SIZE"),
     ({"RANK": "x", "WORLD_SIZE": "2"}, "RANK='x' is not an integer"),
     ({"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0"}, "MASTER_ADDR, MASTER_PORT not"),
     ({**SLURM, "SLURM_STEP_ID": None}, "SLURM_NTASKS=4 but this is the batch step"),
     # a submitting shell's launcher variables reach every task of the job (sbatch exports
     # the environment): each would train alone, all into one run directory
     ({**SLURM, "SLURM_STEP_NUM_TASKS": "4", "RANK": "0", "WORLD_SIZE": "1"},
      "WORLD_SIZE=1 but this Slurm step runs 4 tasks: RANK and WORLD_SIZE were inherited")],
)
def test_incomplete_settings_are_refused(
    environ: dict[str, str | None], match: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in environ.items():
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    for name in set(distributed.STANDARD) - environ.keys():
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(DistributedError, match=match) as refused:
        detect({k: v for k, v in environ.items() if v is not None})
    assert "\n" not in str(refused.value)


def _slurm_env(monkeypatch: pytest.MonkeyPatch, **extra: str) -> None:
    for name in distributed.STANDARD:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("SUBMITIT_EXECUTOR", raising=False)
    for name, value in {**SLURM, **extra}.items():
        monkeypatch.setenv(name, value)


def test_slurm_variables_through_submitit(monkeypatch: pytest.MonkeyPatch) -> None:
    _slurm_env(monkeypatch)
    env = detect()
    # submitit: the first host of the node list; a port drawn from a generator seeded with the
    # job id, the same on every task of the job
    port = random.Random("4242").randint(20000, 60000)
    assert env == DistEnv(3, 4, 1, "gpu03", port, "slurm")
    assert detect() == env
    assert "SUBMITIT_EXECUTOR" not in os.environ  # set for the call only


def test_a_one_node_slurm_job_meets_on_the_loopback(monkeypatch: pytest.MonkeyPatch) -> None:
    # the local cluster's node is named hargo1, a name nothing resolves: one node needs none
    _slurm_env(monkeypatch, SLURM_JOB_NUM_NODES="1", SLURM_JOB_NODELIST="hargo1",
               SLURM_NTASKS="2", SLURM_PROCID="1", SLURM_NODEID="0")
    env = detect()
    assert (env.rank, env.world_size, env.master_addr) == (1, 2, "127.0.0.1")


def test_a_one_task_slurm_job_lets_the_kernel_pick_its_port(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    # a port drawn from the job id (or MASTER_PORT) can be another process's at that moment;
    # one task needs none fixed (a paper-table training failed with EADDRINUSE on one)
    _slurm_env(monkeypatch, SLURM_NTASKS="1", SLURM_PROCID="0", SLURM_LOCALID="0",
               SLURM_NODEID="0", SLURM_JOB_NUM_NODES="1", SLURM_JOB_NODELIST="hargo1",
               MASTER_PORT="29600")
    assert detect() == DistEnv(0, 1, 0, "127.0.0.1", 0, "slurm")
    # and such a group forms (in a child: the suite's process keeps its own group, if any)
    script = ("from hargo_hpc.train.backend import distributed as d\n"
              "env = d.init(timeout_s=60)\n"
              "assert d.world_size() == 1 and d.broadcast_object('x') == 'x'\n"
              "d.teardown()\nprint('port', env.master_port)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300, env=dict(os.environ))
    assert done.returncode == 0 and "port 0" in done.stdout, done.stderr[-2000:]


def test_slurm_with_a_master_port_and_submitits_own_executor(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    _slurm_env(monkeypatch, MASTER_PORT="29600")
    monkeypatch.setenv("SUBMITIT_EXECUTOR", "slurm")
    env = detect()
    assert (env.master_port, env.rank, env.source) == (29600, 3, "slurm")
    assert os.environ["SUBMITIT_EXECUTOR"] == "slurm"


def test_standard_variables_win_over_slurms(monkeypatch: pytest.MonkeyPatch) -> None:
    _slurm_env(monkeypatch)
    assert detect({**SLURM, **TORCHRUN}).source == "env"


def test_helpers_with_one_process() -> None:
    assert distributed.gather_floats([1, 2.5]) == [1.0, 2.5]
    assert distributed.gather_objects({"a": 1}) == [{"a": 1}]
    assert distributed.sum_across_ranks(3) == 3.0
    assert distributed.broadcast_object("x") == "x"
    assert distributed.is_main() and distributed.rank() == 0 and distributed.world_size() == 1
    distributed.barrier()


# A process that held a process group: the group's threads outlive `teardown` while a library
# keeps the group (DeepSpeed does), and `end_process` ends it as `sys.exit` would, minus the
# interpreter's finalization (an object's __del__ there would write FINALIZED).
ENDING = """
import atexit, os, sys, threading, time
from pathlib import Path
import torch.distributed as dist
from hargo_hpc.train.backend import distributed

out = Path(sys.argv[1])
if sys.argv[2] == "group":
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(distributed.free_port()))
    distributed.init(distributed.DistEnv(0, 1, 0, "127.0.0.1", 0, "single"), backend="gloo")
    KEPT = dist.group.WORLD
    distributed.barrier()
    distributed.teardown()
print("threads", distributed.group_threads())

class Finalized:
    def __init__(self):  # what __del__ needs, held here: module globals may be gone by then
        self.open, self.path = open, str(out / "FINALIZED")

    def __del__(self):
        self.open(self.path, "w").close()

SEEN = Finalized()
atexit.register(lambda: (out / "ATEXIT").write_text(""))
threading.Thread(target=lambda: (time.sleep(0.3), (out / "THREAD").write_text(""))).start()
print("buffered, not flushed")
distributed.end_process(7)
print("returned")
"""


@pytest.mark.parametrize("group", [True, False])
def test_end_process_skips_only_the_finalization_where_group_threads_run(
        tmp_path: Path, group: bool) -> None:
    done = subprocess.run([sys.executable, "-c", ENDING, str(tmp_path),
                           "group" if group else "none"], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONUNBUFFERED": ""})
    assert ("threads []" in done.stdout) is not group, done.stdout + done.stderr
    assert "buffered, not flushed" in done.stdout, done.stderr
    assert (tmp_path / "ATEXIT").is_file() and (tmp_path / "THREAD").is_file()
    if group:  # ended in end_process: its status, no finalization
        assert done.returncode == 7 and "returned" not in done.stdout, done.stderr
        assert not (tmp_path / "FINALIZED").exists()
    else:  # no group threads: it returned, the process ended as usual
        assert done.returncode == 0 and "returned" in done.stdout, done.stderr
        assert (tmp_path / "FINALIZED").is_file()
