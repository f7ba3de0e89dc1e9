"""One benchmark request, end to end:

    extract -> validate source -> build (cached; compile, inspect symbols, link)
            -> run the judge in the sandbox (candidate and reference, interleaved)
            -> parse its verdict -> status -> reward (of g / g_ref)

`run_bench` is the dataclass API; `run_request` the dict-in / dict-out contract of the handoff
worker.  Neither raises for anything the completion does: harness failures become `infra_error`.
Timeouts nest: compile <= compile_timeout_s, run <= run_timeout_s, both within
request_timeout_s of the request's start.
"""

from __future__ import annotations

import errno
import hashlib
import math
import os
import shutil
import signal
import statistics
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from hargo_hpc.bench.build import (
    Build,
    InfraError,
    build_kernel,
    compiler_version,
    harness,
    resolve_compiler,
)
from hargo_hpc.bench.cache import CompileCache
from hargo_hpc.bench.cgroups import run_cgroup
from hargo_hpc.bench.cpulocks import cpus_held
from hargo_hpc.bench.extract import extract_code
from hargo_hpc.bench.peak import machine_peak
from hargo_hpc.bench.reference import Reference, kernel_source, reference
from hargo_hpc.bench.reward import is_suspicious, penalty, shaped_reward, speed_ratio
from hargo_hpc.bench.sandbox import Limits, base_env, run_sandboxed, sandbox_ids
from hargo_hpc.bench.settings import BenchSettings
from hargo_hpc.bench.techniques import detect_techniques, normalise_forbidden
from hargo_hpc.bench.uids import leased_uid
from hargo_hpc.bench.validate import Violation, check_forbidden, check_source

HARNESS_VERSION = "2.1.0"  # 2.1: reward rising above the reference, peak bound
# CPU a call may use beyond wall x threads (wake-up and stop windows), before it is flagged
CPU_SLACK_S = 0.0002
JUDGE_FILE_SIZE = 1 << 40  # RLIMIT_FSIZE of the judge: its memfds are files too
CPU_SLACK_FACTOR = 1.05
EXEC_TOO_BIG = (errno.ENOMEM, errno.E2BIG, errno.EFBIG)
EXEC_FAILED = "exec_failed"  # an interim status: the exec probe turns it into a real one
PROBE_TTL_S = 60.0


@dataclass(frozen=True)
class Problem:
    """A DGEMM problem: C[M x N] = A[M x K] B[K x N], plus the second verified size."""

    name: str = "dgemm-256"
    M: int = 256
    N: int = 256
    K: int = 256
    check: tuple[int, int, int] = (97, 97, 97)

    @property
    def shape(self) -> str:
        return str(self.M) if self.M == self.N == self.K else f"{self.M}x{self.N}x{self.K}"

    @property
    def flops(self) -> int:
        """2 M N K floating-point operations per call."""
        return 2 * self.M * self.N * self.K

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None, settings: BenchSettings) -> Problem:
        """From a request's `problem` ({name, size | M, N, K, check_size}); defaults: settings."""
        d = d or {}
        size = int(d.get("size", settings.size))
        m, n, k = (int(d.get(x, size)) for x in ("M", "N", "K"))
        c = int(d.get("check_size", settings.check_size))
        if min(m, n, k, c) <= 0 or max(m, n, k, c) > 1 << 14:
            raise ValueError(f"bad problem sizes {m}x{n}x{k} / {c}")
        problem = cls("", m, n, k, (c, c, c))
        return replace(problem, name=str(d.get("name") or f"dgemm-{problem.shape}"))


@dataclass
class BenchRequest:
    id: str
    completion: str
    problem: Problem = field(default_factory=Problem)
    forbidden: list[str] = field(default_factory=list)
    stage: int | None = None


