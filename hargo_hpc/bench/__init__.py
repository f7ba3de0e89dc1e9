"""Compile-and-time of untrusted DGEMM kernels: validation, sandboxed compile and run,
verification, timing, status and reward.

    run_request(request: dict, settings, *, cache_dir=None) -> dict   # handoff contract
    run_bench(BenchRequest, settings, ...) -> BenchResult             # typed API

Read top to bottom: contract.py (the request), status.py, extract.py, techniques.py,
validate.py, namespaces.py, defences.py, sandbox.py, cache.py, build.py, judge.c, kernel_main.c,
uids.py, reference.py, judge_args.py, verdict.py, result.py, runner.py, reward.py, roof.py,
calibrate.py; the command is `cli/bench.py`. docs/bench.md has the rest. The names below are
imported on first use: `contract`, `settings`, `status` and `techniques` stay light (the config
imports the last three on a login node, the handoff's schema the first).
"""

from hargo_hpc._lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "HARNESS_VERSION": "hargo_hpc.bench.result",
    "BenchRequest": "hargo_hpc.bench.contract",
    "BenchResult": "hargo_hpc.bench.result",
    "Problem": "hargo_hpc.bench.result",
    "run_bench": "hargo_hpc.bench.runner",
    "run_request": "hargo_hpc.bench.runner",
    "BenchSettings": "hargo_hpc.bench.settings",
    "Penalties": "hargo_hpc.bench.settings",
})
