"""A kernel faster than anything shipped (benchmarks/kernels/avx512_8x16.c: packed AVX-512 8x16
micro-kernel) is judged ok and rewarded, never suspicious below the node's peak; the reference's
OpenBLAS core is asked of the library itself. No timing assertions (this VM is noisy)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hargo_hpc.bench import run_request
from hargo_hpc.bench.peak import machine_flags
from hargo_hpc.bench.reference import cpu_level, openblas_corename
from hargo_hpc.bench.roof import openblas_library

AVX512 = Path(__file__).resolve().parents[2] / "benchmarks" / "kernels" / "avx512_8x16.c"
needs_avx512 = pytest.mark.skipif(cpu_level(machine_flags()) < 3,
                                  reason="the CPU has no AVX-512 (Skylake-X set)")  # fmt: skip


@needs_avx512
@pytest.mark.parametrize("problem", [{}, {"M": 33, "N": 70, "K": 65, "check_size": 19},
                                     {"M": 8, "N": 16, "K": 300, "check_size": 9}])  # fmt: skip
def test_the_avx512_kernel_is_ok_and_rewarded(problem, settings, cache_dir, run_tmp) -> None:
    rec = run_request({"id": "avx512", "completion": AVX512.read_text(), "problem": problem},
                      settings, cache_dir=cache_dir)  # fmt: skip
    assert rec["status"] == "ok", (rec["reason"], rec["output"])
    assert not rec["suspicious"] and rec["reward"] > 0
    assert "simd" in rec["techniques"] and "openmp" in rec["techniques"]
    assert rec["gflops"]["median"] < rec["peak"]["bound"]


def test_the_library_reports_its_core_and_honours_a_type() -> None:
    found = openblas_library()
    if found is None:
        pytest.skip("no OpenBLAS")
    lib, symbol = found
    own = openblas_corename(lib, symbol, "")
    assert own, "OpenBLAS reports no core name"
    if cpu_level(machine_flags()) >= 2:  # a forced, supported type is what it then runs
        assert openblas_corename(lib, symbol, "Haswell") == "Haswell"
    assert openblas_corename("/nonexistent/libopenblas.so", symbol, "") == ""
