"""The judge's verdict, read: `parse_verdict(exit, lines, args)` is a pure function of how the
judge's process ended, the lines it wrote on fd 3 (judge.c's protocol, docs/bench.md) and what it
was asked (`JudgeArgs`). It decides the status and reason of a run, checks the timing record's
tripwires and keeps the judge's SANDBOX facts; nothing here runs anything.

Precedence, first match wins: a CHILD line after READY (exec failure, death while loading; a
signal or an exit replaces the judge's own); the wall clock; SIGXCPU, SIGXFSZ, SIGSYS; any other
signal after READY; no READY (the judge's INFRA line); RESULT ok with exit 0 (then the timings);
RESULT infra | wrong | inputs | memory | timeout; exit 0 without a verdict; any other exit.
"""

from __future__ import annotations

import errno
import math
import os
import re
import signal
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from hargo_hpc.bench.judge_args import JudgeArgs
from hargo_hpc.bench.reward import speed_ratio

EXEC_FAILED = "exec_failed"  # an interim status: the runner's exec probe turns it into a real one
EXEC_TOO_BIG = (errno.ENOMEM, errno.E2BIG, errno.EFBIG)
# CPU a call may use beyond wall x threads (wake-up and stop windows), before it is flagged
CPU_SLACK_S = 0.0002
CPU_SLACK_FACTOR = 1.05
CPUS_LINE = re.compile(r"CPUS ([1-9][0-9]{0,5})")  # the CPUs the kernel could run on
# RESULT <word> ... -> (status, prefix dropped from the reason), tried in this order
RESULTS = (("infra", "infra_error", "infra "), ("wrong", "wrong_result", "wrong "),
           ("inputs", "wrong_result", "wrong "), ("memory", "runtime_error", "memory "),
           ("timeout", "timeout", "timeout "))  # fmt: skip


@dataclass(frozen=True)
class JudgeExit:
    """How the judge's process ended (sandbox.Outcome's part the verdict needs)."""

    returncode: int | None  # None when killed by a signal
    signal: int | None
    timed_out: bool  # the wall clock ran out and the process group was killed
    wall_s: float
    limit_s: float  # the wall-clock limit it ran under


@dataclass(frozen=True)
class Timing:
    """The timed calls of a run that ended `ok`: seconds per call, pairwise interleaved; the
    empty calls (one of each child per pair: the protocol's own cost; () from a judge without
    them); `threads` the k threads the kernel could use and the reference ran on."""

    times: tuple[float, ...]
    reference: tuple[float, ...]
    keys: tuple[str, ...] = ()  # the first 64 bits of each candidate call's key (hex)
    empty: tuple[float, ...] = ()
    reference_empty: tuple[float, ...] = ()
    threads: int = 1
    reference_cpu: tuple[float, ...] = ()  # CPU seconds of each timed reference call

    def overheads(self) -> tuple[float | None, float | None]:
        """The medians of the candidate's and the reference's empty calls (None: none)."""
        return (statistics.median(self.empty) if self.empty else None,
                statistics.median(self.reference_empty) if self.reference_empty else None)

    def record_fields(self, flops: int, allocated: int) -> dict[str, Any]:
        """The result record's times_s, gflops, reference_gflops, ratio (`speed_ratio` with the
        k = `threads` of this run and the `allocated` T), reference_threads, call_overhead_us
        and input_keys."""
        times, refs = list(self.times), list(self.reference)
        o_c, o_r = self.overheads()
        q = speed_ratio(times, refs, threads=self.threads, allocated=allocated, overhead=o_c,
                        ref_overhead=o_r)  # fmt: skip
        overhead = None if o_c is None else {
            "candidate": round(o_c * 1e6, 2),
            "reference": None if o_r is None else round(o_r * 1e6, 2)}  # fmt: skip
        return {"times_s": {"median": statistics.median(times), "min": min(times),
                            "max": max(times), "all": times, "reference": refs,
                            "empty": list(self.empty),
                            "reference_empty": list(self.reference_empty),
                            "reference_cpu": list(self.reference_cpu)},
                "gflops": gflops(flops, times), "reference_gflops": gflops(flops, refs),
                "ratio": round(q, 6), "reference_threads": self.threads,
                "call_overhead_us": overhead, "input_keys": list(self.keys[:64])}  # fmt: skip


@dataclass(frozen=True)
class Verdict:
    """A run's status and reason; `timing` when ok; `suspicious` when a call's CPU time shows the
    kernel ran on more CPUs than it was given or outside the timed window; `facts` the judge's
    SANDBOX key=value lines."""

    status: str
    reason: str = ""
    timing: Timing | None = None
    suspicious: bool = False
    facts: dict[str, str] = field(default_factory=dict)


