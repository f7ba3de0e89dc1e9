"""One benchmark request, end to end:

    extract -> validate source -> build (cached; compile, inspect symbols, link)
            -> run the judge in the sandbox (candidate and reference, interleaved)
            -> parse its verdict -> status -> reward (of g / g_ref)

`run_bench` is the typed API (`contract.BenchRequest`, the one request type); `run_request` the
same from a plain dict; `gemm_workload` the handoff worker's workload for the request kind
`gemm`.  Neither raises for anything the completion
does: harness failures become `infra_error`.
Timeouts nest: compile <= compile_timeout_s, run <= run_timeout_s, both within
request_timeout_s of the request's start.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import replace
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
from hargo_hpc.bench.contract import BenchRequest
from hargo_hpc.bench.cpulocks import cpus_held
from hargo_hpc.bench.defences import judge_layers
from hargo_hpc.bench.extract import extract_code
from hargo_hpc.bench.judge_args import JudgeArgs
from hargo_hpc.bench.reference import Reference, kernel_source, reference
from hargo_hpc.bench.result import (
    HARNESS_VERSION,
    BenchResult,
    JudgeRun,
    Problem,
    Source,
    Stages,
    make_record,
    problem_of,
)
from hargo_hpc.bench.sandbox import Limits, base_env, run_sandboxed, sandbox_ids
from hargo_hpc.bench.settings import BenchSettings
from hargo_hpc.bench.stale import owned_prefix, sweep_scratch
from hargo_hpc.bench.techniques import detect_techniques, normalise_forbidden
from hargo_hpc.bench.uids import leased_uid
from hargo_hpc.bench.validate import Violation, check_forbidden, check_source
from hargo_hpc.bench.verdict import EXEC_FAILED, JudgeExit, Verdict, parse_verdict

__all__ = ["EXEC_FAILED", "HARNESS_VERSION", "BenchRequest", "BenchResult", "Problem",
           "allocated_threads", "kernel_threads", "run_bench", "run_request"]  # fmt: skip
JUDGE_FILE_SIZE = 1 << 40  # RLIMIT_FSIZE of the judge: its memfds are files too
PROBE_TTL_S = 60.0


def allocated_threads(settings: BenchSettings) -> int:
    """T: the threads a request is given (`threads`, 0 = the worker's CPUs)."""
    return settings.threads or len(os.sched_getaffinity(0))


def kernel_threads(build: Build, settings: BenchSettings) -> int:
    """k: the threads the kernel may use and the reference runs on in its run: T when the
    kernel's object calls a runtime entry that starts threads (`Build.openmp`: GOMP_parallel*,
    GOMP_teams*, __kmpc_fork_*, pthread_create; the compiler's own record), else 1. The judge's
    CPU tripwire holds a kernel to it (a serial kernel that starts threads anyway is flagged)."""
    return allocated_threads(settings) if build.openmp else 1


def run_request(
    request: dict[str, Any], settings: BenchSettings, *, cache_dir: str | None = None
) -> dict[str, Any]:
    """The handoff contract: request dict (`contract.BenchRequest`'s fields: id, completion,
    problem?, forbidden?, stage?) -> result record dict; the problem's defaults are `settings`'
    sizes.  Never raises: a bad request is `infra_error` ("bad request: ...")."""
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
        return BenchResult(request_id=rid, reason=f"bad request: {err}").to_dict()
    return run_bench(req, settings, cache_dir=cache_dir).to_dict()


def gemm_workload(config: Any = None) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """The bench as the handoff's request kind `gemm` (`handoff.workloads`): a request
    {id, kind, payload} is `run_request` of the payload (`contract.BenchRequest`'s fields but
    the id) with its id, under the experiment's `[bench]` settings (`config.bench`; the
    defaults without a config) and compile cache."""
    from hargo_hpc.bench.settings import BenchSettings

    settings = config.bench if config is not None else BenchSettings()
    cache_dir = settings.cache_dir or None

    def run(request: dict[str, Any]) -> dict[str, Any]:
        payload = request.get("payload") if isinstance(request.get("payload"), dict) else {}
        return run_request({**payload, "id": request.get("id", "")}, settings,
                           cache_dir=cache_dir)

    return run


def run_bench(
    req: BenchRequest, settings: BenchSettings, *, cache_dir: str | None = None
) -> BenchResult:
    """Benchmark one request (see module docstring); never raises."""
    start = time.monotonic()
    try:  # the problem resolved once (`problem_of`)
        req = req.model_copy(update={"problem": problem_of(req, settings)})
    except (ValueError, TypeError) as err:
        return BenchResult(request_id=req.id, reason=f"bad request: {err}")
    deadline = start + settings.request_timeout_s
    try:
        with leased_uid(settings.sandbox_uids) as uid:
            stages = _stages(req, settings, cache_dir, uid, deadline)
    except Exception as err:  # no uid to lease (InfraError), or a harness bug
        stages = _failed(err, settings)
    return make_record(req, settings, stages, allocated_threads(settings),
                       round(time.monotonic() - start, 4))  # fmt: skip


def _failed(err: Exception, settings: BenchSettings, **done: Any) -> Stages:
    """The stages of a request that ended with `err` after `done`."""
    if isinstance(err, Violation):
        return Stages(Verdict("format_violation", str(err)), **done)
    if isinstance(err, InfraError):
        return Stages(Verdict("infra_error", str(err)), **done)
    # a harness bug must not take the worker down
    return Stages(Verdict("infra_error", f"harness error: {type(err).__name__}: {err}"), **done,
                  trace=traceback.format_exc()[-settings.output_cap_bytes :])  # fmt: skip


def read_source(completion: str) -> Source:
    """The completion's kernel, hashed and with its techniques; Violation if there is none."""
    extracted = extract_code(completion)
    if extracted is None:
        raise Violation("no C code in the completion")
    code = extracted.code
    try:
        code.encode("utf-8")
    except UnicodeEncodeError:  # e.g. a lone surrogate: not text a compiler could read
        raise Violation("the completion is not valid UTF-8 text") from None
    return Source(code, hashlib.sha256(code.encode()).hexdigest(), detect_techniques(code),
                  extracted.language)  # fmt: skip


def _stages(req: BenchRequest, settings: BenchSettings, cache_dir: str | None, uid: int | None,
            deadline: float) -> Stages:  # fmt: skip
    """extract -> check -> build -> reference -> judge, as far as the request gets."""
    try:
        forbidden = normalise_forbidden(list(req.forbidden or []))
    except ValueError as err:
        return Stages(Verdict("infra_error", f"bad request: {err}"))
    done: dict[str, Any] = {"forbidden": forbidden}
    before = settings.stage_rules == "before"  # the ablation: a stage's rules before the code
    try:
        done["source"] = source = read_source(req.completion)
        check_source(source.code, source.language)
        if before:
            check_forbidden(source.techniques, forbidden)
        done["compiler_version"] = compiler_version(settings.compiler)
        cache = CompileCache(cache_dir or settings.cache_dir or None,
                             max_bytes=settings.cache_max_bytes,
                             max_entries=settings.cache_max_entries)  # fmt: skip
        ids = sandbox_ids(settings.sandbox_user, uid)
        budget = min(settings.compile_timeout_s, deadline - time.monotonic())
        done["build"] = build = build_kernel(source.code, settings, cache, timeout_s=budget,
                                             ids=ids)  # fmt: skip
        if build.verdict != "built":
            return Stages(Verdict(build.verdict, build.reason), **done)
        if before and "openmp" in forbidden and build.openmp:
            # the pragma got past the source detector (macros, _Pragma): the object still calls
            # the OpenMP runtime
            raise Violation("uses technique(s) forbidden at this stage: openmp "
                            f"(the object calls {', '.join(build.openmp[:3])})")  # fmt: skip
        done["ref"] = ref = reference(settings, cache, max(1.0, deadline - time.monotonic()))
        verdict, done["run"] = _timed_run(problem_of(req, settings), settings, build, ref,
                                           cache, ids, deadline)
        if verdict.status == "ok":  # the stage's rules, judged after the code (stage_rules)
            done["off_stage"] = off_stage(source.techniques, build, forbidden)
        return Stages(verdict, **done)
    except Exception as err:
        return _failed(err, settings, **done)


def off_stage(found: list[str], build: Build, forbidden: list[str]) -> list[str]:
    """The forbidden techniques a built kernel uses: the source detector's, and `openmp` where
    the object calls a runtime entry that starts threads (a pragma built by macros)."""
    used = set(found) | ({"openmp"} if build.openmp else set())
    return [t for t in forbidden if t in used]


def _timed_run(p: Problem, settings: BenchSettings, build: Build, ref: Reference,
               cache: CompileCache, ids: tuple[int, int] | None,
               deadline: float) -> tuple[Verdict, JudgeRun | None]:  # fmt: skip
    """The judge's run, one timed run at a time per CPU (cpulocks.py; the wait is not the
    kernel's time); a failed exec is the kernel's or the machine's by the exec probe."""
    judge = harness(cache, resolve_compiler(settings.compiler)).judge
    with cpus_held(os.sched_getaffinity(0), max(1.0, deadline - time.monotonic())):
        budget = min(settings.run_timeout_s, deadline - time.monotonic())
        if budget <= 0:
            return Verdict("timeout", "the request's time budget ran out before the run"), None
        run = _execute(judge, build, ref, p, settings, budget, ids)
        verdict = run.verdict
        if verdict.status == EXEC_FAILED:  # the kernel's binary, or the machine? a known-good one
            probe = _exec_probe(judge, ref, settings, cache, ids, deadline)
            verdict = (replace(verdict, status="infra_error", reason=f"{verdict.reason}; {probe}")
                       if probe else replace(verdict, status="runtime_error"))  # fmt: skip
    return verdict, run


def judge_args(build: Build, ref: Reference, p: Problem, settings: BenchSettings, timeout: float,
               ids: tuple[int, int] | None) -> JudgeArgs:  # fmt: skip
    """What the judge is asked: the binaries, the sizes, the calls and their limits. Seed 0:
    every call's inputs from getrandom (keys in `input_keys`); a fixed seed reproduces a run
    but is predictable to the kernel (debugging only). `threads` is the kernel's k
    (`kernel_threads`): the judge's CPU tripwire and the run's thread variables, so the
    reference runs on k threads too (`_run_env`)."""
    uid, gid = ids if ids else (-1, -1)
    fewest, most = settings.pair_bounds()
    return JudgeArgs(
        candidate=str(build.binary), reference=str(ref.binary), m=p.M, n=p.N, k=p.K,
        m2=p.check[0], n2=p.check[1], k2=p.check[2], warmup=settings.warmup, reps=fewest,
        max_reps=most, budget_ms=settings.timed_budget_ms, seed=settings.seed, uid=uid, gid=gid,
        threads=kernel_threads(build, settings),
        untimed_ms=int(settings.untimed_call_timeout_s * 1000), call_ms=int(timeout * 1000),
        output=settings.output_limit_bytes,
    )  # fmt: skip


def _run_env(workdir: str, threads: int, settings: BenchSettings, ref: Reference) -> dict[str, str]:
    """The judge's environment, which both children inherit: `threads` (the kernel's k) for
    OpenMP and OpenBLAS, so the reference runs on the threads the kernel may use."""
    t = str(threads)
    omp = {"OMP_NUM_THREADS": t, "OMP_THREAD_LIMIT": t, "OMP_DYNAMIC": "false",
           "OPENBLAS_NUM_THREADS": t}  # fmt: skip
    if settings.proc_bind:
        omp["OMP_PROC_BIND"] = settings.proc_bind
    if ref.coretype:  # the environment's, else the best this CPU supports (reference.py)
        omp["OPENBLAS_CORETYPE"] = ref.coretype
    return base_env(workdir, omp)


def _execute(judge: Path, build: Build, ref: Reference, p: Problem, settings: BenchSettings,
             timeout: float, ids: tuple[int, int] | None) -> JudgeRun:  # fmt: skip
    """Run the judge on the candidate and the reference once, in a fresh directory, and read
    its verdict (verdict.py)."""
    args = judge_args(build, ref, p, settings, timeout, ids)
    limits = Limits(wall_s=timeout, cpu_s=int(timeout * allocated_threads(settings)) + 1,
                    address_space_mb=settings.memory_limit_mb, processes=settings.max_processes,
                    file_size_bytes=JUDGE_FILE_SIZE,  # its memfds; it lowers the kernel's limit
                    open_files=32, stack_mb=8)  # fmt: skip
    sweep_scratch(tempfile.gettempdir())  # a killed worker's runs (stale.py)
    workdir = tempfile.mkdtemp(prefix=owned_prefix())
    try:
        # pids: the judge's, the reference's and the kernel's threads; cpuset: the worker's CPUs
        with run_cgroup(os.path.basename(workdir),
                        pids_max=settings.max_processes + 64) as (group, no_group):
            out = run_sandboxed(args.to_argv(judge), workdir, limits,
                                _run_env(workdir, args.threads, settings, ref), ids=None,
                                channel_fd=True, output_cap=settings.output_cap_bytes,
                                cgroup=group)  # fmt: skip
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    exit = JudgeExit(out.returncode, out.signal, out.timed_out, out.wall_s, timeout)
    verdict = parse_verdict(exit, out.channel.splitlines(), args)
    judged, judge_missing = judge_layers(verdict.facts)
    compiled = [f"compile:{layer}" for layer in build.sandbox if layer.startswith("mountns")]
    cgroup = [f"cgroup:v{group.version}"] if group is not None else []
    return JudgeRun(
        verdict, args.seed, round(out.wall_s, 4), out.output,
        sandbox=[*out.layers, *judged, *compiled, *cgroup],
        unavailable=[*out.unavailable, *judge_missing,
                     *(f"compile: {why}" for why in build.sandbox_unavailable),
                     *([] if group is not None else [no_group])],
    )  # fmt: skip


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
    failure = f"the shipped naive kernel does not build either: {build.reason}"
    if build.verdict == "built":
        probe = _execute(judge, build, ref, Problem(M=16, N=16, K=16, check=(7, 7, 7)), small,
                         max(1.0, min(settings.run_timeout_s, deadline - time.monotonic())),
                         ids).verdict  # fmt: skip
        failure = "" if probe.status == "ok" else (
            f"the shipped naive kernel fails the same way: {probe.status}: {probe.reason}")
    _EXEC_PROBES[key] = (time.monotonic(), failure)
    return failure