@dataclass
class BenchResult:
    """The JSON-able result record (see docs/bench.md for every field)."""

    request_id: str
    status: str = "infra_error"
    reward: float | None = None
    reason: str = ""
    code_hash: str | None = None
    problem: str = ""
    size: list[int] = field(default_factory=list)
    check_size: list[int] = field(default_factory=list)
    gflops: dict[str, float] | None = None
    times_s: dict[str, Any] | None = None
    seed: int | None = None
    input_keys: list[str] = field(default_factory=list)
    suspicious: bool = False
    reference: str = ""
    reference_kernel: str = ""
    reference_coretype: str = ""
    reference_gflops: dict[str, float] | None = None
    peak: dict[str, Any] | None = None
    ratio: float | None = None
    threads: int = 0
    compiler: str = ""
    compiler_version: str = ""
    flags: list[str] = field(default_factory=list)
    techniques: list[str] = field(default_factory=list)
    forbidden: list[str] = field(default_factory=list)
    stage: int | None = None
    cache_hit: bool = False
    compile_s: float | None = None
    run_s: float | None = None
    elapsed_s: float = 0.0
    output: str = ""
    sandbox: list[str] = field(default_factory=list)
    sandbox_unavailable: list[str] = field(default_factory=list)
    harness_version: str = HARNESS_VERSION

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def allocated_threads(settings: BenchSettings) -> int:
    return settings.threads or len(os.sched_getaffinity(0))


def run_request(
    request: dict[str, Any], settings: BenchSettings, *, cache_dir: str | None = None
) -> dict[str, Any]:
    """The handoff contract: request dict (id, completion, problem?, forbidden?, stage?) ->
    result record dict.  Never raises."""
    rid = str(request.get("id", "")) if isinstance(request, dict) else ""
    try:
        req = BenchRequest(
            id=rid,
            completion=str(request.get("completion") or ""),
            problem=Problem.from_dict(request.get("problem"), settings),
            forbidden=list(request.get("forbidden") or []),
            stage=request.get("stage"),
        )
    except (ValueError, TypeError, AttributeError) as err:
        res = BenchResult(request_id=rid, reason=f"bad request: {err}")
        return res.to_dict()
    return run_bench(req, settings, cache_dir=cache_dir).to_dict()


def run_bench(
    req: BenchRequest, settings: BenchSettings, *, cache_dir: str | None = None
) -> BenchResult:
    """Benchmark one request (see module docstring); never raises."""
    start = time.monotonic()
    deadline = start + settings.request_timeout_s
    p = req.problem
    res = BenchResult(
        request_id=req.id, problem=p.name, size=[p.M, p.N, p.K], check_size=list(p.check),
        threads=allocated_threads(settings), compiler=settings.compiler,
        flags=list(settings.flags), stage=req.stage,
    )  # fmt: skip
    try:
        with leased_uid(settings.sandbox_uids) as uid:
            _run(req, settings, res, cache_dir, uid, deadline)
    except Violation as v:
        res.status, res.reason = "format_violation", str(v)
    except InfraError as err:
        res.status, res.reason = "infra_error", str(err)
    except Exception as err:  # a harness bug must not take the worker down
        res.status = "infra_error"
        res.reason = f"harness error: {type(err).__name__}: {err}"
        res.output = traceback.format_exc()[-settings.output_cap_bytes :]
    if res.status == "ok":
        _reward_ok(res, settings)
    else:
        res.reward = penalty(res.status, settings)
    res.elapsed_s = round(time.monotonic() - start, 4)
    return res


def _reward_ok(res: BenchResult, settings: BenchSettings) -> None:
    """Reward of an `ok` run from its speed ratio to the reference (reward.py); 0 if suspicious:
    above the node's peak bound (peak.py, derived now, recorded in `peak`), or CPU time outside
    the timed calls (`_timings`)."""
    g = res.gflops["median"]
    if res.peak is None:
        res.peak = machine_peak(res.threads, settings.peak_margin).to_dict()
    bound = res.peak["bound"]
    best = res.reference_gflops["max"] if res.reference_gflops else None
    if not res.suspicious and is_suspicious(g, bound, best, settings):
        res.suspicious = True
        if g > bound:
            res.reason = (f"{g:.1f} GFLOPS, more than {settings.peak_margin:g} x this node's "
                          f"theoretical peak of {res.peak['gflops']:.1f} on {res.threads} "
                          "thread(s): not rewarded")  # fmt: skip
        else:
            res.reason = (f"{g:.1f} GFLOPS, more than reference_margin "
                          f"{settings.reference_margin:g} x the reference's best call in the "
                          f"same run ({best:.1f}): not rewarded")  # fmt: skip
    res.reward = 0.0 if res.suspicious else shaped_reward(g, res.ratio, settings)


