"""The reward curve of one kernel family, naive -> blocked -> reordered -> openmp -> simd ->
AVX-512 (benchmarks/kernels/avx512_8x16.c), each judged as an ordinary request at the default
problem (256^3) and settings, interleaved over rounds so that the node's drift hits all alike.

Prints, per kernel, the median over rounds of: GFLOPS (the record's median), q (speed ratio to
the reference of its own run), reward; and the run's reference kernel and peak bound.

Run: .venv/bin/python benchmarks/reward_curve.py [ROUNDS]   (default 5)
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from pathlib import Path

from hargo_hpc.bench import BenchRequest, BenchSettings, Problem, run_bench
from hargo_hpc.bench.reference import kernel_source

ORDER = ("naive", "blocked", "reordered", "openmp", "simd", "avx512")
AVX512 = Path(__file__).resolve().parent / "kernels" / "avx512_8x16.c"


def source(name: str) -> str:
    return AVX512.read_text() if name == "avx512" else kernel_source(name)


def main(rounds: int) -> None:
    settings = BenchSettings()
    rows: dict[str, list[tuple[float, float, float]]] = {k: [] for k in ORDER}
    refs: set[str] = set()
    bounds: set[str] = set()
    with tempfile.TemporaryDirectory(prefix="hargo-curve-") as cache:
        for r in range(rounds):
            for name in ORDER:
                res = run_bench(BenchRequest(id=f"{name}-{r}", completion=source(name),
                                             problem=Problem()), settings, cache_dir=cache)
                if res.status != "ok":
                    print(f"{name}: {res.status} {res.reason}")
                    continue
                rows[name].append((res.gflops["median"], res.ratio, res.reward))
                refs.add(f"{res.reference} {res.reference_kernel}"
                         + (f" (OPENBLAS_CORETYPE={res.reference_coretype})"
                            if res.reference_coretype else ""))
                p = res.peak
                bounds.add(f"peak {p['gflops']:.1f} GFLOPS = {p['cpus']} x {p['ghz']:g} GHz "
                           f"({p['clock_source']}) x {p['flop_per_cycle']} ({p['isa']}); "
                           f"bound {p['bound']:.1f}")
                if res.suspicious:
                    print(f"{name}: suspicious: {res.reason}")
    print(f"{'kernel':<10} {'GFLOPS':>8} {'q':>7} {'reward':>7}   (medians of {rounds} runs)")
    for name in ORDER:
        if rows[name]:
            g, q, rew = (statistics.median(x[i] for x in rows[name]) for i in range(3))
            print(f"{name:<10} {g:8.1f} {q:7.3f} {rew:7.1f}")
    print("reference:", "; ".join(sorted(refs)))
    print("\n".join(sorted(bounds)))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5)
