"""The judge, the second line of defence: kernels built WITHOUT the source and object checks
(statically linked here by the test itself, as an attacker who got past validation would have
them) run under judge.c. Load-time hooks (constructors, ifunc resolvers) run only in the
kernel's child, after its uid drop and seccomp filter, so they can neither forge a verdict nor
read, write or leave anything behind; guard pages made writable are seen; untimed calls have
their own budget; a binary too big to load is the kernel's failure.

Each of these ended differently with the two-process driver of harness 1.x, where the kernel was
linked into the judge's own binary: a constructor ran in the judge before the fork."""

from __future__ import annotations

import os
import subprocess
import textwrap
from pathlib import Path

import pytest

from hargo_hpc.bench.build import Build, harness, resolve_compiler
from hargo_hpc.bench.cache import CompileCache
from hargo_hpc.bench.judge_args import JudgeArgs
from hargo_hpc.bench.reference import kernel_source, reference
from hargo_hpc.bench.result import (
    BenchRequest,
    BenchResult,
    JudgeRun,
    Problem,
    Stages,
    make_record,
)
from hargo_hpc.bench.runner import _execute
from hargo_hpc.bench.sandbox import sandbox_ids
from hargo_hpc.bench.settings import BenchSettings
from hargo_hpc.bench.uids import leased_uid
from hargo_hpc.bench.verdict import JudgeExit, parse_verdict

from .procs import sandbox_processes
from .sources import SIG

NAIVE = kernel_source("naive")
OUTSIDE = Path("/tmp/hargo-judge-test-pwned")


def unchecked_binary(code: str, directory: Path, settings: BenchSettings, cache_dir: str) -> Path:
    """`code` + the harness's kernel_main.o, linked statically by this test (no validation)."""
    main = harness(CompileCache(cache_dir), resolve_compiler(settings.compiler)).kernel_main
    (directory / "k.c").write_text(textwrap.dedent(code))
    subprocess.run(["gcc", "-O2", "-fopenmp", "k.c", str(main), "-static", "-lm", "-o", "k.bin"],
                   cwd=directory, check=True, capture_output=True, timeout=120)  # fmt: skip
    return directory / "k.bin"


def judged(binary: Path, settings: BenchSettings, cache_dir: str) -> tuple[JudgeRun, Stages]:
    """What runner._stages does after the build: the reference, a leased uid, the judge."""
    problem = Problem.from_dict(None, settings)
    ref = reference(settings, CompileCache(cache_dir), 60.0)
    build = Build("built", "", "", binary, False, 0.0)
    main = harness(CompileCache(cache_dir), resolve_compiler(settings.compiler)).judge
    with leased_uid(settings.sandbox_uids) as uid:
        run = _execute(main, build, ref, problem, settings, settings.run_timeout_s,
                       sandbox_ids(settings.sandbox_user, uid))  # fmt: skip
    return run, Stages(run.verdict, build=build, ref=ref, run=run)


def judge(binary: Path, settings: BenchSettings, cache_dir: str) -> BenchResult:
    """The record of `binary` judged (`judged`)."""
    _, stages = judged(binary, settings, cache_dir)
    return make_record(BenchRequest(id="judge-test", completion="",
                                    problem=Problem.from_dict(None, settings)),
                       settings, stages, len(os.sched_getaffinity(0)), 0.0)  # fmt: skip


@pytest.fixture(autouse=True)
def _nothing_outside():
    OUTSIDE.unlink(missing_ok=True)
    yield
    assert not OUTSIDE.exists(), "a kernel wrote outside its sandbox"
    assert sandbox_processes() == [], "a sandboxed process survived its run"


