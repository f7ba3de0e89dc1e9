"""Real processes: kill -9 chaos, a trainer killed mid-step, signals, Slurm worker ids."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from waiting import wait_until

from hargo_hpc.handoff import HandoffSettings, Trainer, worker_id_from_env
from hargo_hpc.handoff.claims import scan_claims
from hargo_hpc.handoff.layout import Layout

from .conftest import HERE, make_requests, running_workers
from .doubles import noop_workload_double

WORKER = "from hargo_hpc.cli.handoff import worker; worker()"


def spawn_worker(root: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    full_env = {**os.environ, **(env or {})}
    full_env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(HERE), full_env.get("PYTHONPATH", "")) if p
    )
    return subprocess.Popen(
        [sys.executable, "-c", WORKER, "--handoff", str(root), "-q", *args],
        env=full_env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )


def _resume(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGCONT)


@pytest.mark.slow
def test_chaos_kill_9_workers_mid_request(
    root: Path, summary_line: Callable[[str], None]
) -> None:
    """1000 requests, 6 workers, kill -9 and pauses at random: exactly one result each."""
    lease, total, size = 1.0, 1000, 6
    settings = HandoffSettings(lease_s=lease, poll_interval_s=0.05, step_timeout_s=240,
                               max_attempts=50)
    trainer = Trainer(root, settings, progress=False)
    trainer.submit(0, make_requests(total))
    args = ("--workload", "doubles:sleeping_workload_double", "--lease", str(lease),
            "--max-attempts", "50", "--max-idle", "120")
    env = {"HANDOFF_DOUBLE_SLEEP_S": ""}
    procs = [spawn_worker(root, *args, env=env) for _ in range(size)]
    stats = {"kills": 0, "pauses": 0, "started": size}
    done = threading.Event()
    rng = random.Random(7)

    def killer() -> None:
        paused_until: dict[int, float] = {}
        while not done.wait(rng.uniform(0.15, 0.4)):
            now = time.monotonic()
            running = [i for i in range(len(procs)) if paused_until.get(procs[i].pid, 0) < now]
            index = rng.choice(running)
            victim = procs[index]
            if (stats["kills"] + stats["pauses"]) % 4 != 3:  # every fourth event is a pause
                victim.kill()  # SIGKILL: no cleanup, claims and temp files stay behind
                victim.wait()
                stats["kills"] += 1
                procs[index] = spawn_worker(root, *args, env=env)
                stats["started"] += 1
            else:  # a stalled node: paused past its lease, then resumes and finishes late
                victim.send_signal(signal.SIGSTOP)
                paused_until[victim.pid] = now + 2.5 * lease + 0.5  # let it finish late
                stats["pauses"] += 1
                resume = threading.Timer(2.5 * lease, _resume, args=(victim,))
                resume.daemon = True
                resume.start()

    thread = threading.Thread(target=killer, daemon=True)
    started = time.monotonic()
    thread.start()
    delivered: dict[str, int] = {}
    try:
        for record in trainer.poll(0):
            delivered[record["request_id"]] = delivered.get(record["request_id"], 0) + 1
    finally:
        done.set()
        thread.join(10)
        trainer.stop("chaos over")
        for proc in procs:
            proc.send_signal(signal.SIGCONT)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
    elapsed = time.monotonic() - started
    layout = Layout(root)
    results = [n for n in os.listdir(layout.results(0)) if not n.startswith(".")]
    claims = scan_claims(layout.claims(0))
    reclaims = sum(1 for a in claims.values() for n in a.states
                   if n >= 2 and a.state(n - 1) == "claim")
    duplicates = len([n for n in os.listdir(layout.duplicates(0)) if not n.startswith(".")])
    statuses = [json.loads((layout.results(0) / n).read_text())["record"]["status"]
                for n in results]
    lost = total - len(delivered)
    counts = (f"chaos: requests {total}, workers {size} (started {stats['started']}), "
              f"kills {stats['kills']}, pauses {stats['pauses']}, re-claims {reclaims}, "
              f"duplicates ignored {duplicates}, delivered twice "
              f"{sum(1 for c in delivered.values() if c > 1)}, infra_error "
              f"{statuses.count('infra_error')}, lost {lost}, {elapsed:.1f} s")
    print("\n" + counts)
    summary_line(counts)
    assert lost == 0 and len(results) == total
    assert set(delivered.values()) == {1}, "a request reached the trainer twice"
    assert statuses.count("ok") == total
    assert stats["kills"] >= 5 and reclaims >= 1


def test_trainer_killed_mid_step_gets_the_same_results(root: Path, tmp_path: Path) -> None:
    settings = HandoffSettings(lease_s=2.0, poll_interval_s=0.02, step_timeout_s=60)
    calls = tmp_path / "calls.log"
    trainer_code = (
        "import json, sys\n"
        "from hargo_hpc.handoff import HandoffSettings, Trainer\n"
        "s = HandoffSettings(poll_interval_s=0.02, step_timeout_s=60)\n"
        "t = Trainer(sys.argv[1], s, progress=False)\n"
        "reqs = [{'id': f'q{i:04d}', 'kind': 'double',\n"
        "         'payload': {'completion': 'c' * (i % 5 + 1)}} for i in range(200)]\n"
        "t.submit(7, reqs)\n"
        "with open(sys.argv[2], 'w') as out:\n"
        "    for r in t.poll(7):\n"
        "        out.write(json.dumps(r) + '\\n'); out.flush()\n"
    )
    first_out, second_out = tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    env = {"HANDOFF_DOUBLE_SLEEP_S": "0.01", "HANDOFF_DOUBLE_LOG": str(calls)}
    workers = [spawn_worker(root, "--workload", "doubles:sleeping_workload_double",
                            "--lease", str(settings.lease_s), env=env) for _ in range(2)]
    try:
        first = subprocess.Popen([sys.executable, "-c", trainer_code, str(root), str(first_out)])
        wait_until(lambda: first_out.exists()
                   and len(first_out.read_text().splitlines()) >= 50, 30,
                   "the first trainer's 50 results", poll=0.02)
        first.kill()
        first.wait()
        subprocess.run([sys.executable, "-c", trainer_code, str(root), str(second_out)],
                       check=True, timeout=60)
    finally:
        Trainer(root, settings, progress=False).stop()
        for proc in workers:
            proc.wait(timeout=15)
    before = [json.loads(line) for line in first_out.read_text().splitlines() if line.strip()]
    after = {r["request_id"]: r for r in map(json.loads, second_out.read_text().splitlines())}
    assert len(after) == 200 and len(before) >= 50
    for record in before:
        again = after[record["request_id"]]
        assert again["handoff"]["written_at"] == record["handoff"]["written_at"]
        assert again["handoff"]["worker_id"] == record["handoff"]["worker_id"]
        assert again["reward"] == record["reward"]
    ran = [line.split()[0] for line in calls.read_text().splitlines()]
    assert len(ran) == len(set(ran)) == 200, "a finished request was run again"


@pytest.mark.parametrize("signame", ["SIGTERM", "SIGUSR1"])
def test_signal_releases_claims_for_immediate_take_over(root: Path, signame: str) -> None:
    settings = HandoffSettings(lease_s=30.0, poll_interval_s=0.02, step_timeout_s=10)
    trainer = Trainer(root, settings, progress=False)
    trainer.submit(0, make_requests(2))
    calls = root.parent / "calls.log"
    proc = spawn_worker(root, "--workload", "doubles:sleeping_workload_double", "--threads",
                        "2", "--lease", "30", env={"HANDOFF_DOUBLE_SLEEP_S": "30",
                                                   "HANDOFF_DOUBLE_LOG": str(calls)})
    layout = Layout(root)
    wait_until(lambda: calls.exists() and len(calls.read_text().splitlines()) == 2, 15,
               "both requests running in the worker", poll=0.02)
    proc.send_signal(getattr(signal, signame))
    assert proc.wait(timeout=5) == 0
    assert f"worker stopped: signal {signame}" in proc.stderr.read()
    claims = scan_claims(layout.claims(0))
    assert {a.state(1) for a in claims.values()} == {"released"}
    started = time.monotonic()
    with running_workers(root, noop_workload_double, settings, count=1):
        results = trainer.collect(0)
    assert time.monotonic() - started < 5, "released claims must not wait for the 30 s lease"
    assert {r["handoff"]["attempt"] for r in results.values()} == {2}
    beat = next(p for p in layout.workers.iterdir() if "pid" + str(proc.pid) in p.name)
    assert json.loads(beat.read_text())["exit_reason"] == f"signal {signame}"


def test_worker_ids_carry_slurm_host_and_pid() -> None:
    env = {"SLURM_ARRAY_JOB_ID": "123", "SLURM_ARRAY_TASK_ID": "7", "SLURM_JOB_ID": "130"}
    assert worker_id_from_env(env, host="cn01", pid=42) == "slurm123_7-cn01-pid42"
    assert worker_id_from_env({"SLURM_JOB_ID": "99"}, host="cn 2", pid=1) == "slurm99-cn_2-pid1"
    assert worker_id_from_env({}, host="login", pid=5) == "login-pid5"
