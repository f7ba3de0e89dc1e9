"""Throughput of the handoff: 10 000 requests through 8 and 64 no-op worker processes.

For each worker count it prints, as the median and the range over the repeats: collisions per
claim (failed O_EXCL creates) and the scans behind them, results ingested per second, the
latency from "result written" to "trainer has it" (p50/p99), and what one trainer poll costs
with 10 000 result files present. A repeat is one step of `--requests` requests. The workers are
started once per worker count and serve the repeats as consecutive steps, as a trainer's steps.

The peer, run in the same script, is the earlier claim order: every worker shuffles the whole
queue at random and rescans after 16 collisions. It is plugged into today's claimer only here,
in the worker processes this script starts. Both sets of workers run at once, each on its own
directory, and their steps take turns (ours, the peer's, ours, ...), so that the load of a
noisy minute falls on both. The script prints ratios against the peer (`--no-peer` skips it).
Claims, collisions and scans are counted per step by the benchmark's worker processes.

    .venv/bin/python benchmarks/handoff_throughput.py [--requests 10000] [--workers 8,64]
        [--repeats 3] [--peer-repeats 2] [--no-peer] [--no-fsync] [--poll 0.02]
        [--dir /parent/on/the/shared/fs]
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hargo_hpc.handoff import HandoffSettings, Trainer
from hargo_hpc.handoff.layout import Layout
from hargo_hpc.handoff.status import gather

HERE = Path(__file__).resolve().parent
ORDER_ENV = "HANDOFF_BENCH_ORDER"  # "peer": the worker processes use the earlier claim order


def noop_workload(request: dict[str, Any]) -> dict[str, Any]:
    """The benchmark's workload double: answers at once."""
    return {"request_id": request["id"], "status": "ok", "reward": 1.0}


def random_order(ring: Sequence[str], fresh: Collection[str], key: float) -> list[str]:
    """The peer: the earlier claim order, every fresh request in a random order."""
    queue = [rid for rid in ring if rid in fresh]
    random.shuffle(queue)
    return queue


def worker_main() -> None:
    """A worker process of this benchmark: `hargo worker`, with the peer order if asked, and
    its claims and collisions counted per step (the heartbeat's counters span every step).
    The counts go to `<handoff>/bench-counts/<pid>.json` when the process exits."""
    from hargo_hpc.handoff import claimer

    if os.environ.get(ORDER_ENV) == "peer":
        claimer.claim_order = random_order
        claimer.RESCAN_AFTER_COLLISIONS = 16
    per_step: dict[str, list[float]] = {}  # step dir -> [claims, collisions, scans, scan s]
    real_open, real_scan = claimer.open_exclusive, claimer.Claimer.scan

    def counted(path: Path, obj: Any) -> bool:
        won = real_open(path, obj)
        per_step.setdefault(path.parent.parent.name, [0, 0, 0, 0.0])[0 if won else 1] += 1
        return won

    def timed_scan(self: claimer.Claimer, view: Any) -> None:
        t0 = time.perf_counter()
        real_scan(self, view)
        found = per_step.setdefault(self.layout.step(view.step).name, [0, 0, 0, 0.0])
        found[2] += 1
        found[3] += time.perf_counter() - t0

    def dump() -> None:
        root = Path(sys.argv[sys.argv.index("--handoff") + 1]) / "bench-counts"
        root.mkdir(exist_ok=True)
        (root / f"{os.getpid()}.json").write_text(json.dumps(per_step))

    claimer.open_exclusive = counted  # type: ignore[assignment]
    claimer.Claimer.scan = timed_scan  # type: ignore[method-assign]
    atexit.register(dump)
    from hargo_hpc.cli.handoff import worker

    worker()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@dataclass
class Run:
    """One step of `requests` requests through `workers` running worker processes."""

    workers: int
    peer: bool
    rate: float  # results/s, end to end
    p50_ms: float
    p99_ms: float
    submit_ms: float
    collisions_per_claim: float = 0.0
    scans: float = 0.0  # by all workers, in this step
    scan_s: float = 0.0  # CPU and I/O time those scans took, summed over the workers
    first_poll_ms: float | None = None
    poll_p50_ms: float | None = None
    poll_max_ms: float | None = None