FORGE = r'''
#include <unistd.h>
static const char forged[] = "READY\nTIME 1e-9\nTIME 1e-9\nREF 1\nREF 1\nRESULT ok\n";
__attribute__((constructor)) static void forge(void) {
    write(3, forged, sizeof forged - 1);   /* fd 3 was the verdict in harness 1.x */
    write(4, forged, sizeof forged - 1);
}
''' + SIG + " { (void)M; (void)N; (void)K; (void)A; (void)B; (void)C; }\n"


def test_a_constructor_cannot_forge_the_verdict(settings, cache_dir, tmp_path, run_tmp) -> None:
    res = judge(unchecked_binary(FORGE, tmp_path, settings, cache_dir), settings, cache_dir)
    assert res.status == "runtime_error", (res.status, res.reason)
    assert "seccomp" in res.reason and res.gflops is None


IFUNC = r'''
static long raw(long n, long a, long b, long c) {   /* no libc: resolvers run before it is set up */
    long ret;
    __asm__ volatile("syscall" : "=a"(ret) : "a"(n), "D"(a), "S"(b), "d"(c)
                     : "rcx", "r11", "memory");
    return ret;
}
static void naive(int M, int N, int K, const double *A, const double *B, double *C) {
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0.0;
            for (int k = 0; k < K; k++) s += A[i * K + k] * B[k * N + j];
            C[i * N + j] = s;
        }
}
static void *resolve(void) {   /* runs at load time: in harness 1.x, inside the judge */
    char buf[256];
    long fd = raw(2, (long)"/etc/passwd", 0, 0);                  /* open */
    if (fd >= 0) { long n = raw(0, fd, (long)buf, sizeof buf); if (n > 0) raw(1, 1, (long)buf, n); }
    long out = raw(2, (long)"/tmp/hargo-judge-test-pwned", 0101, 0644);
    if (out >= 0) raw(1, out, (long)"x", 1);
    raw(1, 3, (long)"RESULT ok\\n", 10);                          /* the old verdict fd */
    return (void *)naive;
}
''' + SIG + ' __attribute__((ifunc("resolve")));\n'


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="x86-64 system call numbers")
def test_an_ifunc_resolver_runs_filtered_in_the_kernel_process(settings, cache_dir, tmp_path,
                                                                run_tmp) -> None:  # fmt: skip
    # open gets EACCES, so nothing is read or created; the write to fd 3 kills it (SIGSYS)
    res = judge(unchecked_binary(IFUNC, tmp_path, settings, cache_dir), settings, cache_dir)
    assert res.status == "runtime_error" and "seccomp" in res.reason, (res.status, res.reason)
    assert "root:" not in res.output


DAEMON = r'''
#include <unistd.h>
__attribute__((constructor)) static void daemonise(void) {
    if (fork() == 0) { setsid(); for (;;) pause(); }
}
''' + NAIVE


def test_a_constructor_cannot_leave_a_process_behind(settings, cache_dir, tmp_path,
                                                      run_tmp) -> None:  # fmt: skip
    res = judge(unchecked_binary(DAEMON, tmp_path, settings, cache_dir), settings, cache_dir)
    assert res.status == "runtime_error" and "seccomp" in res.reason, (res.status, res.reason)


LIAR = r'''
#include <sys/mman.h>
#include <unistd.h>
__attribute__((constructor)) static void lie(void) {
    /* write "set-up failed" into every field of the shared header, then die the way the
     * judge's own set-up code would: an infra_error here would be an unscored escape */
    int *p = mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, 3, 0);
    if (p != MAP_FAILED)
        for (int i = 0; i < 1024; i++) p[i] = 3;
    _exit(121);
}
''' + NAIVE


def test_a_kernel_cannot_pass_its_failure_off_as_the_machines(settings, cache_dir, tmp_path,
                                                              run_tmp) -> None:  # fmt: skip
    res = judge(unchecked_binary(LIAR, tmp_path, settings, cache_dir), settings, cache_dir)
    assert res.status == "runtime_error", (res.status, res.reason)