def parse_verdict(exit: JudgeExit, lines: Sequence[str], args: JudgeArgs) -> Verdict:
    """The verdict of one judge run (module docstring); never raises for any `lines`."""
    facts = sandbox_facts(lines)
    status, reason = _status(exit, lines, args)
    if status != "ok":
        return Verdict(status, reason, facts=facts)
    return _timed(lines, args, exit.wall_s, facts)


def sandbox_facts(lines: Sequence[str]) -> dict[str, str]:
    """uid, rt and seccomp from the judge's `SANDBOX k=v ...` lines (a later line wins)."""
    facts = [fact for ln in lines if ln.startswith("SANDBOX ") for fact in ln.split()[1:]]
    return dict(f.split("=", 1) for f in facts if "=" in f)


def _status(exit: JudgeExit, lines: Sequence[str], args: JudgeArgs) -> tuple[str, str]:
    """(status, reason); "ok" means RESULT ok with exit 0, before the timing record's checks."""
    ready = "READY" in lines
    result = next((ln[7:] for ln in lines if ln.startswith("RESULT ")), None)
    sig, code = exit.signal, exit.returncode
    child = next((ln.split() for ln in lines if ln.startswith("CHILD ")), None)
    if ready and child and len(child) == 3 and child[2].lstrip("-").isdigit():
        kind, number = child[1], int(child[2])  # the kernel's process died; the judge says how
        if kind == "exec":
            return _exec_failed(number)
        if kind == "load":  # it died before its main: while loading, or in a load-time hook
            return "runtime_error", (
                "forbidden system call while its binary was loading (killed by seccomp: a "
                "constructor or resolver)" if number == signal.SIGSYS else
                f"the kernel's binary cannot be loaded (killed by {signal_name(number)} while "
                "loading: static data over the memory limit, or a crashing constructor)"
            )  # fmt: skip
        sig, code, result = (number, None, result) if kind == "signal" else (None, number, None)
    if exit.timed_out:
        return "timeout", f"run exceeded {exit.limit_s:g} s (process group killed)"
    if sig == signal.SIGXCPU:
        return "timeout", "CPU-time limit exceeded"
    if sig == signal.SIGXFSZ:
        return "runtime_error", f"output over {args.output} bytes (killed)"
    if sig == signal.SIGSYS:
        return "runtime_error", "forbidden system call (killed by seccomp)"
    if sig is not None and ready:
        return "runtime_error", f"killed by {signal_name(sig)}"
    if not ready:
        infra = next((ln[6:] for ln in lines if ln.startswith("INFRA ")), None)
        return "infra_error", infra or (
            f"the judge did not start (exit status {code}"
            + (f", {signal_name(sig)})" if sig is not None else ")"))
    if result == "ok" and code == 0:
        return "ok", ""
    for word, status, prefix in RESULTS if result is not None else ():
        if result.startswith(word):
            # infra after READY: only the judge (trusted) holds fd 3, so it is still the harness's
            return status, result.removeprefix(prefix)
    if code == 0:
        return "runtime_error", ("the kernel's process exited before the judge finished (exit() "
                                 "in the kernel?)")  # fmt: skip
    return "runtime_error", f"exit status {code}"


def _exec_failed(number: int) -> tuple[str, str]:
    """The judge could not exec the kernel's binary: too large (its own static data) is the
    completion's failure; anything else is for the runner's exec probe to decide."""
    why = os.strerror(number) if number > 0 else f"errno {number}"
    if number in EXEC_TOO_BIG:
        return "runtime_error", (f"the kernel's binary cannot be loaded: {why} (static data over "
                                 "the memory limit?)")  # fmt: skip
    return EXEC_FAILED, f"cannot exec the kernel's binary: {why}"


