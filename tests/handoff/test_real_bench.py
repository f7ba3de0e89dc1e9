"""End to end through the real compile-and-time bench (`hargo_hpc.bench.run_request`).

Written against the bench contract: request {id, completion, problem?, forbidden?, stage?} ->
record {request_id, status, reward, ...}. Needs a C compiler, as the bench does.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from hargo_hpc.bench.calibrate import kernel_source
from hargo_hpc.handoff import Dispatch, HandoffSettings, Trainer

from .conftest import running_workers

NAIVE = f"Here is my kernel:\n```c\n{kernel_source('naive')}```\n"  # as a chat model answers
BROKEN = "```c\nvoid gemm(int M, int N, int K, const double *A, const double *B, double *C) {\n"
PROSE = "I would rather not write any code today."


@pytest.mark.slow
def test_real_bench_end_to_end(root: Path, tmp_path: Path) -> None:
    from hargo_hpc.bench import run_request
    from hargo_hpc.bench.settings import BenchSettings

    probe = run_request({"id": "probe", "completion": PROSE}, BenchSettings())
    assert probe.get("request_id") == "probe", (
        f"bench contract: the record must carry request_id (it has: {sorted(probe)[:8]}...)"
    )
    bench = BenchSettings(size=64, check_size=17, repetitions=1, warmup=0, threads=1,
                          flags=["-O2"], cache_dir=str(tmp_path / "cache"))
    settings = HandoffSettings(lease_s=5.0, poll_interval_s=0.05, step_timeout_s=240)
    trainer = Trainer(root, settings, progress=False)
    problem = {"size": 64, "check_size": 17}
    trainer.submit(0, [
        {"id": "naive", "kind": "gemm",
         "payload": {"completion": NAIVE, "problem": problem, "stage": 0, "forbidden": []}},
        {"id": "broken", "kind": "gemm", "payload": {"completion": BROKEN, "problem": problem}},
        {"id": "prose", "kind": "gemm", "payload": {"completion": PROSE, "problem": problem}},
        {"id": "other", "kind": "unit_tests", "payload": {"completion": PROSE}},
    ])
    workload = Dispatch(SimpleNamespace(bench=bench))  # each request by its kind's workload
    with running_workers(root, workload, settings, count=2):
        results = trainer.collect(0)
    other = results.pop("other")  # a kind no workload is registered for: never scored
    assert other["status"] == "infra_error" and not other["scored"]
    assert "no workload for request kind 'unit_tests'" in other["error"]
    assert results["naive"]["status"] == "ok", results["naive"]
    assert isinstance(results["naive"]["reward"], float) and results["naive"]["scored"]
    assert results["broken"]["status"] in {"compile_error", "format_violation"}
    assert results["prose"]["status"] == "format_violation"
    assert all(r["request_id"] == rid for rid, r in results.items())
    assert all(r["handoff"]["attempt"] == 1 for r in results.values())
