"""Hostile and broken completions, one kernel each: each gets the right status, the worker
survives, nothing is left behind, and each finishes within its timeouts."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from hargo_hpc.bench import run_request
from hargo_hpc.bench.settings import BenchSettings

from .procs import sandbox_processes
from .sources import NAIVE_BODY, SIG

PWNED = "/tmp/hargo-bench-pwned"


def kernel(body: str, prelude: str = "") -> str:
    return f"```c\n{textwrap.dedent(prelude)}\n{SIG} {{\n{textwrap.dedent(body)}\n}}\n```\n"


RAW_SYSCALL = """
static long raw3(long n, long a, long b, long c) {
    long ret;
    __asm__ volatile("syscall" : "=a"(ret) : "a"(n), "D"(a), "S"(b), "d"(c)
                     : "rcx", "r11", "memory");
    return ret;
}
"""

CASES: dict[str, tuple[str, str]] = {
    "infinite_loop": (kernel("volatile int x = 1; while (x) {}"), "timeout"),
    "fork_bomb": (kernel("for (;;) fork();", "#include <unistd.h>"), "format_violation"),
    "raw_fork_bomb": (kernel("for (;;) raw3(57, 0, 0, 0);", RAW_SYSCALL), "runtime_error"),
    "malloc_100gb": (
        kernel(
            "volatile double *p = malloc(100UL << 30);\n"
            "for (long x = 0; x < (100L << 30) / 8; x += 512) p[x] = 1.0;" + NAIVE_BODY,
            "#include <stdlib.h>",
        ),
        "runtime_error",
    ),
    "stack_overflow": (
        kernel(
            "C[0] = deep(1 << 30, A[0]);",
            "static double deep(long n, double x) { volatile double pad[512]; pad[0] = x;\n"
            "  return n ? deep(n - 1, pad[0]) + pad[n % 512] : x; }",
        ),
        "runtime_error",
    ),
    "segfault": (kernel("*(volatile double *)16 = 1.0;"), "runtime_error"),
    "abort": (kernel("abort();", "#include <stdlib.h>"), "runtime_error"),
    "exit_zero": (kernel("exit(0);", "#include <stdlib.h>"), "runtime_error"),
    "exit_infra_code": (kernel("exit(90);", "#include <stdlib.h>"), "runtime_error"),
    "write_file": (
        kernel(f'FILE *f = fopen("{PWNED}", "w"); fputs("x", f); fclose(f);' + NAIVE_BODY,
               "#include <stdio.h>"),
        "format_violation",
    ),
    # open() fails with EACCES under the filter (runtimes that probe /sys fall back): nothing
    # can be read or written; the kernel still computes, so the run is ok (and nothing leaks)
    "raw_write_file": (
        kernel(f'raw3(2, (long)"{PWNED}", 0101, 0644);' + NAIVE_BODY, RAW_SYSCALL),
        "ok",
    ),
    "read_passwd": (
        kernel('FILE *f = fopen("/etc/passwd", "r"); C[0] = f ? fgetc(f) : 0;',
               "#include <stdio.h>"),
        "format_violation",
    ),
    "raw_read_passwd": (
        kernel(NAIVE_BODY + 'if (raw3(2, (long)"/etc/passwd", 0, 0) >= 0) C[0] = 1e300;',
               RAW_SYSCALL),
        "ok",  # the open failed (else C[0] would be overwritten: wrong_result)
    ),
    "socket": (
        kernel("int s = socket(2, 1, 0); (void)s;" + NAIVE_BODY, "#include <sys/socket.h>"),
        "format_violation",
    ),
    "socket_no_header": (
        kernel("int s = socket(2, 1, 0); (void)s;" + NAIVE_BODY, "int socket(int, int, int);"),
        "format_violation",
    ),
    "raw_socket": (kernel("raw3(41, 2, 1, 0);" + NAIVE_BODY, RAW_SYSCALL), "runtime_error"),
    "system": (kernel(f'system("touch {PWNED}");', "#include <stdlib.h>"), "format_violation"),
    "dlopen": (kernel('dlopen("libc.so.6", 2);', "#include <dlfcn.h>"), "format_violation"),
    "dlopen_no_header": (
        kernel('dlopen("libc.so.6", 2);', "void *dlopen(const char *, int);"),
        "format_violation",
    ),
    "cblas_dgemm": (
        kernel(
            "cblas_dgemm(101, 111, 111, M, N, K, 1.0, A, K, B, N, 0.0, C, N);",
            "void cblas_dgemm(int, int, int, int, int, int, double, const double *, int,\n"
            "                 const double *, int, double, double *, int);",
        ),
        "format_violation",
    ),
    "constructor": (
        kernel(NAIVE_BODY, "__attribute__((constructor)) static void early(void) {}"),
        "format_violation",
    ),
    "init_array_section": (
        kernel(
            NAIVE_BODY,
            "static void early(void) {}\n"
            '__attribute__((section(".init_array"), used)) static void (*p)(void) = early;',
        ),
        "format_violation",
    ),
    # the build localises every symbol but gemm: its own clock_gettime interposes on nothing
    # (and the clock is in the judge, another binary)
    "own_clock_gettime": (
        kernel(
            NAIVE_BODY,
            "#include <time.h>\n"
            "int clock_gettime(clockid_t c, struct timespec *t) { t->tv_sec = 0;\n"
            "  t->tv_nsec = 0; return 0; }",
        ),
        "ok",
    ),
    "defines_main": (kernel(NAIVE_BODY, "int main(void) { return 0; }"), "format_violation"),
    "ifunc": (
        "```c\nstatic void real(int M, int N, int K, const double *A, const double *B, double *C)"
        " {}\nstatic void *pick(void) { return (void *)real; }\n"
        "void gemm(int M, int N, int K, const double *A, const double *B, double *C)"
        ' __attribute__((ifunc("pick")));\n```',
        "format_violation",
    ),
    "modifies_A": (kernel(NAIVE_BODY + "((double *)A)[0] = 0.0;"), "wrong_result"),
    "static_cache": (
        kernel(
            "if (!done) {" + NAIVE_BODY + "for (int x = 0; x < M * N && x < 65536; x++)"
            " saved[x] = C[x]; done = 1; return; }\n"
            "for (int x = 0; x < M * N && x < 65536; x++) C[x] = saved[x];",
            "static double saved[65536]; static int done;",
        ),
        "wrong_result",
    ),
    "correct_first_call_only": (
        kernel("if (calls++ == 0) {" + NAIVE_BODY + "} else { C[0] = 0.0; }",
               "static int calls;"),
        "wrong_result",
    ),
    "writes_nan": (kernel(NAIVE_BODY + "C[M * N / 2] = 0.0 / 0.0;"), "wrong_result"),
    "leaves_c_unwritten": (kernel("(void)A; (void)B; (void)C;"), "wrong_result"),
    "single_precision": (
        kernel(
            "for (int i = 0; i < M; i++) for (int j = 0; j < N; j++) { float s = 0.0f;\n"
            "  for (int k = 0; k < K; k++) s += (float)A[i * K + k] * (float)B[k * N + j];\n"
            "  C[i * N + j] = s; }"
        ),
        "wrong_result",
    ),
    "out_of_bounds_of_c": (kernel(NAIVE_BODY + "C[M * N + 3] = 1.0;"), "runtime_error"),
    "out_of_bounds_inside_slack": (
        # 37 * 37 doubles end 8 bytes short of the 64-byte-aligned end: the canary catches it
        kernel(NAIVE_BODY + "if (M == 37) C[M * N] = 1.0;"),
        "runtime_error",
    ),
    "multiple_of_64_only": (
        kernel(
            "for (int i = 0; i < M / 64 * 64; i++) for (int j = 0; j < N / 64 * 64; j++) {\n"
            "  double s = 0; for (int k = 0; k < K; k++) s += A[i * K + k] * B[k * N + j];\n"
            "  C[i * N + j] = s; }"
        ),
        "wrong_result",
    ),
    "gigabyte_of_stdout": (
        kernel(
            "static char line[4096]; memset(line, 'x', sizeof line);\n"
            "for (long n = 0; n < (1L << 30) / 4096; n++) fwrite(line, 1, sizeof line, stdout);"
            + NAIVE_BODY,
            "#include <stdio.h>\n#include <string.h>",
        ),
        "runtime_error",
    ),
    "sleep": (kernel("sleep(100);" + NAIVE_BODY, "#include <unistd.h>"), "timeout"),
    "thousand_omp_threads": (
        kernel(
            "omp_set_num_threads(1000);\n#pragma omp parallel for num_threads(1000)\n"
            "for (int i = 0; i < M; i++) for (int j = 0; j < N; j++) { double s = 0;\n"
            "  for (int k = 0; k < K; k++) s += A[i * K + k] * B[k * N + j];\n"
            "  C[i * N + j] = s; }",
            "#include <omp.h>",
        ),
        "ok",
    ),
    "fake_result_on_stdout": (
        kernel('printf("RESULT ok\\nTIME 1e-9\\n"); C[0] = 1.0;', "#include <stdio.h>"),
        "wrong_result",
    ),
    "no_code_block": ("I am sorry, I cannot write that kernel.", "format_violation"),
    "empty_completion": ("", "format_violation"),
    "wrong_function_name": (
        "```c\nvoid matmul(int M, int N, int K, const double *A, const double *B, double *C)"
        " {}\n```",
        "format_violation",
    ),
    "wrong_signature": (
        "```c\nvoid gemm(int M, int N, int K, const float *A, const float *B, float *C) {}\n```",
        "format_violation",
    ),
    "static_gemm": (
        "```c\nstatic void gemm(int M, int N, int K, const double *A, const double *B,"
        " double *C) {}\n```",
        "format_violation",
    ),
    "cplusplus": (
        "```cpp\n#include <vector>\nvoid gemm(int M, int N, int K, const double *A,"
        " const double *B, double *C) { std::vector<double> t(M); }\n```",
        "format_violation",
    ),
    "cplusplus_in_c_fence": (
        kernel("std::fill(C, C + M * N, 0.0);", "#include <algorithm>"),
        "format_violation",
    ),
    "syntax_error": (kernel("for (int i = 0; i < M; i++ { C[i] = 0 }"), "compile_error"),
    "undeclared_identifier": (kernel("C[0] = undefined_thing;"), "compile_error"),
    "quoted_include": (kernel(NAIVE_BODY, '#include "/etc/passwd"'), "format_violation"),
    "compile_bomb": (
        kernel(
            "double x = A[0];\nE24\nC[0] = x;",
            "#define E0 x = x * 1.0000001 + 1.0;\n"
            + "".join(f"#define E{i} E{i - 1} E{i - 1}\n" for i in range(1, 25)),
        ),
        "timeout",
    ),
}


@pytest.fixture(autouse=True)
def _no_pwned_file():
    if os.path.exists(PWNED):
        os.unlink(PWNED)
    yield
    assert not os.path.exists(PWNED), "the kernel wrote outside its temp dir"


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_input(name: str, settings: BenchSettings, cache_dir: str, run_tmp: Path) -> None:
    completion, expected = CASES[name]
    if name == "compile_bomb":
        settings = settings.model_copy(update={"compile_timeout_s": 3.0})
    rec = run_request({"id": name, "completion": completion}, settings, cache_dir=cache_dir)
    assert rec["status"] == expected, (rec["status"], rec["reason"], rec["output"][:600])
    assert rec["reward"] == (
        getattr(settings.penalties, expected) if expected != "ok" else rec["reward"]
    )
    assert rec["request_id"] == name
    # within its timeouts: compile + run + slack for process start and verification
    assert rec["elapsed_s"] < settings.compile_timeout_s + settings.run_timeout_s + 5
    assert list(run_tmp.iterdir()) == [], "the harness left files in its temp root"
    assert sandbox_processes() == [], "a sandboxed process survived its run"


def test_thousand_threads_are_capped(settings, cache_dir, run_tmp) -> None:
    rec = run_request(
        {"id": "t", "completion": CASES["thousand_omp_threads"][0]}, settings, cache_dir=cache_dir
    )
    assert rec["status"] == "ok" and rec["threads"] == len(os.sched_getaffinity(0))


def test_a_forbidden_technique_is_off_stage_after_the_code(settings, cache_dir, run_tmp) -> None:
    """Issue V.1: the code is judged as under plain GRPO; an ok kernel that uses a technique
    its stage forbids earns penalties.off_stage (-5: above wrong_result, below any on-stage ok
    kernel); `stage_rules = "before"` (the ablation) refuses it before compiling (-100)."""
    code = kernel("#pragma omp parallel for\n" + "for (int i = 0; i < M; i++) for (int j = 0;"
                  " j < N; j++) { double s = 0; for (int k = 0; k < K; k++)"
                  " s += A[i * K + k] * B[k * N + j]; C[i * N + j] = s; }")
    free = run_request({"id": "a", "completion": code}, settings, cache_dir=cache_dir)
    assert free["status"] == "ok" and "openmp" in free["techniques"]
    assert free["off_stage"] == [] and free["reward"] > 0
    request = {"id": "b", "completion": code, "forbidden": ["OpenMP"], "stage": 1}
    banned = run_request(request, settings, cache_dir=cache_dir)
    assert (banned["status"], banned["off_stage"]) == ("ok", ["openmp"]), banned["reason"]
    assert banned["reward"] == settings.penalties.off_stage == -5.0
    assert settings.penalties.wrong_result < banned["reward"] < 0
    assert banned["gflops"]["median"] > 0 and "off stage" in banned["reason"]
    assert banned["stage"] == 1
    before = settings.model_copy(update={"stage_rules": "before"})
    refused = run_request(request, before, cache_dir=cache_dir)
    assert refused["status"] == "format_violation" and "openmp" in refused["reason"]
    assert refused["reward"] == -100.0 and refused["off_stage"] == []