def _run(
    req: BenchRequest,
    settings: BenchSettings,
    res: BenchResult,
    cache_dir: str | None,
    uid: int | None,
    deadline: float,
) -> None:
    try:
        res.forbidden = normalise_forbidden(req.forbidden)
    except ValueError as err:
        raise InfraError(f"bad request: {err}") from None
    extracted = extract_code(req.completion)
    if extracted is None:
        raise Violation("no C code in the completion")
    code = extracted.code
    try:
        code.encode("utf-8")
    except UnicodeEncodeError:  # e.g. a lone surrogate: not text a compiler could read
        raise Violation("the completion is not valid UTF-8 text") from None
    res.code_hash = hashlib.sha256(code.encode()).hexdigest()
    res.techniques = detect_techniques(code)
    check_source(code, extracted.language)
    check_forbidden(res.techniques, res.forbidden)
    res.compiler_version = compiler_version(settings.compiler)
    cache = CompileCache(cache_dir or settings.cache_dir or None,
                         max_bytes=settings.cache_max_bytes, max_entries=settings.cache_max_entries)
    ids = sandbox_ids(settings.sandbox_user, uid)
    budget = min(settings.compile_timeout_s, deadline - time.monotonic())
    build = build_kernel(code, settings, cache, timeout_s=budget, ids=ids)
    res.cache_hit, res.output = build.cache_hit, build.output
    res.compile_s = round(build.seconds, 4)
    if build.verdict != "built":
        res.status, res.reason = build.verdict, build.reason
        return
    if "openmp" in res.forbidden and build.openmp:
        # the pragma got past the source detector (macros, _Pragma): the object still calls
        # the OpenMP runtime
        if "openmp" not in res.techniques:
            res.techniques = ["openmp", *res.techniques]
        raise Violation(
            "uses technique(s) forbidden at this stage: openmp "
            f"(the object calls {', '.join(build.openmp[:3])})"
        )
    ref = reference(settings, cache, max(1.0, deadline - time.monotonic()))
    res.reference, res.reference_kernel, res.reference_coretype = (ref.label, ref.kernel,
                                                                   ref.coretype)  # fmt: skip
    judge = harness(cache, resolve_compiler(settings.compiler)).judge
    # one timed run at a time per CPU (cpulocks.py); the wait is not the kernel's time
    with cpus_held(os.sched_getaffinity(0), max(1.0, deadline - time.monotonic())):
        budget = min(settings.run_timeout_s, deadline - time.monotonic())
        if budget <= 0:
            res.status, res.reason = "timeout", "the request's time budget ran out before the run"
            return
        _execute(judge, build, ref, req.problem, settings, res, budget, ids)
        if res.status == EXEC_FAILED:  # the kernel's binary, or the machine? a known-good one
            probe = _exec_probe(judge, ref, settings, cache, ids, deadline)
            if probe:
                res.status, res.reason = "infra_error", f"{res.reason}; {probe}"
            else:
                res.status = "runtime_error"