GUARD = r'''
#include <sys/mman.h>
''' + SIG + r''' {
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0.0;
            for (int k = 0; k < K; k++) s += A[i * K + k] * B[k * N + j];
            C[i * N + j] = s;
        }
    /* the page after C is a guard: make it writable and write into it */
    char *guard = (char *)(C + (long)M * N);
    if (mprotect(guard, 4096, PROT_READ | PROT_WRITE) == 0) guard[100] = 42;
}
'''


def test_an_unprotected_guard_page_written_is_caught(settings, cache_dir, tmp_path,
                                                      run_tmp) -> None:  # fmt: skip
    # 64 x 64 doubles = 8 pages exactly: C ends where its upper guard page begins
    res = judge(unchecked_binary(GUARD, tmp_path, settings, cache_dir), settings, cache_dir)
    assert res.status == "runtime_error" and "outside the buffers" in res.reason, res.reason


SLOW_WARMUP = r'''
#include <time.h>
''' + SIG + r''' {
    static int calls;
    if (calls++ == 0) {   /* only the untimed warm-up call is slow */
        struct timespec t = {30, 0};
        nanosleep(&t, 0);
    }
    for (int i = 0; i < M * N; i++) C[i] = 0;
    (void)K; (void)A; (void)B;
}
'''


def test_untimed_calls_have_their_own_small_budget(settings, cache_dir, tmp_path,
                                                    run_tmp) -> None:  # fmt: skip
    quick = settings.model_copy(update={"untimed_call_timeout_s": 1.0, "run_timeout_s": 20.0})
    binary = unchecked_binary(SLOW_WARMUP, tmp_path, quick, cache_dir)
    res = judge(binary, quick, cache_dir)
    assert res.status == "timeout" and "warm-up" in res.reason, (res.status, res.reason)
    assert res.run_s < 5.0  # not the run's 20 s


BIG = "static volatile double table[64L << 20];\n" + NAIVE.replace("C[(long)i * N + j] = sum;",
                                                         "C[(long)i * N + j] = sum + table[i];")


def test_a_binary_too_big_to_load_is_the_kernels_failure(settings, cache_dir, tmp_path,
                                                          run_tmp) -> None:  # fmt: skip
    small = settings.model_copy(update={"memory_limit_mb": 256})  # the table alone is 512 MB
    res = judge(unchecked_binary(BIG, tmp_path, small, cache_dir), small, cache_dir)
    assert res.status == "runtime_error" and "cannot be loaded" in res.reason, res.reason


# ------------------------------------------------------------------ tripwires, on records


def record(times: list[float], refs: list[float], cpu: list[tuple[float, float]],
           cpus: int | None = 2) -> list[str]:  # fmt: skip
    """A judge's transcript of an ok run; `cpus`: its CPUS line (None: a judge without one)."""
    return ["SANDBOX seccomp=on uid=61001 rt=on", "READY",
            *[f"TIME {t}" for t in times], *[f"REF {t}" for t in refs],
            *[f"CPU {c} {w}" for c, w in cpu], *([f"CPUS {cpus}"] if cpus else []),
            "KEYS 00", "RESULT ok"]  # fmt: skip


def parsed(lines: list[str], wall: float, threads: int = 2, peak: dict | None = None,
           kernel_threads: int | None = None) -> BenchResult:  # fmt: skip
    """The record of a 100^3 run whose judge wrote `lines` and ran `wall` seconds (on a node
    whose peak is `peak`, else this one's), `threads` allocated, the kernel's k
    `kernel_threads` (None: all of them)."""
    settings = BenchSettings(repetitions=2)
    problem = Problem(M=100, N=100, K=100)
    k = threads if kernel_threads is None else kernel_threads
    args = JudgeArgs("k.bin", "ref.bin", 100, 100, 100, 97, 97, 97, 1, 2, 2, 0, 0, -1, -1,
                     k, 1000, 1000, 1 << 20)  # fmt: skip
    verdict = parse_verdict(JudgeExit(0, None, False, wall, 10.0), lines, args)
    return make_record(BenchRequest(id="t", completion="", problem=problem), settings,
                       Stages(verdict), threads, 0.0, peak)  # fmt: skip


