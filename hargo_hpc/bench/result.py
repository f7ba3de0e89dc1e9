"""The problem and the result record of one benchmark (the request: `contract.py`), and how the
record is made: once, from what the request's stages produced (`Stages`: the source, the build,
the reference, the judge's run and the verdict), by `make_record`; an `ok` verdict is scored
here (`score`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from hargo_hpc.bench.build import Build
from hargo_hpc.bench.contract import BenchRequest
from hargo_hpc.bench.peak import machine_peak
from hargo_hpc.bench.reference import Reference
from hargo_hpc.bench.reward import is_suspicious, penalty, shaped_reward
from hargo_hpc.bench.settings import BenchSettings
from hargo_hpc.bench.verdict import Verdict

# 2.1: reward rising above the reference, peak bound; 2.2: the reference on the kernel's k
# threads (q scaled by k / T), the protocol's per-call cost measured and subtracted; 2.3: an SQD
# stage's rules judged after the code (an ok kernel off its stage: penalties.off_stage)
HARNESS_VERSION = "2.3.0"


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


def problem_of(req: BenchRequest, settings: BenchSettings) -> Problem:
    """The problem of a request (`contract.BenchRequest.problem`): a `Problem` as it is, None
    the default `Problem()` (256^3), a mapping `Problem.from_dict` (ValueError or TypeError for
    a bad one)."""
    if isinstance(req.problem, Problem):
        return req.problem
    if req.problem is None:
        return Problem()
    return Problem.from_dict(dict(req.problem), settings)


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
    reference_threads: int | None = None
    call_overhead_us: dict[str, float | None] | None = None
    compiler: str = ""
    compiler_version: str = ""
    flags: list[str] = field(default_factory=list)
    techniques: list[str] = field(default_factory=list)
    forbidden: list[str] = field(default_factory=list)
    off_stage: list[str] = field(default_factory=list)  # forbidden techniques an ok kernel used
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


@dataclass(frozen=True)
class Source:
    """The extracted kernel: its text, hash and detected techniques (techniques.py)."""

    code: str
    code_hash: str
    techniques: list[str]
    language: str


@dataclass(frozen=True)
class JudgeRun:
    """One run of the judge: its verdict and what the record says of the run."""

    verdict: Verdict
    seed: int
    run_s: float
    output: str
    sandbox: list[str]  # the defences in force: the sandbox's, the judge's, the compile's, cgroup
    unavailable: list[str]


@dataclass(frozen=True)
class Stages:
    """How far a request got: each stage's product (None where it did not run) and the final
    verdict (the build's, a check's, or the judge's after the exec probe)."""

    verdict: Verdict
    forbidden: list[str] = field(default_factory=list)
    source: Source | None = None
    compiler_version: str = ""
    build: Build | None = None
    ref: Reference | None = None
    run: JudgeRun | None = None
    trace: str = ""  # a harness bug's traceback: the record's output
    off_stage: list[str] = field(default_factory=list)  # forbidden techniques an ok kernel used


@dataclass(frozen=True)
class Score:
    reward: float | None
    suspicious: bool = False
    reason: str = ""
    peak: dict[str, Any] | None = None


def score(verdict: Verdict, measured: dict[str, Any], threads: int, settings: BenchSettings,
          peak: dict[str, Any] | None = None, off_stage: Sequence[str] = ()) -> Score:  # fmt: skip
    """The reward of a verdict: its penalty; for `ok` off its stage (`off_stage`: the forbidden
    techniques it used) `penalties.off_stage`; else the shaped speed ratio to the reference
    (reward.py); 0 if suspicious: CPU outside the timed calls (the verdict), or above the node's
    peak bound (peak.py, derived now unless given, recorded in `peak`)."""
    if verdict.status != "ok":
        return Score(penalty(verdict.status, settings), reason=verdict.reason)
    g, ratio = measured["gflops"]["median"], measured["ratio"]
    peak = peak or machine_peak(threads, settings.peak_margin).to_dict()
    if off_stage:
        return Score(settings.penalties.off_stage, verdict.suspicious,
                     f"off stage: uses technique(s) forbidden at this stage: "
                     f"{', '.join(off_stage)}", peak)  # fmt: skip
    if verdict.suspicious:
        return Score(0.0, True, verdict.reason, peak)
    best = measured["reference_gflops"]["max"] if measured["reference_gflops"] else None
    if not is_suspicious(g, peak["bound"], best, settings):
        return Score(shaped_reward(g, ratio, settings), False, verdict.reason, peak)
    if g > peak["bound"]:
        why = (f"{g:.1f} GFLOPS, more than {settings.peak_margin:g} x this node's theoretical "
               f"peak of {peak['gflops']:.1f} on {threads} thread(s): not rewarded")
    else:
        why = (f"{g:.1f} GFLOPS, more than reference_margin {settings.reference_margin:g} x the "
               f"reference's best call in the same run ({best:.1f}): not rewarded")
    return Score(0.0, True, why, peak)


def make_record(req: BenchRequest, settings: BenchSettings, stages: Stages, threads: int,
                elapsed_s: float, peak: dict[str, Any] | None = None) -> BenchResult:  # fmt: skip
    """The result record of `req`, from its stages (one constructor call)."""
    p, src, build, ref, run = (problem_of(req, settings), stages.source, stages.build, stages.ref,
                               stages.run)
    timing = stages.verdict.timing if stages.verdict.status == "ok" else None
    measured = timing.record_fields(p.flops, threads) if timing else {}
    scored = score(stages.verdict, measured, threads, settings, peak, stages.off_stage)
    outputs = [x for x in (build.output if build else "", run.output if run else "") if x]
    return BenchResult(
        request_id=req.id, status=stages.verdict.status, reward=scored.reward,
        reason=scored.reason, code_hash=src.code_hash if src else None, problem=p.name,
        size=[p.M, p.N, p.K], check_size=list(p.check), **measured,
        seed=run.seed if run else None, suspicious=scored.suspicious,
        reference=ref.label if ref else "", reference_kernel=ref.kernel if ref else "",
        reference_coretype=ref.coretype if ref else "", peak=scored.peak, threads=threads,
        compiler=settings.compiler, compiler_version=stages.compiler_version,
        flags=list(settings.flags), techniques=techniques(stages), forbidden=stages.forbidden,
        off_stage=list(stages.off_stage), stage=req.stage,
        cache_hit=build.cache_hit if build else False,
        compile_s=round(build.seconds, 4) if build else None, run_s=run.run_s if run else None,
        elapsed_s=elapsed_s, output=stages.trace or "\n".join(outputs),
        sandbox=list(run.sandbox) if run else [],
        sandbox_unavailable=list(run.unavailable) if run else [],
    )  # fmt: skip


def techniques(stages: Stages) -> list[str]:
    """The source's techniques, with `openmp` first where the object calls a runtime entry that
    starts threads and the source detector missed it (a pragma built by macros, say)."""
    found = list(stages.source.techniques) if stages.source else []
    if stages.build is not None and stages.build.openmp and "openmp" not in found:
        return ["openmp", *found]
    return found
