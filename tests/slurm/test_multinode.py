"""Several Slurm nodes on this machine, and training across them.

The module starts its own cluster (scripts/slurm-cluster.sh with HARGO_SLURM_GPU_NODES=2 and
HARGO_SLURM_CPU_NODES=2: one slurmd per network + UTS + mount namespace on a private /24,
task/affinity binding every task to its cores) on its own port base, and removes it at the end,
checking that no namespace, link, mount or process of it is left. On it:

- the nodes sit in their partitions, a two-node step runs on both, and every node resolves the
  first node's name (the rendezvous host of a job: hargo_hpc/train/backend/distributed.py);
- a step gets exactly the CPUs it asks for, and the project's rendered training script gives
  each rank its `cpus_per_task` (it exports SRUN_CPUS_PER_TASK; the same script without that
  line gives each rank one CPU, as srun 22.05-23.02 does not inherit --cpus-per-task);
- `hargo submit` of jobs/tiny.toml trains across two nodes, one rank a node and two ranks a node,
  under ZeRO-2 and ZeRO-3, as one process group of every rank (one checkpoint, its world size that
  of the job, though the submitting shell holds a launcher's RANK=0 WORLD_SIZE=1), and ends with the
  parameters and deterministic metrics of one process. The method is the `sft` preset: its update
  depends on the prompts' reference answers, not on the sampled completions (which depend on how the
  prompts are shared out), so a one-process run is an exact reference; the rollout is still sampled,
  rewarded and gathered across the ranks. The ranks build the tiny model into a fresh cache at once
  (the first multi-node run of a user), and a wrapper as `slurm.python` records where every process
  ran and on which CPUs.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from numerics import assert_same_adam_update
from safetensors.torch import load_file
from test_submit import invoke
from waiting import wait_until

from hargo_hpc.slurm.manifest import Manifest, load_manifest
from hargo_hpc.slurm.watch import job_states
from hargo_hpc.train import metrics as m
from hargo_hpc.train.backend.checkpoint import read_state
from hargo_hpc.train.model.models import tiny_recipe_hash

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
SCRIPT = str(REPO / "scripts" / "slurm-cluster.sh")
TINY = REPO / "jobs" / "tiny.toml"
PY = sys.executable
# 3000 above the suite's cluster (16817: 19817), so that a second suite on its own cluster
# (HARGO_SLURM_PORT_BASE=17817: 20817) starts its multi-node cluster beside this one's
PORT_BASE = str(int(os.environ.get("HARGO_SLURM_PORT_BASE") or 16817) + 3000)
TAG = f"hargo{PORT_BASE}"  # the script's names: link, namespaces hargo19817-<node>
GPU_NODES, CPU_NODES = ["hargo-g1", "hargo-g2"], ["hargo-c1", "hargo-c2"]
LR, STEPS = 1e-3, 2
# the sft preset (module docstring) on plp_qa, 4 prompts x G 2 = 8 rows, micro-batches of 2
TRAIN = [f"training.steps={STEPS}", "training.save_every=0", f"training.lr={LR}",
         "algorithm.name=sft", 'data.tasks=[{name="plp_qa", max_items=12}]',
         "rollout.num_generations=2", "rollout.prompts_per_step=4", "rollout.max_new_tokens=10",
         "training.micro_batch_size=2"]
SAME = ("rows/in_loss", "sft/tokens", "optimizer_steps")
CLOSE = ("loss", "sft/nll", "grad_norm")  # 1e-3 relative, as tests/train/test_two_rank_train
FINISHED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
            "PREEMPTED", "BOOT_FAIL", "DEADLINE")


def cluster_script(action: str, state: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HARGO_SLURM_PORT_BASE": PORT_BASE,
           "HARGO_SLURM_GPU_NODES": str(len(GPU_NODES)),
           "HARGO_SLURM_CPU_NODES": str(len(CPU_NODES))}
    return subprocess.run([SCRIPT, action, state, *args], capture_output=True, text=True,
                          timeout=180, env=env)


def run(*argv: str, timeout: float = 120) -> str:
    done = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{' '.join(argv)}: {done.stderr.strip()}"
    return done.stdout


def final_state(job_id: str) -> str:
    """The state of the job (or of its tasks, an array's `<id>_<i>`, joined by ",") once every
    one has ended; "" before."""
    states = job_states([job_id])
    mine = {s for k, s in states.items() if k == job_id or k.startswith(f"{job_id}_")}
    return ",".join(sorted(mine)) if mine and mine <= set(FINISHED) else ""


def netns_mounted() -> bool:
    return any(line.split()[1] == "/run/netns" for line in Path("/proc/self/mounts").open())


def cpu_set(text: str) -> set[int]:
    """A CPU list as /proc/PID/status writes it ("0-1,3") as a set."""
    cpus: set[int] = set()
    for part in filter(None, text.split(",")):
        first, _, last = part.partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    return cpus


@dataclass
class Record:
    """One process started through the recording `slurm.python` wrapper."""

    job: str
    step: str
    rank: str
    host: str
    cpus: set[int]
    omp: str
    argv: str


@dataclass
class Cluster:
    state: str
    work: Path
    records: Path  # what the wrappers write: one line per process
    python: Path  # records, then runs this interpreter
    recorder: Path  # records and exits 0
    startup_s: float
    submissions: dict[str, Manifest] = field(default_factory=dict)

    def records_of(self, job_id: str) -> list[Record]:
        lines = self.records.read_text().splitlines() if self.records.is_file() else []
        rows = [Record(*parts[:4], cpu_set(parts[4]), *parts[5:]) for parts in
                (line.split("\t") for line in lines)]
        return [r for r in rows if r.job == job_id]


def wrapper(path: Path, records: Path, then: str) -> Path:
    path.write_text(
        "#!/bin/bash\n"
        "cpus=$(awk '/^Cpus_allowed_list/ {print $2}' \"/proc/$$/status\")\n"
        "printf '%s\\t%s\\t%s\\t%s\\t%s\\t%s\\t%s\\n' \"${SLURM_JOB_ID:-}\" "
        "\"${SLURM_STEP_ID:-}\" \"${SLURM_PROCID:-}\" \"$(hostname)\" \"$cpus\" "
        f"\"${{OMP_NUM_THREADS:-}}\" \"$*\" >> {records}\n"
        f"{then}\n")
    path.chmod(0o755)
    return path


def leftovers(state: str, inodes: set[int], pids: dict[int, str]) -> list[str]:
    """What of the cluster in `state` still exists after `down`."""
    left = [f"namespace {p.name}" for p in Path("/run/netns").glob(f"{TAG}-*")] \
        if Path("/run/netns").is_dir() else []
    if subprocess.run(["ip", "link", "show", TAG], capture_output=True).returncode == 0:
        left.append(f"link {TAG}")
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            net = os.readlink(proc / "ns" / "net")
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            comm = (proc / "comm").read_text().strip()
            zombie = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
        except OSError:
            continue  # gone meanwhile
        if zombie:
            continue
        daemon = pids.get(int(proc.name))  # a daemon's pid, still running that daemon
        if (daemon and comm.startswith(daemon)) or state in cmdline or any(
                net == f"net:[{ino}]" for ino in inodes):
            left.append(f"process {proc.name} ({cmdline.strip()[:80]})")
    return left


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """The module's own cluster, started cold; at the end `down` and nothing of it is left."""
    yield from namespaced_cluster(tmp_path_factory)


def namespaced_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A module fixture's body (test_node_failures has one too): start the cluster, yield it,
    then `down` it and fail if anything of it is left."""
    if shutil.which("slurmd") is None or os.geteuid() != 0:
        pytest.skip("needs root and slurm-wlm (make apt)")
    state = tempfile.mkdtemp(prefix="hmn-", dir="/tmp")  # short: unix socket paths
    mounted_before = netns_mounted()
    started = time.monotonic()
    up = cluster_script("up", state)
    startup_s = time.monotonic() - started
    before = os.environ.get("SLURM_CONF")
    pids: dict[int, str] = {}
    inodes: set[int] = set()
    try:
        assert up.returncode == 0, f"the multi-node cluster did not come up:\n{up.stderr}"
        assert up.stdout.strip() == f"SLURM_CONF={state}/etc/slurm.conf"
        os.environ["SLURM_CONF"] = f"{state}/etc/slurm.conf"
        pids = {int(p.read_text().strip()): p.name.split(".")[0]  # slurmd.hargo-g1.pid
                for p in Path(state, "run").glob("*.pid")}
        inodes = {p.stat().st_ino for p in Path("/run/netns").glob(f"{TAG}-*")}
        assert len(inodes) == 1 + len(GPU_NODES) + len(CPU_NODES)  # the hub and the nodes
        work = tmp_path_factory.mktemp("multinode")
        records = work / "records.tsv"
        yield Cluster(state, work, records, wrapper(work / "python", records, f'exec {PY} "$@"'),
                      wrapper(work / "recorder", records, "exit 0"), startup_s)
    finally:
        if before is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = before
        down = cluster_script("down", state)
        left = leftovers(state, inodes, pids)
        if not mounted_before and netns_mounted() and not any(Path("/run/netns").glob("*")):
            left.append("the /run/netns mount")
        shutil.rmtree(state, ignore_errors=True)
    assert down.returncode == 0, down.stderr
    assert not left, f"left after down: {left}"


# ---------------------------------------------------------------- the cluster


def test_nodes_sit_in_their_partitions_and_a_step_spans_two_nodes(
        cluster: Cluster, summary_line: Any) -> None:
    summary_line(f"multi-node cluster (2 gpu + 2 cpu nodes in namespaces): cold start "
                 f"{cluster.startup_s:.1f} s")
    rows = [line.split() for line in run("sinfo", "-h", "-N", "-o", "%N %P %T").splitlines()]
    assert sorted(rows) == sorted([[n, "gpu", "idle"] for n in GPU_NODES]
                                  + [[n, "cpu*", "idle"] for n in CPU_NODES]), rows
    status = cluster_script("status", cluster.state)
    assert status.returncode == 0, status.stdout + status.stderr
    for node in GPU_NODES + CPU_NODES:
        assert re.search(rf"^node +{node} idle \(slurmd pid \d+, netns {TAG}-", status.stdout,
                         re.M), status.stdout
    again = time.monotonic()
    assert cluster_script("up", cluster.state).returncode == 0  # healthy: a no-op
    assert time.monotonic() - again < 5

    for partition, nodes in (("gpu", GPU_NODES), ("cpu", CPU_NODES)):
        out = run("srun", "-p", partition, "-N2", "-t", "1", "sh", "-c",
                  'echo "$SLURMD_NODENAME $(hostname) $(getent hosts hargo-g1)"')
        lines = sorted(out.splitlines())
        assert [line.split()[:2] for line in lines] == [[n, n] for n in nodes], out
        # the rendezvous host of a job (its first node) resolves on every node, IPv4-mapped
        assert all(line.split()[2].endswith(".11") for line in lines), out


def test_a_step_sees_exactly_the_cpus_it_asks_for(cluster: Cluster) -> None:
    probe = "import os; print(sorted(os.sched_getaffinity(0)))"
    for cpus in (1, 2):
        out = run("srun", "-p", "cpu", "-N1", "-c", str(cpus), "-t", "1", PY, "-c", probe)
        assert len(json.loads(out)) == cpus, out
    out = run("srun", "-p", "cpu", "-N1", "-n2", "-c1", "-t", "1", PY, "-c", probe)
    first, second = (set(json.loads(line)) for line in out.splitlines())
    assert len(first) == len(second) == 1 and not first & second, out  # a core each


def test_the_rendered_training_script_gives_each_rank_its_cpus_per_task(
        cluster: Cluster) -> None:
    out = cluster.work / "rendered"
    done = invoke("render", str(TINY), f"run.dir={cluster.work / 'never'}",
                  f"slurm.python={cluster.recorder}", "slurm.train.nodes=2",
                  "slurm.train.cpus_per_task=2", "slurm.train.mem=1G",
                  "slurm.train.time=00:05:00", "-o", str(out))
    assert done.exit_code == 0, done.stderr
    script = (out / "train.sh").read_text()
    export = '[ -z "${SLURM_CPUS_PER_TASK:-}" ] || export SRUN_CPUS_PER_TASK='
    assert export in script
    control = out / "without-export.sh"
    control.write_text("\n".join(line for line in script.splitlines()
                                 if not line.startswith(export)) + "\n")
    jobs = {name: run("sbatch", "--parsable", str(path)).strip().split(";")[0]
            for name, path in (("rendered", out / "train.sh"), ("control", control))}
    for name, job_id in jobs.items():
        state = wait_until(lambda job_id=job_id: final_state(job_id), 120,
                           f"the {name} job {job_id} to end")
        assert state == "COMPLETED", (name, state, [
            p.read_text()[-1500:] for p in (out / "logs").glob("*.out")])
    for name, cpus in (("rendered", 2), ("control", 1)):
        ranks = cluster.records_of(jobs[name])
        assert sorted((r.rank, r.host) for r in ranks) == [("0", "hargo-g1"), ("1", "hargo-g2")]
        # the job's 2 CPUs a task, or srun's own default of one without the export
        assert [len(r.cpus) for r in ranks] == [cpus, cpus], (name, ranks)
        assert {r.omp for r in ranks} == {"2"}  # OMP_NUM_THREADS comes from the job's -c


# ---------------------------------------------------------------- training across nodes

SHAPES = {"2x1": 1, "2x2": 2}  # name -> ranks a node, on 2 nodes
STAGES = (2, 3)


@pytest.fixture(scope="module")
def submissions(cluster: Cluster) -> dict[str, Manifest]:
    """Every training submission at once (the scheduler runs them as the nodes free up), their
    eval and report jobs cancelled (not what this module tests)."""
    cache = cluster.work / "models"  # fresh: the ranks of the first jobs build the tiny model
    # The submitting shell holds a torch launcher's variables (as after a one-process run in
    # it); sbatch exports them into the jobs, which must take their ranks from Slurm anyway.
    launcher = {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": "0"}
    before = {name: os.environ.get(name) for name in launcher}
    os.environ.update(launcher)
    try:
        _submit_all(cluster, cache)
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    return cluster.submissions


def _submit_all(cluster: Cluster, cache: Path) -> None:
    for shape, per_node in SHAPES.items():
        for stage in STAGES:
            name = f"{shape}-z{stage}"
            done = invoke(
                "submit", str(TINY), f"run.dir={cluster.work / name}", *TRAIN,
                f"training.zero_stage={stage}", f"model.cache_dir={cache}",
                f"slurm.python={cluster.python}", "slurm.train.nodes=2",
                f"slurm.train.ntasks_per_node={per_node}", f"slurm.train.gpus_per_node={per_node}",
                "slurm.train.cpus_per_task=1", "slurm.train.mem=1G",
                "slurm.train.time=00:10:00", "slurm.eval.mem=1G", "slurm.eval.time=00:05:00")
            assert done.exit_code == 0, done.stderr
            manifest = load_manifest(cluster.work / name / "tiny")
            run("scancel", manifest.job("eval").job_id, manifest.job("report").job_id)
            cluster.submissions[name] = manifest


@pytest.fixture(scope="module")
def one_process(cluster: Cluster, submissions: dict[str, Manifest]) -> Path:
    """The same training in one process here (while the cluster trains): its run directory."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    done = subprocess.run(
        [PY, "-m", "hargo_hpc", "train", str(TINY), f"run.dir={cluster.work / 'one'}", *TRAIN,
         f"model.cache_dir={cluster.work / 'models'}"],
        capture_output=True, text=True, timeout=400, env=env, cwd=cluster.work)
    assert done.returncode == 0, done.stderr[-3000:]
    return cluster.work / "one" / "tiny"


