"""Calibration: the shipped kernels against the reference DGEMM, as a table, and the machine's
roof for the report.

Every row is an ordinary request (validated, sandboxed, judged), so each carries the GFLOPS of
the reference timed in its own run, on the row's k threads (1 for a serial kernel: reward.py).
The roof is the reference's best call over the rows whose reference ran on all the allocated
threads; it is stored by roof.store_roof for `hargo bench calibrate`'s report and for
benchmarks, and never changes a reward (rewards use the reference of their own run, reward.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from hargo_hpc.bench.reference import SHIPPED_KERNELS, kernel_source
from hargo_hpc.bench.roof import store_roof
from hargo_hpc.bench.runner import BenchRequest, Problem, allocated_threads, run_bench
from hargo_hpc.bench.sandbox import InfraError
from hargo_hpc.bench.settings import BenchSettings

REFERENCE_KERNELS = SHIPPED_KERNELS
__all__ = ["REFERENCE_KERNELS", "Calibration", "Row", "calibrate", "kernel_source"]


@dataclass
class Row:
    kernel: str
    status: str
    median: float | None
    best: float | None
    percent_of_reference: float | None  # 100 q: the row's speed ratio (reward.speed_ratio)
    reward: float | None = None  # the row's reward (reward.py), as a request would get it


@dataclass(frozen=True)
class Calibration:
    roof: float  # the reference's best call over the rows, GFLOPS
    rows: list[Row]  # the first is the reference
    path: str  # where the roof was stored
    peak: dict | None  # the node's peak and bound as the runs derived them (peak.py)


def calibrate(
    settings: BenchSettings, problem: Problem, *, cache_dir: str | None = None
) -> Calibration:
    """Every shipped kernel as a request, the reference's row first (its GFLOPS from the rows
    whose reference ran on all T allocated threads: the parallel kernels'); the roof stored."""
    threads = allocated_threads(settings)
    rows: list[Row] = []
    ref_medians: list[float] = []
    best_ref = 0.0
    label = kernel = ""
    peak: dict | None = None
    for name in REFERENCE_KERNELS:
        req = BenchRequest(id=f"calibrate-{name}", completion=kernel_source(name), problem=problem)
        res = run_bench(req, settings, cache_dir=cache_dir)
        if res.status == "infra_error":
            raise InfraError(f"calibration of {name} failed: {res.reason}")
        g = res.gflops or {}
        pct = 100.0 * res.ratio if res.ratio is not None else None
        rows.append(Row(name, res.status, g.get("median"), g.get("max"), pct, res.reward))
        if res.reference_gflops and res.reference_threads == threads:
            ref_medians.append(res.reference_gflops["median"])
            best_ref = max(best_ref, res.reference_gflops["max"])
            label, kernel, peak = res.reference, res.reference_kernel, res.peak or peak
    if not ref_medians:
        raise InfraError("no shipped parallel kernel ran: no reference timing on "
                         f"{threads} thread(s) to calibrate from")
    ref_medians.sort()
    median = ref_medians[len(ref_medians) // 2]
    name = label.split(" ")[0] + " (reference)"
    rows.insert(0, Row(name, "ok", median, best_ref, 100.0))
    path = store_roof(threads, problem.shape,
                      {"gflops": best_ref, "median": median, "reference": label,
                       "reference_kernel": kernel, "peak": peak})  # fmt: skip
    return Calibration(best_ref, rows, str(path), peak)