def _execute(
    judge: Path, build: Build, ref: Reference, p: Problem, settings: BenchSettings,
    res: BenchResult, timeout: float, ids: tuple[int, int] | None,
) -> None:
    """Run the judge on the candidate and the reference once, in a fresh directory, and turn
    its verdict into status, timings and the reference's GFLOPS."""
    t = res.threads
    workdir = tempfile.mkdtemp(prefix="hargo-run-")
    try:
        omp = {"OMP_NUM_THREADS": str(t), "OMP_THREAD_LIMIT": str(t), "OMP_DYNAMIC": "false",
               "OPENBLAS_NUM_THREADS": str(t)}  # fmt: skip
        if settings.proc_bind:
            omp["OMP_PROC_BIND"] = settings.proc_bind
        if ref.coretype:  # the environment's, else the best this CPU supports (reference.py)
            omp["OPENBLAS_CORETYPE"] = ref.coretype
        limits = Limits(
            wall_s=timeout,
            cpu_s=int(timeout * t) + 1,
            address_space_mb=settings.memory_limit_mb,
            processes=settings.max_processes,
            file_size_bytes=JUDGE_FILE_SIZE,  # its memfds; it lowers the limit for the kernel
            open_files=32,
            stack_mb=8,
        )
        # 0: the judge draws every call's inputs from getrandom (keys in `input_keys`);
        # a fixed seed reproduces a run but is predictable to the kernel (debugging only)
        res.seed = settings.seed
        uid, gid = ids if ids else (-1, -1)
        argv = [str(judge), str(build.binary), str(ref.binary), str(p.M), str(p.N), str(p.K),
                *map(str, p.check), str(settings.warmup), *map(str, settings.pair_bounds()),
                str(settings.timed_budget_ms), str(res.seed), str(uid), str(gid), str(t),
                str(int(settings.untimed_call_timeout_s * 1000)), str(int(timeout * 1000)),
                str(settings.output_limit_bytes)]  # fmt: skip
        # pids: the judge's, the reference's and the kernel's threads; cpuset: the worker's CPUs
        group_name = f"hargo-run-{os.getpid()}-{os.path.basename(workdir)}"
        with run_cgroup(group_name, pids_max=settings.max_processes + 64) as (group, no_group):
            out = run_sandboxed(argv, workdir, limits, base_env(workdir, omp), ids=None,
                                channel_fd=True, output_cap=settings.output_cap_bytes,
                                cgroup=group)  # fmt: skip
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    res.run_s = round(out.wall_s, 4)
    lines = out.channel.splitlines()
    _sandbox_layers(res, out.layers, out.unavailable, lines)
    res.sandbox += [f"compile:{layer}" for layer in build.sandbox if layer.startswith("mountns")]
    res.sandbox_unavailable += [f"compile: {why}" for why in build.sandbox_unavailable]
    if group is not None:
        res.sandbox.append(f"cgroup:v{group.version}")
    else:
        res.sandbox_unavailable.append(no_group)
    if out.output:
        res.output = (res.output + "\n" if res.output else "") + out.output
    ready = "READY" in lines
    verdict = next((ln[7:] for ln in lines if ln.startswith("RESULT ")), None)
    sig, code = out.signal, out.returncode
    child = next((ln.split() for ln in lines if ln.startswith("CHILD ")), None)
    if ready and child and len(child) == 3 and child[2].lstrip("-").isdigit():
        # the kernel's process died; the judge reported how
        kind, number = child[1], int(child[2])
        if kind == "exec":
            _exec_failed(res, number)
            return
        if kind == "load":  # it died before its main: while loading, or in a load-time hook
            res.status = "runtime_error"
            res.reason = (
                "forbidden system call while its binary was loading (killed by seccomp: a "
                "constructor or resolver)" if number == signal.SIGSYS else
                f"the kernel's binary cannot be loaded (killed by {signal_name(number)} while "
                "loading: static data over the memory limit, or a crashing constructor)"
            )  # fmt: skip
            return
        if kind == "signal":
            sig, code = number, None
        else:
            sig, code, verdict = None, number, None
    if out.timed_out:
        res.status, res.reason = "timeout", f"run exceeded {timeout:g} s (process group killed)"
    elif sig == signal.SIGXCPU:
        res.status, res.reason = "timeout", "CPU-time limit exceeded"
    elif sig == signal.SIGXFSZ:
        res.status = "runtime_error"
        res.reason = f"output over {settings.output_limit_bytes} bytes (killed)"
    elif sig == signal.SIGSYS:
        res.status, res.reason = "runtime_error", "forbidden system call (killed by seccomp)"
    elif sig is not None and ready:
        res.status, res.reason = "runtime_error", f"killed by {signal_name(sig)}"
    elif not ready:
        infra = next((ln[6:] for ln in lines if ln.startswith("INFRA ")), None)
        res.status = "infra_error"
        res.reason = infra or (
            f"the judge did not start (exit status {code}"
            + (f", {signal_name(sig)})" if sig is not None else ")")
        )
    elif verdict == "ok" and code == 0:
        _timings(res, lines, p, settings, out.wall_s)
    elif verdict is not None and verdict.startswith("infra"):
        # only the judge (trusted) holds fd 3: a harness failure after READY is still one
        res.status, res.reason = "infra_error", verdict.removeprefix("infra ")
    elif verdict is not None and verdict.startswith(("wrong", "inputs")):
        res.status, res.reason = "wrong_result", verdict.removeprefix("wrong ")
    elif verdict is not None and verdict.startswith("memory"):
        res.status, res.reason = "runtime_error", verdict.removeprefix("memory ")
    elif verdict is not None and verdict.startswith("timeout"):
        res.status, res.reason = "timeout", verdict.removeprefix("timeout ")
    elif code == 0:
        res.status = "runtime_error"
        res.reason = "the kernel's process exited before the judge finished (exit() in the kernel?)"
    else:
        res.status, res.reason = "runtime_error", f"exit status {code}"