class WorkerSet:
    """`workers` worker processes on one handoff directory, started once for several steps."""

    def __init__(self, root: Path, workers: int, fsync: bool, poll_s: float, peer: bool):
        self.root, self.workers, self.peer = root, workers, peer
        self.settings = HandoffSettings(lease_s=30, poll_interval_s=poll_s, step_timeout_s=600,
                                        fsync=fsync)
        self.trainer = Trainer(root, self.settings, progress=False)
        self.runs: list[Run] = []
        env = {**os.environ, ORDER_ENV: "peer" if peer else "",
               "PYTHONPATH": os.pathsep.join(
                   p for p in (str(HERE), os.environ.get("PYTHONPATH")) if p)}
        args = [sys.executable, "-c", "import handoff_throughput as b; b.worker_main()",
                "--handoff", str(root), "--workload", "handoff_throughput:noop_workload",
                "--lease", "30", "--max-idle", "120", "--fsync" if fsync else "--no-fsync",
                "-q"]
        self.log = root / "workers.log"  # their stderr: shown only when one of them fails
        with self.log.open("w") as stderr:
            self.procs = [subprocess.Popen(args, env=env, stderr=stderr) for _ in range(workers)]

    def live(self) -> int:
        if any(proc.poll() is not None for proc in self.procs):
            raise RuntimeError(f"a worker exited early:\n{self.log.read_text()[-4000:]}")
        return sum(w.live for w in gather(self.root).workers)

    def step(self, requests: int) -> None:
        """One more step through these workers (and, for ours, the trainer's poll costs)."""
        step = len(self.runs)
        self.runs.append(one_step(self.trainer, step, requests, self.workers, self.peer))
        if not self.peer:
            poll_costs(self.root, self.settings, step, self.runs[-1])

    def stop(self) -> None:
        """Stop the workers; fill in each step's collisions per claim from their counts."""
        self.trainer.stop("benchmark over")
        for proc in self.procs:
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if any(proc.returncode for proc in self.procs):
            print(f"a worker failed; their stderr:\n{self.log.read_text()[-4000:]}",
                  file=sys.stderr)
        per_step: dict[str, list[float]] = {}
        for path in (self.root / "bench-counts").glob("*.json"):
            for name, values in json.loads(path.read_text()).items():
                total = per_step.setdefault(name, [0, 0, 0, 0.0])
                for i, value in enumerate(values):
                    total[i] += value
        for step, run in enumerate(self.runs):
            claims, collisions, run.scans, run.scan_s = per_step.get(
                Layout(self.root).step(step).name, [0, 0, 0, 0.0])
            run.collisions_per_claim = collisions / max(1, claims)


def compare(base: Path, requests: int, workers: int, repeats: int, peer_repeats: int,
            fsync: bool, poll_s: float) -> tuple[list[Run], list[Run]]:
    """Our workers and the peer's, both started (each set on its own directory), then steps
    in turn: ours, the peer's, ours, ... so that a noisy minute hits both. The set that
    waits is idle meanwhile (it polls, as idle workers do), the same for both."""
    sets = [WorkerSet(base / f"ours-{workers}", workers, fsync, poll_s, peer=False)]
    if peer_repeats:
        sets.append(WorkerSet(base / f"peer-{workers}", workers, fsync, poll_s, peer=True))
    try:
        deadline = time.monotonic() + 180
        while sum(s.live() for s in sets) < workers * len(sets):
            if time.monotonic() > deadline:
                raise RuntimeError(f"workers did not start within 180 s ({workers} per set)")
            time.sleep(0.2)
        for i in range(max(repeats, peer_repeats)):
            for item, count in zip(sets, (repeats, peer_repeats), strict=False):
                if i < count:
                    item.step(requests)
    finally:
        for item in sets:
            item.stop()
    return sets[0].runs, sets[1].runs if peer_repeats else []


def one_step(trainer: Trainer, step: int, requests: int, workers: int, peer: bool) -> Run:
    batch = [{"id": f"r{i:06d}", "kind": "gemm", "payload": {"completion": "void gemm(){}"}}
             for i in range(requests)]
    started = time.monotonic()
    trainer.submit(step, batch)
    submitted = time.monotonic()
    latencies = []
    for record in trainer.poll(step):
        meta = record["handoff"]
        latencies.append(meta["received_at"] - meta["written_at"])
    finished = time.monotonic()
    return Run(workers, peer, len(latencies) / (finished - started),
               1000 * percentile(latencies, .5), 1000 * percentile(latencies, .99),
               1000 * (submitted - started))


