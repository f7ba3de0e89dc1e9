"""Calibration: the machine's roof (trusted OpenBLAS through the harness) and the project's
reference kernels, as a table with percent of the roof.

The roof is the best (max) GFLOPS of OpenBLAS over `max(repetitions, 20)` timed calls, run by
the same driver and sandbox as every completion (only validation is skipped: the code is ours).
It is stored by roof.store_roof for the plausibility cap.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from importlib import resources

from hargo_hpc.bench.build import InfraError
from hargo_hpc.bench.roof import openblas_library, store_roof
from hargo_hpc.bench.runner import BenchRequest, BenchResult, Problem, run_bench
from hargo_hpc.bench.settings import BenchSettings

REFERENCE_KERNELS = ("naive", "reordered", "blocked", "openmp", "simd")


def kernel_source(name: str) -> str:
    """Source of a shipped kernel (hargo_hpc/bench/kernels/<name>.c)."""
    return resources.files("hargo_hpc.bench").joinpath("kernels", f"{name}.c").read_text()


def openblas_result(
    settings: BenchSettings, problem: Problem, *, cache_dir: str | None = None
) -> BenchResult:
    """OpenBLAS DGEMM timed by the harness (trusted path), or raises InfraError."""
    found = openblas_library()
    if not found:
        raise InfraError("no trusted OpenBLAS (numpy's bundled one, or set HARGO_OPENBLAS)")
    lib, symbol = found
    int64 = symbol.endswith("64_") or os.environ.get("HARGO_OPENBLAS_INT64") == "1"
    code = (
        f"#define HARGO_CBLAS {symbol}\n#define HARGO_BLASINT {'long' if int64 else 'int'}\n"
        + kernel_source("openblas")
    )
    reps = settings.model_copy(update={"repetitions": max(settings.repetitions, 20)})
    req = BenchRequest(id="calibrate-openblas", completion=code, problem=problem)
    link = [lib, f"-Wl,-rpath,{os.path.dirname(lib)}"]
    res = run_bench(req, reps, cache_dir=cache_dir, trusted_link=link, roof=math.inf)
    if res.status != "ok":
        raise InfraError(f"OpenBLAS calibration failed: {res.status}: {res.reason} {res.output}")
    return res


def _store(blas: BenchResult, problem: Problem) -> str:
    """Store OpenBLAS's best call as the roof of this host, thread count and shape."""
    record = {"gflops": blas.gflops["max"], "median": blas.gflops["median"]}
    return str(store_roof(blas.threads, problem.shape, record))


@dataclass
class Row:
    kernel: str
    status: str
    median: float | None
    best: float | None
    percent_of_roof: float | None


def calibrate(
    settings: BenchSettings, problem: Problem, *, cache_dir: str | None = None
) -> tuple[float, list[Row], str]:
    """(roof GFLOPS, table rows, where the roof was stored).

    Every row's percentage is its median GFLOPS over the roof (OpenBLAS's best call)."""
    blas = openblas_result(settings, problem, cache_dir=cache_dir)
    roof = blas.gflops["max"]
    path = _store(blas, problem)
    rows = [Row("openblas (roof)", "ok", blas.gflops["median"], roof,
                100.0 * blas.gflops["median"] / roof)]  # fmt: skip
    for name in REFERENCE_KERNELS:
        req = BenchRequest(id=f"calibrate-{name}", completion=kernel_source(name), problem=problem)
        res = run_bench(req, settings, cache_dir=cache_dir, roof=roof)
        g = res.gflops or {}
        pct = 100.0 * g["median"] / roof if g else None
        rows.append(Row(name, res.status, g.get("median"), g.get("max"), pct))
    return roof, rows, path
