"""Throughput of the handoff: 8 worker processes with a no-op workload, 10 000 requests.

Prints results ingested per second, the latency from "result written" to "trainer has it"
(p50/p99), and what one poll costs with 10 000 result files already present.

    .venv/bin/python benchmarks/handoff_throughput.py [--requests 10000] [--workers 8]
        [--no-fsync] [--poll 0.02] [--dir /path/on/the/shared/fs]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from hargo_hpc.handoff import HandoffSettings, Trainer
from hargo_hpc.handoff.layout import Layout

HERE = Path(__file__).resolve().parent


def noop_workload(request: dict[str, Any]) -> dict[str, Any]:
    """The benchmark's workload double: answers at once."""
    return {"request_id": request["id"], "status": "ok", "reward": 1.0}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run(requests: int, workers: int, fsync: bool, root: Path, poll_s: float) -> None:
    settings = HandoffSettings(lease_s=30, poll_interval_s=poll_s, step_timeout_s=600,
                               fsync=fsync)
    trainer = Trainer(root, settings, progress=False)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get(
        "PYTHONPATH", "")])}
    args = [sys.executable, "-c", "from hargo_hpc.handoff.commands import worker; worker()",
            "--handoff", str(root), "--workload", "handoff_throughput:noop_workload",
            "--lease", "30", "--max-idle", "60", "--fsync" if fsync else "--no-fsync", "-q"]
    procs = [subprocess.Popen(args, env=env) for _ in range(workers)]
    layout = Layout(root)
    deadline = time.monotonic() + 60
    while len(os.listdir(layout.workers)) < workers and time.monotonic() < deadline:
        time.sleep(0.05)
    batch = [{"id": f"r{i:06d}", "completion": "void gemm(){}"} for i in range(requests)]
    started = time.monotonic()
    trainer.submit(0, batch)
    submitted = time.monotonic()
    latencies = []
    for record in trainer.poll(0):
        meta = record["handoff"]
        latencies.append(meta["received_at"] - meta["written_at"])
    finished = time.monotonic()
    trainer.stop("benchmark over")
    for proc in procs:
        proc.wait(timeout=30)

    counts: dict[str, int] = {}
    for beat in layout.workers.iterdir():
        for key, value in json.loads(beat.read_text())["counts"].items():
            counts[key] = counts.get(key, 0) + value

    # poll cost with every result file present: a fresh trainer (restart), then steady state
    fresh = Trainer(root, settings, progress=False)
    fresh.requests(0)
    t0 = time.perf_counter()
    fresh._ingest(0)
    first_poll = time.perf_counter() - t0
    costs = []
    for _ in range(200):
        t0 = time.perf_counter()
        fresh._ingest(0)
        costs.append(time.perf_counter() - t0)

    total = finished - started
    print(f"handoff throughput: {requests} requests, {workers} worker processes, "
          f"no-op workload, fsync={'on' if fsync else 'off'}, poll every {poll_s:g} s, "
          f"{os.cpu_count()} CPUs, {root}")
    print(f"  submit (one requests.json): {1000 * (submitted - started):.0f} ms")
    print(f"  results ingested: {len(latencies)} in {total:.2f} s = "
          f"{len(latencies) / total:.0f} results/s (end to end, workers included)")
    print(f"  latency result written -> trainer has it: p50 {1000 * percentile(latencies, .5):.1f}"
          f" ms, p99 {1000 * percentile(latencies, .99):.1f} ms")
    print(f"  restarted trainer reads {requests} existing results: {first_poll * 1000:.0f} ms "
          f"= {requests / first_poll:.0f} results/s")
    print(f"  poll with {requests} result files present, nothing new: p50 "
          f"{1000 * statistics.median(costs):.2f} ms, max {1000 * max(costs):.2f} ms")
    print(f"  workers' counters: {dict(sorted(counts.items()))}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--no-fsync", action="store_true")
    parser.add_argument("--poll", type=float, default=0.02, help="trainer poll interval (s)")
    parser.add_argument("--dir", help="handoff directory (default: a fresh temp dir)")
    opts = parser.parse_args()
    root = Path(opts.dir) if opts.dir else Path(tempfile.mkdtemp(prefix="handoff-bench-"))
    root.mkdir(parents=True, exist_ok=True)
    try:
        run(opts.requests, opts.workers, not opts.no_fsync, root, opts.poll)
    finally:
        if not opts.dir:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
