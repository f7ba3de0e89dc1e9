"""Host memory of two ranks loading a ZeRO-3 job's policy and sharded reference on one machine:
the trainer's own path (`setup.load_models`, then the engine and the sharded reference) with the
models created partitioned at load (`engine.partitioned_loading`, what a ZeRO-3 run over several
ranks does now) against each rank loading both whole first (before issue Y).

Each measurement is two fresh processes (gloo, one machine, as the ranks of one node): each
reports its peak resident set (`ru_maxrss`) less its resident set just before loading, and the
node's figure is their sum. The two sides are interleaved and repeated; the script prints each
side's median and range and the ratio of the medians (after / before).

Run: .venv/bin/python benchmarks/load_memory.py [--model smollm2] [--dtype bfloat16]
     [--repeats 3] [--cache DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile

RANKS = 2


def config(model: str, dtype: str, out: str) -> object:
    from hargo_hpc.config import validate_config

    precision = {"float32": "fp32", "bfloat16": "bf16"}[dtype]
    return validate_config({
        "run": {"name": "load", "dir": out, "seed": 0},
        "model": {"path": model, "dtype": dtype, "reference_device": "sharded"},
        "algorithm": {"name": "grpo", "beta": 0.04},
        "data": {"tasks": [{"name": "plp_qa", "max_items": 8}], "eval_fraction": 0.0},
        "rollout": {"num_generations": 2, "prompts_per_step": 2, "max_new_tokens": 8},
        "training": {"steps": 1, "micro_batch_size": 1, "zero_stage": 3,
                     "precision": precision, "save_every": 0},
    })


def measure(model: str, dtype: str, side: str, out: str) -> float:
    """(In each rank.) MiB loading, the engine and the sharded reference added to its peak."""
    from hargo_hpc.train import setup
    from hargo_hpc.train.backend import distributed

    distributed.init(distributed.detect(), backend="gloo")
    cfg = config(model, dtype, out)
    if side == "before":
        setup.loads_partitioned = lambda *_: False  # each rank loads both models whole
    base = _rss_mib()
    policy, _, reference = setup.load_models(cfg, needs_reference=True)
    engine = setup.build_run_engine(cfg, policy, 1, 1, None)
    setup.place_reference(cfg, reference, engine.device)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    distributed.teardown()
    return peak - base


def _rss_mib() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def node(model: str, dtype: str, side: str, cache: str) -> float:
    """The two ranks' added peaks, summed."""
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
    total = 0.0
    for rank, (stdout, stderr) in zip(ranks, outputs, strict=True):
        if rank.returncode != 0:
            raise SystemExit(f"a rank failed ({side}):\n{stderr[-2000:]}")
        total += json.loads(stdout.strip().splitlines()[-1])
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
    found: dict[str, list[float]] = {"before": [], "after": []}
    for _ in range(args.repeats):
        for side in found:  # interleaved
            found[side].append(node(args.model, args.dtype, side, args.cache))
    print(f"{RANKS} ranks on one node loading {args.model} ({args.dtype}) policy + sharded "
          f"reference under ZeRO-3, {args.repeats} runs a side, added peak resident set "
          "summed over the ranks:")
    for side, values in found.items():
        print(f"  {side:<6} +{statistics.median(values):.0f} MiB "
              f"(range {min(values):.0f}-{max(values):.0f})")
    ratio = statistics.median(found["after"]) / statistics.median(found["before"])
    print(f"  after / before: {ratio:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