def _timed(lines: Sequence[str], args: JudgeArgs, wall_s: float,
           facts: dict[str, str]) -> Verdict:  # fmt: skip
    """Status ok with the timed calls, after the tripwires: a damaged or impossible timing
    record is refused; CPU beyond wall x threads is flagged (`cpu_flag` says what it shows)."""
    try:
        times = [float(ln.split()[1]) for ln in lines if ln.startswith("TIME ")]
        refs = [float(ln.split()[1]) for ln in lines if ln.startswith("REF ")]
        cpu = [(float(ln.split()[1]), float(ln.split()[2])) for ln in lines
               if ln.startswith("CPU ")]  # fmt: skip
        empty = [float(ln.split()[1]) for ln in lines if ln.startswith("NOOP ")]
        ref_empty = [float(ln.split()[1]) for ln in lines if ln.startswith("REFNOOP ")]
        ref_cpu = [float(ln.split()[1]) for ln in lines if ln.startswith("REFCPU ")]
    except (IndexError, ValueError):
        times, refs, cpu, empty, ref_empty, ref_cpu = [], [], [], [], [], []
    fewest, most = args.pair_bounds
    # the empty calls (one of each child per pair) and REFCPU (one per reference call): all, or
    # none at all (a judge before them)
    empties_ok = (not empty and not ref_empty) or (len(empty) == len(times)
                                                   and len(ref_empty) == len(refs))  # fmt: skip
    ref_cpu_ok = len(ref_cpu) in (0, len(refs)) and all(math.isfinite(c) and c >= 0
                                                       for c in ref_cpu)  # fmt: skip
    if (not fewest <= len(times) <= most or len(refs) != len(times) or not empties_ok
            or not ref_cpu_ok or not all(math.isfinite(x) and x > 0
                                         for x in (*times, *refs, *empty, *ref_empty))):
        return Verdict("runtime_error", "the judge's timing record is damaged", facts=facts)
    total = sum(times) + sum(refs) + sum(empty) + sum(ref_empty)
    if total > wall_s:
        return Verdict("runtime_error", f"impossible timing record: the timed calls sum to "
                       f"{total:.3f} s in a run of {wall_s:.3f} s", facts=facts)  # fmt: skip
    keys = next((ln.split()[1:] for ln in lines if ln.startswith("KEYS ")), [])
    timing = Timing(tuple(times), tuple(refs), tuple(keys[:64]), tuple(empty),
                    tuple(ref_empty), args.threads, tuple(ref_cpu))  # fmt: skip
    counts = [m.group(1) for ln in lines if (m := CPUS_LINE.fullmatch(ln))]
    why = cpu_flag(cpu, args.threads, int(counts[0]) if counts else None)
    if not why:
        return Verdict("ok", "", timing, facts=facts)
    return Verdict("ok", why, timing, suspicious=True, facts=facts)


def _beyond(cpu_s: float, wall_s: float, cpus: int) -> bool:
    """More CPU time than `cpus` CPUs give in `wall_s`, past the wake-up and stop slack."""
    return cpu_s > wall_s * cpus * CPU_SLACK_FACTOR + CPU_SLACK_S


def cpu_flag(cpu: Sequence[tuple[float, float]], threads: int, cpus: int | None) -> str:
    """Why the timed calls' (CPU seconds, wall seconds) are suspicious, or "" when no call used
    more CPU than `threads` give in its wall time. `cpus`: the CPUs the kernel could run on (the
    judge's CPUS line; None: unknown). A call within wall x cpus ran its threads on more CPUs
    than it was given (a serial kernel, threads = 1, that starts a second thread); a call
    beyond it ran outside the timed window (nothing else adds CPU time to it)."""
    over = [(c, w) for c, w in cpu if _beyond(c, w, threads)]
    if not over:
        return ""
    given = f"{threads} thread{'s' if threads != 1 else ''}"
    count = f"{len(over)} of {len(cpu)} timed calls"
    outside = [(c, w) for c, w in over if cpus is not None and _beyond(c, w, cpus)]
    if outside:
        c, w = max(outside, key=lambda cw: cw[0] - cw[1] * (cpus or 0))
        return (f"CPU time outside the timed window: {c * 1e3:.1f} ms of CPU in a call of "
                f"{w * 1e3:.1f} ms, more than its {cpus} CPU(s) can run in that time ({given} "
                f"given; {count} over wall x threads)")  # fmt: skip
    c, w = max(over, key=lambda cw: cw[0] / cw[1] if cw[1] > 0 else math.inf)
    kind = ("CPU time beyond the wall time of a serial kernel (threads = 1)" if threads == 1
            else f"CPU time beyond wall time x {threads} threads")  # fmt: skip
    seen = (f"{kind}: {c * 1e3:.1f} ms of CPU in a call of {w * 1e3:.1f} ms, {c / w:.1f} CPUs "
            f"busy at once" if w > 0 else f"{kind}: {c * 1e3:.1f} ms of CPU in a call of 0 ms")
    if cpus is None:
        return (f"{seen}: more CPUs than the {given} it was given, or time outside the timed "
                f"window ({count})")  # fmt: skip
    return f"{seen}: it ran on more of its {cpus} CPUs than the {given} it was given ({count})"


def gflops(flops: int, times: list[float]) -> dict[str, float]:
    """Median, min and max GFLOPS of calls of `flops` operations taking `times` seconds."""
    med = statistics.median(times)
    return {"median": round(flops / med / 1e9, 4), "min": round(flops / max(times) / 1e9, 4),
            "max": round(flops / min(times) / 1e9, 4)}  # fmt: skip


def signal_name(number: int) -> str:
    """SIGSEGV, SIGRTMIN+1, ... or 'signal 77': never raises for an unknown number."""
    try:
        return signal.Signals(number).name
    except ValueError:
        if signal.SIGRTMIN <= number <= signal.SIGRTMAX:
            return f"SIGRTMIN+{number - signal.SIGRTMIN}"
        return f"signal {number}"
