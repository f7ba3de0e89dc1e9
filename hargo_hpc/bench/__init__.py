"""Compile-and-time of untrusted DGEMM kernels: validation, sandboxed compile and run,
verification, timing, status and reward.

    run_request(request: dict, settings, *, cache_dir=None) -> dict   # handoff contract
    run_bench(BenchRequest, settings, ...) -> BenchResult             # dataclass API

Read top to bottom: extract.py, techniques.py, validate.py, sandbox.py, cache.py, build.py,
driver.c, runner.py, reward.py, roof.py, calibrate.py, commands.py.  docs/bench.md has the rest.
"""

from hargo_hpc.bench.runner import (
    HARNESS_VERSION,
    BenchRequest,
    BenchResult,
    Problem,
    run_bench,
    run_request,
)
from hargo_hpc.bench.settings import BenchSettings, Penalties

__all__ = [
    "HARNESS_VERSION",
    "BenchRequest",
    "BenchResult",
    "BenchSettings",
    "Penalties",
    "Problem",
    "run_bench",
    "run_request",
]