def test_the_reward_is_the_ratio_to_the_reference_of_the_same_run() -> None:
    # 2e6 FLOP: candidate 1 ms -> 2 GFLOPS, reference 0.5 ms -> 4 GFLOPS: scaled reward 50
    res = parsed(record([1e-3, 1e-3], [5e-4, 5e-4], [(1e-3, 1e-3)] * 2), wall=0.5)
    assert res.ratio == 0.5
    assert res.status == "ok" and res.gflops["median"] == 2.0
    assert res.reference_gflops["median"] == 4.0 and res.ratio == 0.5
    assert res.reward == pytest.approx(50.0) and not res.suspicious


def test_a_serial_kernel_is_rewarded_against_the_serial_reference_times_t() -> None:
    """Issue U 4: a serial kernel (k = 1) of a 2-thread request ran next to a 1-thread
    reference: 1 ms against 0.5 ms is q = (1 / 2) x 0.5 = 0.25, reward 25; the record says the
    reference ran on 1 thread and keeps the measured GFLOPS of both sides."""
    res = parsed(record([1e-3, 1e-3], [5e-4, 5e-4], [(1e-3, 1e-3)] * 2), wall=0.5,
                 kernel_threads=1)  # fmt: skip
    assert res.status == "ok" and res.ratio == 0.25 and res.reward == pytest.approx(25.0)
    assert res.threads == 2 and res.reference_threads == 1
    assert res.gflops["median"] == 2.0 and res.reference_gflops["median"] == 4.0


def parsed_on(lines: list[str], peak_bound: float, wall: float = 0.5) -> BenchResult:
    """`parsed` on a node whose peak bound is `peak_bound` GFLOPS (not this machine's)."""
    return parsed(lines, wall, peak={"gflops": peak_bound, "bound": peak_bound})


def at(gflops: float) -> float:
    """Seconds of one 100^3 call (2e6 FLOP) at `gflops`."""
    return 2e6 / (gflops * 1e9)


def test_faster_than_the_reference_is_ok_and_earns_more_than_slower() -> None:
    """Issue 24: an AVX-512 kernel at 152.2 GFLOPS against a Haswell-kernel reference at 95 was
    `suspicious` (over 1.10 x the reference's best call) and got 0, below a 76.9 GFLOPS kernel.
    Now both are ok, not suspicious, and the faster one earns more: q = 76.9 / 95 = 0.8095 ->
    80.95; q = 152.2 / 95 = 1.6021 -> 100 (2 - 1/q) = 137.58."""
    ref = [at(95.0)] * 2
    slow = parsed_on(record([at(76.9)] * 2, ref, [(at(76.9), at(76.9))] * 2), peak_bound=400.0)
    fast = parsed_on(record([at(152.2)] * 2, ref, [(at(152.2), at(152.2))] * 2),
                     peak_bound=400.0)  # fmt: skip
    for res in (slow, fast):
        assert res.status == "ok" and not res.suspicious, res.reason
    assert slow.reward == pytest.approx(100 * 76.9 / 95, rel=1e-4)
    assert fast.reward == pytest.approx(100 * (2 - 95 / 152.2), rel=1e-4)
    assert fast.reward > slow.reward


def test_above_the_nodes_peak_bound_is_suspicious() -> None:
    ref = [at(95.0)] * 2
    res = parsed_on(record([at(152.2)] * 2, ref, [(at(152.2), at(152.2))] * 2), peak_bound=150.0)
    assert res.status == "ok" and res.suspicious and res.reward == 0.0
    assert "theoretical peak" in res.reason