def _sandbox_layers(res: BenchResult, layers: list[str], unavailable: list[str],
                    lines: list[str]) -> None:  # fmt: skip
    """The layers in force for the candidate: the sandbox's, the judge's uid drop and filter."""
    res.sandbox, res.sandbox_unavailable = list(layers), list(unavailable)
    facts = [fact for ln in lines if ln.startswith("SANDBOX ") for fact in ln.split()[1:]]
    info = dict(f.split("=", 1) for f in facts if "=" in f)
    if info.get("uid", "-1") != "-1":
        res.sandbox.append(f"uid:{info['uid']}")
    else:
        res.sandbox_unavailable.append("uid (the worker is not root: the kernel keeps its uid)")
    if info.get("seccomp") == "on":
        res.sandbox.append("seccomp")
    elif info.get("seccomp") == "off":
        res.sandbox_unavailable.append("seccomp (not supported on this machine)")
    if info.get("rt") == "on":
        res.sandbox.append("rt-priority")
    elif info.get("rt") == "off":
        res.sandbox_unavailable.append(
            "rt-priority (not permitted: other load on the node slows threaded kernels and the "
            "reference unevenly)"
        )


def _exec_failed(res: BenchResult, number: int) -> None:
    """The judge could not exec the kernel's binary: too large (its own static data) is the
    completion's failure; anything else is decided by the probe (`_exec_probe`)."""
    why = os.strerror(number) if number > 0 else f"errno {number}"
    if number in EXEC_TOO_BIG:
        res.status = "runtime_error"
        res.reason = (f"the kernel's binary cannot be loaded: {why} (static data over the "
                      "memory limit?)")  # fmt: skip
    else:
        res.status, res.reason = EXEC_FAILED, f"cannot exec the kernel's binary: {why}"


_EXEC_PROBES: dict[tuple[str, str], tuple[float, str]] = {}  # (judge, flags) -> (when, failure)


