"""Host memory of two ranks loading a ZeRO-3 job's policy and sharded reference on one machine:
the trainer's own path (`setup.load_models`, then the engine and the sharded reference) with the
models created partitioned at load (`engine.partitioned_loading`, what a ZeRO-3 run over several
ranks does now) against each rank loading both whole first (before issue Y).

Each measurement is two fresh processes (gloo, one machine, as the ranks of one node): each
reports its private memory (`AnonPeak`) above its level just before loading: the peak while
both models load, what it holds once they are loaded, and the peak by the time the engine
(with its optimizer state) and the sharded reference are built; the node's figures are the
ranks' sums. The two sides are interleaved
and repeated; the script prints each side's median and range and the ratio of the medians
(after / before).

Run: .venv/bin/python benchmarks/load_memory.py [--model smollm2] [--dtype bfloat16]
     [--repeats 3] [--cache DIR]
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import os
import subprocess
import sys
import tempfile
import threading

from _sides import interleaved, report

RANKS = 2


def config(model: str, dtype: str, out: str) -> object:
    from hargo_hpc.config import validate_config

    precision = {"float32": "fp32", "bfloat16": "bf16"}[dtype]
    return validate_config({
        "run": {"name": "load", "dir": out, "seed": 0},
        "model": {"path": model, "dtype": dtype, "reference_device": "sharded"},
        "algorithm": {"name": "grpo", "kl_coef": 0.04},
        "data": {"tasks": [{"name": "plp_qa", "max_items": 8}], "eval_fraction": 0.0},
        "rollout": {"num_generations": 2, "prompts_per_step": 2, "max_new_tokens": 8},
        "training": {"steps": 1, "micro_batch_size": 1, "zero_stage": 3,
                     "precision": precision, "save_every": 0},
    })


def measure(model: str, dtype: str, side: str, out: str) -> list[float]:
    """(In each rank.) MiB of private memory: its peak while loading both models, what it
    holds once they are loaded (freed memory returned), and its peak by the time the engine
    and the sharded reference are built (the optimizer's state counts there)."""
    from hargo_hpc.train import setup
    from hargo_hpc.train.backend import distributed

    distributed.init(distributed.detect(), backend="gloo")
    cfg = config(model, dtype, out)
    if side == "before":
        setup.loads_partitioned = lambda *_: False  # each rank loads both models whole
    import deepspeed  # noqa: F401  (imported before the baseline on both sides)

    with AnonPeak() as peak:
        policy, _, reference = setup.load_models(cfg, needs_reference=True)
        loaded = peak.added()
        gc.collect()
        ctypes.CDLL("libc.so.6").malloc_trim(0)  # what the allocator keeps but no longer uses
        held = _anon_mib() - peak.base
        engine = setup.build_run_engine(cfg, policy, 1, 1, None)
        setup.place_reference(cfg, reference, engine.device)
        built = peak.added()
    distributed.teardown()
    return [loaded, held, built]


class AnonPeak:
    """The peak of this process's private (anonymous) resident memory above its level at entry,
    sampled every 2 ms by a thread. A checkpoint's file pages are left out: mapped by several
    ranks they are one copy in the node's page cache (and reclaimable), while `ru_maxrss`
    would count them once a rank."""

    def __enter__(self) -> AnonPeak:
        self.base = self.peak = _anon_mib()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(0.002):
            self.peak = max(self.peak, _anon_mib())

    def added(self) -> float:
        self.peak = max(self.peak, _anon_mib())
        return self.peak - self.base

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def _anon_mib() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) / 1024.0
    raise RuntimeError("no RssAnon in /proc/self/status (Linux only)")


def node(model: str, dtype: str, side: str, cache: str) -> list[float]:
    """`measure`'s three figures, each summed over the ranks."""
    from hargo_hpc.train.backend.distributed import free_port

    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
           "XDG_CACHE_HOME": cache, "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": str(free_port()), "WORLD_SIZE": str(RANKS)}
    with tempfile.TemporaryDirectory() as out:
        ranks = [subprocess.Popen(
            [sys.executable, __file__, "--child", side, "--model", model, "--dtype", dtype,
             "--out", out],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**env, "RANK": str(r), "LOCAL_RANK": str(r)}) for r in range(RANKS)]
        outputs = [rank.communicate() for rank in ranks]
    total = [0.0, 0.0, 0.0]
    for rank, (stdout, stderr) in zip(ranks, outputs, strict=True):
        if rank.returncode != 0:
            raise SystemExit(f"a rank failed ({side}):\n{stderr[-2000:]}")
        for i, value in enumerate(json.loads(stdout.strip().splitlines()[-1])):
            total[i] += value
    return total


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2", help="tiny, smollm2 or a directory")
    parser.add_argument("--dtype", default="bfloat16", choices=("float32", "bfloat16"))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cache", default=os.path.join(os.path.expanduser("~"), ".cache"),
                        help="XDG cache directory for the models (default: yours)")
    parser.add_argument("--child", choices=("before", "after"), help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(measure(args.model, args.dtype, args.child, args.out)))
        return 0
    found = interleaved(("before", "after"), args.repeats,
                        lambda side: node(args.model, args.dtype, side, args.cache))
    print(f"{RANKS} ranks on one node loading {args.model} ({args.dtype}) policy + sharded "
          f"reference under ZeRO-3, {args.repeats} runs a side, added peak private memory "
          "summed over the ranks:")
    for i, when in enumerate(("peak at load", "held after load", "peak with engine")):
        report({side: [run[i] for run in runs] for side, runs in found.items()},
               label=f"{when:<16} ")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