def test_the_record_carries_this_nodes_peak() -> None:
    res = parsed(record([1e-3, 1e-3], [5e-4, 5e-4], [(1e-3, 1e-3)] * 2), wall=0.5)
    p = res.peak
    assert p["cpus"] == 2 and p["gflops"] == pytest.approx(2 * p["ghz"] * p["flop_per_cycle"],
                                                           rel=1e-3)  # fmt: skip
    assert p["bound"] == pytest.approx(p["margin"] * p["gflops"], rel=1e-3)
    assert p["margin"] == BenchSettings().peak_margin and p["clock_source"] and p["isa"]


def test_an_impossible_timing_record_is_refused() -> None:
    res = parsed(record([0.3, 0.3], [0.2, 0.2], [(0.3, 0.3)] * 2), wall=0.9)  # 1.0 s in 0.9 s
    assert res.status == "runtime_error" and "impossible timing record" in res.reason


def test_cpu_outside_the_timed_window_is_flagged() -> None:
    # 2 threads x 1 ms = 2 ms of CPU at most; 9 ms means it ran while the clock was not looking
    res = parsed(record([1e-3, 1e-3], [5e-4, 5e-4], [(1e-3, 1e-3), (9e-3, 1e-3)]), wall=0.5)
    assert res.status == "ok" and res.suspicious and res.reward == 0.0
    assert res.reason == ("CPU time outside the timed window: 9.0 ms of CPU in a call of 1.0 ms, "
                          "more than its 2 CPU(s) can run in that time (2 threads given; 1 of 2 "
                          "timed calls over wall x threads)")  # fmt: skip
    # a serial run (threads = 1) on the same 2 CPUs: 9 ms in 1 ms is still outside the window
    res = parsed(record([1e-3, 1e-3], [5e-4, 5e-4], [(1e-3, 1e-3), (9e-3, 1e-3)]), wall=0.5,
                 threads=1)  # fmt: skip
    assert res.suspicious and res.reason.startswith("CPU time outside the timed window: 9.0 ms")


def test_a_serial_kernel_on_two_cpus_is_flagged_for_what_it_did() -> None:
    """Issue U.6: a serial run (threads = 1) whose kernel splits each call over two threads uses
    about twice its wall time in CPU, all of it inside the window; the flag said "it ran outside
    the timed window". Now it names what was seen, with the numbers."""
    cpu = [(1.9e-3, 1e-3), (2.04e-3, 1e-3)]
    res = parsed(record([1e-3, 1e-3], [5e-4, 5e-4], cpu), wall=0.5, threads=1)
    assert res.status == "ok" and res.suspicious and res.reward == 0.0
    assert res.reason == ("CPU time beyond the wall time of a serial kernel (threads = 1): 2.0 ms "
                          "of CPU in a call of 1.0 ms, 2.0 CPUs busy at once: it ran on more "
                          "of its 2 CPUs than the 1 thread it was given (2 of 2 timed calls)")
    assert "outside the timed window" not in res.reason
    # with more threads: the same words for wall x threads; within the slack: not flagged
    res = parsed(record([1e-3, 1e-3], [5e-4, 5e-4], [(3.9e-3, 1e-3)] * 2, cpus=4), wall=0.5)
    assert res.suspicious and res.reason.startswith("CPU time beyond wall time x 2 threads: 3.9 "
                                                    "ms of CPU in a call of 1.0 ms, 3.9 CPUs")
    assert not parsed(record([1e-3, 1e-3], [5e-4, 5e-4], [(1.2e-3, 1e-3)] * 2), wall=0.5,
                      threads=1).suspicious  # fmt: skip
    # a judge without the CPUS line: both readings named
    res = parsed(record([1e-3, 1e-3], [5e-4, 5e-4], cpu, cpus=None), wall=0.5, threads=1)
    assert res.suspicious and "more CPUs than the 1 thread it was given, or time outside the " \
        "timed window" in res.reason