def _exec_probe(judge: Path, ref: Reference, settings: BenchSettings, cache: CompileCache,
                ids: tuple[int, int] | None, deadline: float) -> str:  # fmt: skip
    """'' when the shipped naive kernel, built and judged the same way, runs (so a failed exec
    was the completion's binary: an `.interp` it named, say); else why not (the machine's:
    a noexec cache, a missing loader). Remembered per process for PROBE_TTL_S."""
    key = (str(judge), "\0".join(settings.flags))
    seen = _EXEC_PROBES.get(key)
    if seen and time.monotonic() - seen[0] < PROBE_TTL_S:
        return seen[1]
    small = settings.model_copy(update={"warmup": 0, "repetitions": 1, "timed_budget_ms": 0})
    build = build_kernel(kernel_source("naive"), small, cache,
                         timeout_s=max(1.0, deadline - time.monotonic()), ids=ids)  # fmt: skip
    probe = BenchResult(request_id="exec-probe", threads=allocated_threads(settings))
    failure = f"the shipped naive kernel does not build either: {build.reason}"
    if build.verdict == "built":
        _execute(judge, build, ref, Problem(M=16, N=16, K=16, check=(7, 7, 7)), small, probe,
                 max(1.0, min(settings.run_timeout_s, deadline - time.monotonic())), ids)
        failure = "" if probe.status == "ok" else (
            f"the shipped naive kernel fails the same way: {probe.status}: {probe.reason}")
    _EXEC_PROBES[key] = (time.monotonic(), failure)
    return failure


def _timings(res: BenchResult, lines: list[str], p: Problem, settings: BenchSettings,
             wall_s: float) -> None:  # fmt: skip
    """Status ok with the candidate's and the reference's GFLOPS, after the tripwires: a damaged
    or impossible timing record is refused; CPU outside the timed window is flagged."""
    try:
        times = [float(ln.split()[1]) for ln in lines if ln.startswith("TIME ")]
        ref_times = [float(ln.split()[1]) for ln in lines if ln.startswith("REF ")]
        cpu = [(float(ln.split()[1]), float(ln.split()[2])) for ln in lines
               if ln.startswith("CPU ")]  # fmt: skip
    except (IndexError, ValueError):
        times, ref_times, cpu = [], [], []
    fewest, most = settings.pair_bounds()
    if not fewest <= len(times) <= most or len(ref_times) != len(times) or not all(
        math.isfinite(x) and x > 0 for x in (*times, *ref_times)
    ):
        res.status, res.reason = "runtime_error", "the judge's timing record is damaged"
        return
    if sum(times) + sum(ref_times) > wall_s:
        res.status = "runtime_error"
        total = sum(times) + sum(ref_times)
        res.reason = (f"impossible timing record: the timed calls sum to {total:.3f} s in a "
                      f"run of {wall_s:.3f} s")  # fmt: skip
        return
    res.times_s = {"median": statistics.median(times), "min": min(times), "max": max(times),
                   "all": times, "reference": ref_times}  # fmt: skip
    res.gflops = _gflops(p, times)
    res.reference_gflops = _gflops(p, ref_times)
    res.ratio = round(speed_ratio(times, ref_times), 6)
    over = [(c, w) for c, w in cpu if c > w * res.threads * CPU_SLACK_FACTOR + CPU_SLACK_S]
    if over:
        c, w = over[0]
        res.suspicious = True
        res.reason = (f"the kernel used {c * 1e3:.1f} ms of CPU in a call of {w * 1e3:.1f} ms "
                      f"on {res.threads} thread(s): it ran outside the timed window")  # fmt: skip
    keys = next((ln.split()[1:] for ln in lines if ln.startswith("KEYS ")), [])
    res.input_keys = keys[:64]
    res.status = "ok"


def _gflops(p: Problem, times: list[float]) -> dict[str, float]:
    med = statistics.median(times)
    return {"median": round(p.flops / med / 1e9, 4), "min": round(p.flops / max(times) / 1e9, 4),
            "max": round(p.flops / min(times) / 1e9, 4)}  # fmt: skip


def signal_name(number: int) -> str:
    """SIGSEGV, SIGRTMIN+1, ... or 'signal 77': never raises for an unknown number."""
    try:
        return signal.Signals(number).name
    except ValueError:
        if signal.SIGRTMIN <= number <= signal.SIGRTMAX:
            return f"SIGRTMIN+{number - signal.SIGRTMIN}"
        return f"signal {number}"
