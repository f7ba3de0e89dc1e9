"""Requests side by side (a worker with several threads, or several workers on one node): each
gets its own uid, their timed runs take turns on shared CPUs, and an honest request next to a
hostile one (threads that spin on every CPU) still ends ok. Its reward next to the hostile one
is measured by benchmarks/bench_harness.py."""

from __future__ import annotations

import os
import threading

import pytest

from hargo_hpc.bench import run_request
from hargo_hpc.bench.cpulocks import cpus_held
from hargo_hpc.bench.reference import kernel_source
from hargo_hpc.bench.sandbox import InfraError

from .procs import sandbox_processes

HOSTILE = r"""
void gemm(int M, int N, int K, const double *A, const double *B, double *C) {
    #pragma omp parallel num_threads(64)
    {
        volatile double x = 0;
        for (long i = 0; i < 100000000L; i++) x += 1e-9;  /* crowd every CPU, every call */
    }
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0;
            for (int k = 0; k < K; k++) s += A[i * K + k] * B[k * N + j];
            C[i * N + j] = s;
        }
}
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="uids are leased only as root")
def test_side_by_side_requests_have_their_own_uids_and_the_honest_one_is_ok(
    settings, cache_dir, run_tmp
) -> None:
    records: dict[str, dict] = {}

    def run(name: str, code: str) -> None:
        records[name] = run_request({"id": name, "completion": code}, settings,
                                    cache_dir=cache_dir)  # fmt: skip

    # the hostile request outlasts the honest one (~0.15 s per call), so their uid leases overlap
    hostile = threading.Thread(target=run, args=("hostile", HOSTILE))
    hostile.start()
    run("honest", kernel_source("blocked"))
    hostile.join(timeout=120)
    honest, bad = records["honest"], records["hostile"]
    assert honest["status"] == "ok" and honest["reward"] > 0, honest["reason"]
    assert bad["status"] in ("ok", "timeout"), bad["reason"]  # it computes, slowly
    uids = [{x for x in rec["sandbox"] if x.startswith("uid:")} for rec in (honest, bad)]
    assert uids[0] and uids[1] and uids[0] != uids[1]
    assert sandbox_processes() == []


def test_timed_runs_sharing_a_cpu_take_turns(tmp_path, monkeypatch) -> None:
    """cpulocks: a run holds every CPU of its mask; another run on one of them waits (bounded)."""
    monkeypatch.setenv("HARGO_CPU_LOCK_DIR", str(tmp_path))
    held, order = threading.Event(), []
    release = threading.Event()

    def first() -> None:
        with cpus_held({0, 1}, 5.0):
            order.append("first in")
            held.set()
            release.wait(5)
            order.append("first out")

    thread = threading.Thread(target=first)
    thread.start()
    assert held.wait(5)
    with pytest.raises(InfraError, match="CPU 1 stayed busy"), cpus_held({1}, 0.05):
        pass
    with cpus_held({2}, 0.05):  # a disjoint CPU does not wait
        order.append("other cpu")
    release.set()
    with cpus_held({1, 0}, 5.0):
        order.append("second in")
    thread.join(5)
    assert order == ["first in", "other cpu", "first out", "second in"]