def poll_costs(root: Path, settings: HandoffSettings, step: int, run: Run) -> None:
    """A fresh trainer (a restart) reads every result of the step, then polls, nothing new."""
    fresh = Trainer(root, settings, progress=False)
    fresh.requests(step)
    t0 = time.perf_counter()
    fresh._ingest(step)
    run.first_poll_ms = 1000 * (time.perf_counter() - t0)
    costs = []
    for _ in range(200):
        t0 = time.perf_counter()
        fresh._ingest(step)
        costs.append(1000 * (time.perf_counter() - t0))
    run.poll_p50_ms, run.poll_max_ms = statistics.median(costs), max(costs)


def spread(values: list[float], fmt: str = ".0f") -> str:
    """median (min - max over the repeats)"""
    med = statistics.median(values)
    if len(values) == 1:
        return f"{med:{fmt}}"
    return f"{med:{fmt}} ({min(values):{fmt}} - {max(values):{fmt}})"


def report(runs: list[Run], peers: list[Run]) -> None:
    """Medians and ranges of one worker count, ours then the peer, and the ratios."""
    workers = runs[0].workers
    for label, series in (("claim order of today", runs),
                          ("peer: random order of the whole queue", peers)):
        if not series:
            continue
        print(f"  {workers} workers, {label}, {len(series)} steps: median (min - max)")
        scan_s = spread([r.scan_s for r in series], ".1f")
        print(f"    collisions per claim:       "
              f"{spread([r.collisions_per_claim for r in series], '.3f')}; scans "
              f"{spread([r.scans for r in series])} taking {scan_s} s (all workers)")
        print(f"    results ingested:           {spread([r.rate for r in series])} results/s "
              "(end to end, workers included)")
        print(f"    latency written -> trainer: p50 {spread([r.p50_ms for r in series], '.1f')}"
              f" ms, p99 {spread([r.p99_ms for r in series], '.1f')} ms")
        print(f"    submit (one requests.json): {spread([r.submit_ms for r in series])} ms")
        polled = [r for r in series if r.first_poll_ms is not None]
        if polled:
            print(f"    restarted trainer reads every result: "
                  f"{spread([r.first_poll_ms or 0.0 for r in polled])} ms; poll, nothing new: "
                  f"p50 {spread([r.poll_p50_ms or 0.0 for r in polled], '.2f')} ms, "
                  f"max {spread([r.poll_max_ms or 0.0 for r in polled], '.2f')} ms")
    if peers:
        def ratio(field: str) -> float:
            ours = statistics.median(getattr(r, field) for r in runs)
            theirs = statistics.median(getattr(r, field) for r in peers)
            return ours / theirs if theirs else float("nan")

        print(f"  ratio to the peer, {workers} workers (medians): collisions per claim "
              f"{ratio('collisions_per_claim'):.3f}x, results/s {ratio('rate'):.2f}x, "
              f"latency p50 {ratio('p50_ms'):.2f}x, p99 {ratio('p99_ms'):.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--workers", default="8,64", help="worker counts, comma-separated")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--peer-repeats", type=int, default=2)
    parser.add_argument("--no-peer", action="store_true", help="skip the random-order peer")
    parser.add_argument("--no-fsync", action="store_true")
    parser.add_argument("--poll", type=float, default=0.02, help="trainer poll interval (s)")
    parser.add_argument("--dir", help="where to make the handoff directories (default: a temp "
                        "dir)")
    opts = parser.parse_args()
    base = Path(opts.dir) if opts.dir else Path(tempfile.mkdtemp(prefix="handoff-bench-"))
    base.mkdir(parents=True, exist_ok=True)
    fsync = not opts.no_fsync
    counts = [int(n) for n in opts.workers.split(",")]
    load = os.getloadavg()[0]
    print(f"handoff throughput: {opts.requests} requests, {counts} worker processes, no-op "
          f"workload, fsync={'on' if fsync else 'off'}, trainer polls every {opts.poll:g} s, "
          f"{os.cpu_count()} CPUs, load {load:.2f}, {base}")
    began = time.monotonic()
    try:
        for workers in counts:
            for name in (f"ours-{workers}", f"peer-{workers}"):
                (base / name).mkdir()
            try:
                runs, peers = compare(base, opts.requests, workers, opts.repeats,
                                      0 if opts.no_peer else opts.peer_repeats, fsync,
                                      opts.poll)
            finally:
                for name in (f"ours-{workers}", f"peer-{workers}"):
                    shutil.rmtree(base / name, ignore_errors=True)
            report(runs, peers)
    finally:
        if not opts.dir:
            shutil.rmtree(base, ignore_errors=True)
    print(f"  ({time.monotonic() - began:.0f} s in all)")


if __name__ == "__main__":
    main()