def train_logs(manifest: Manifest) -> str:
    return "\n".join(f"== {p.name}\n{p.read_text()[-2000:]}" for p in
                     sorted(Path(manifest.root, "submitit", "train").glob("*_log.out")))


@pytest.mark.parametrize("shape", SHAPES)
def test_training_across_two_nodes_ends_like_one_process(
        cluster: Cluster, submissions: dict[str, Manifest], one_process: Path, shape: str,
        summary_line: Any) -> None:
    per_node = SHAPES[shape]
    want = load_file(one_process / "export" / "model.safetensors")
    want_records = m.read_records(one_process / "metrics.jsonl")
    started = time.monotonic()
    for stage in STAGES:
        name = f"{shape}-z{stage}"
        manifest = submissions[name]
        train = manifest.job("train").job_id

        state = wait_until(lambda train=train: final_state(train), 480,
                           f"the training job of {name} to end")
        assert state == "COMPLETED", f"{name}: {state}\n{train_logs(manifest)}"

        # every rank ran once, on its node, bound to its one CPU
        ranks = [r for r in cluster.records_of(train) if "hargo_hpc train" in r.argv]
        assert sorted(r.rank for r in ranks) == [str(i) for i in range(2 * per_node)], ranks
        hosts = sorted(r.host for r in ranks)
        assert hosts == sorted(GPU_NODES * per_node), ranks
        for host in GPU_NODES:
            mine = [r.cpus for r in ranks if r.host == host]
            assert all(len(c) == 1 for c in mine) and len(set().union(*mine)) == per_node, ranks

        run_dir = Path(manifest.runs[0].dir)
        # one process group of every rank: one checkpoint, written by all of them
        saved = sorted(p.name for p in (run_dir / "checkpoints").glob("step_*"))
        assert saved == ["step_000002"], saved
        assert read_state(run_dir / "checkpoints" / saved[0])["world_size"] == 2 * per_node
        got = load_file(run_dir / "export" / "model.safetensors")
        before = load_file(cluster.work / "models" / f"tiny-{tiny_recipe_hash()}"
                           / "model.safetensors")
        assert got.keys() == want.keys() == before.keys()
        assert_same_adam_update(got, want, before, LR, STEPS)
        records = m.read_records(run_dir / "metrics.jsonl")
        assert [r["step"] for r in records] == [r["step"] for r in want_records] == [1, 2]
        for got_r, want_r in zip(records, want_records, strict=True):
            for key in SAME:
                assert got_r[key] == want_r[key], (name, key)
            for key in CLOSE:
                assert got_r[key] == pytest.approx(want_r[key], rel=1e-3, abs=1e-6), (name, key)
        assert (run_dir / "finished.json").is_file()
    summary_line(f"hargo submit across 2 nodes x {per_node} rank(s), ZeRO-2 and ZeRO-3, "
                 f"{STEPS} steps each: {time.monotonic() - started:.0f} s after the submissions "
                 f"and the one-process run")
