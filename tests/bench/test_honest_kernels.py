"""No honest kernel refused for what the contract allows: non-static helpers and file-scope
scratch arrays (their symbols are made local, also as -fcommon commons), attributes before the
function name, and an `omp target` kernel with host fallback. Each ends `ok`."""

from __future__ import annotations

import pytest

from hargo_hpc.bench import run_request
from hargo_hpc.bench.techniques import detect_techniques
from hargo_hpc.bench.validate import Violation, check_source

from .sources import SIG

PARAMS = SIG.removeprefix("void gemm")
LOOPS = """
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) C[i * N + j] = dot(A + (long)i * K, B + j, K, N);
"""
DOT = """
double dot(const double *a, const double *b, int K, int N) {
    double s = 0.0;
    for (int k = 0; k < K; k++) s += a[k] * b[(long)k * N];
    return s;
}
"""
SCRATCH = """
double scratch[4096];  /* file scope, not static: a tentative definition (common under -fcommon) */
int calls;
double dot(const double *a, const double *b, int K, int N) {
    calls++;
    for (int k = 0; k < K && k < 4096; k++) scratch[k] = b[(long)k * N];
    double s = 0.0;
    for (int k = 0; k < K; k++) s += a[k] * (k < 4096 ? scratch[k] : b[(long)k * N]);
    return s;
}
"""
INLINE_DOT = DOT.replace("double dot(", "static inline __attribute__((always_inline)) double dot(")

KERNELS = {
    "non_static_helper": (DOT + SIG + " {" + LOOPS + "}\n", []),
    "file_scope_scratch": (SCRATCH + SIG + " {" + LOOPS + "}\n", []),
    "file_scope_scratch_fcommon": (SCRATCH + SIG + " {" + LOOPS + "}\n", ["-fcommon"]),
    "attribute_hot": (DOT + "void __attribute__((hot)) gemm" + PARAMS + " {" + LOOPS + "}\n",
                      []),
    "attribute_optimize": (
        DOT + '__attribute__((optimize("O3"))) void gemm' + PARAMS + " {" + LOOPS + "}\n", []),
    "static_inline_attributes": (
        INLINE_DOT + "__attribute__((hot, flatten)) void __attribute__((noinline)) gemm" + PARAMS
        + " {" + LOOPS + "}\n", []),
    "omp_target_host_fallback": ("""
void gemm(int M, int N, int K, const double *A, const double *B, double *C) {
#pragma omp target teams distribute parallel for map(to: A[0:M*K], B[0:K*N]) map(from: C[0:M*N])
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0.0;
            for (int k = 0; k < K; k++) s += A[i * K + k] * B[k * N + j];
            C[i * N + j] = s;
        }
}
""", []),
}


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_honest_kernel_is_ok(name, settings, cache_dir, run_tmp) -> None:
    code, flags = KERNELS[name]
    settings = settings.model_copy(update={"flags": [*settings.flags, *flags]})
    rec = run_request({"id": name, "completion": f"```c\n{code}```\n"}, settings,
                      cache_dir=cache_dir)  # fmt: skip
    assert rec["status"] == "ok", (rec["status"], rec["reason"], rec["output"][:600])
    assert rec["reward"] is not None and rec["reward"] > 0


def test_attributes_still_cannot_hide_a_constructor() -> None:
    code = ('__attribute__((optimize("O3"), constructor)) static void early(void) {}\n'
            + SIG + " {}\n")  # fmt: skip
    with pytest.raises(Violation, match="constructor"):
        check_source(code)
    # a static gemm is the compiler's to refuse now ("static declaration of 'gemm' follows
    # non-static": format_violation, test_bounded_and_honest.py), not the text check's
    check_source("static __attribute__((hot)) void gemm" + PARAMS + " {}\n")


def test_omp_target_counts_as_openmp() -> None:
    assert detect_techniques(KERNELS["omp_target_host_fallback"][0]) == ["openmp"]