SPLIT = r"""
#include <pthread.h>
#include <time.h>
struct half { int M, N, K, lo, hi; const double *A, *B; double *C; };
static void *rows(void *arg) {
    struct half *h = arg;
    struct timespec t0, t;   /* 3 ms of this thread's own CPU time, then its rows */
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
    do clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    while ((t.tv_sec - t0.tv_sec) * 1e9 + (t.tv_nsec - t0.tv_nsec) < 3e6);
    for (int i = h->lo; i < h->hi; i++)
        for (int j = 0; j < h->N; j++) {
            double s = 0.0;
            for (int k = 0; k < h->K; k++) s += h->A[i * h->K + k] * h->B[k * h->N + j];
            h->C[i * h->N + j] = s;
        }
    return 0;
}
""" + SIG + r""" {
    struct half top = {M, N, K, 0, M / 2, A, B, C}, bottom = {M, N, K, M / 2, M, A, B, C};
    pthread_t helper;
    int two = pthread_create(&helper, 0, rows, &bottom) == 0;
    rows(&top);
    if (two) pthread_join(helper, 0); else rows(&bottom);
}
"""


def test_a_serial_run_split_over_two_threads_is_not_called_outside_the_window(
        settings, cache_dir, run_tmp) -> None:  # fmt: skip
    """The same, for real: threads = 1 on this machine's CPUs, a kernel that runs half of each
    call on a second thread (3 ms of CPU each): the judge's CPUS line and CPU times name it."""
    from hargo_hpc.bench import run_request

    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs two CPUs")
    serial = settings.model_copy(update={"threads": 1})
    rec = run_request({"id": "split", "completion": f"```c\n{SPLIT}```\n"}, serial,
                      cache_dir=cache_dir)  # fmt: skip
    if "rt-priority" not in rec["sandbox"] and not rec["suspicious"]:
        pytest.skip("without real-time priority the second thread may wait for a busy CPU")
    assert rec["status"] == "ok" and rec["suspicious"] and rec["reward"] == 0.0, rec
    assert rec["reason"].startswith("CPU time beyond the wall time of a serial kernel "
                                    "(threads = 1)"), rec["reason"]  # fmt: skip
    assert f"more of its {len(os.sched_getaffinity(0))} CPUs than the 1 thread" in rec["reason"]


def test_a_damaged_record_is_refused() -> None:
    res = parsed(record([1e-3], [5e-4, 5e-4], []), wall=0.5)  # one TIME of two
    assert res.status == "runtime_error" and "damaged" in res.reason


def test_the_input_stream_is_chacha(tmp_path) -> None:
    """The judge's ChaCha block function, built with 20 rounds, reproduces RFC 8439's keystream
    for the all-zero key (appendix A.1, test vectors 1 and 2: counter 0 and 1)."""
    from importlib import resources

    bench = resources.files("hargo_hpc.bench")
    for name in ("judge.c", "hargo_shared.h"):
        (tmp_path / name).write_text(bench.joinpath(name).read_text())
    subprocess.run(["gcc", "-O2", "-DCHACHA_ROUNDS=20", "-DHARGO_CHACHA_SELFTEST", "judge.c",
                    "-o", "selftest", "-lm"], cwd=tmp_path, check=True, timeout=60)  # fmt: skip
    out = subprocess.run([str(tmp_path / "selftest")], capture_output=True, text=True,
                         check=True, timeout=10).stdout.strip()  # fmt: skip
    assert out == (
        "76b8e0ada0f13d90405d6ae55386bd28bdd219b8a08ded1aa836efcc8b770dc7"
        "da41597c5157488d7724e03fb8d84a376a43b8f41518a11cc387b669b2ee6586"
        "9f07e7be5551387a98ba977c732d080dcb0f29a048e3656912c6533e32ee7aed"
        "29b721769ce64e43d57133b074d839d531ed1f28510afb45ace10a1f4b794d6f"
    )
