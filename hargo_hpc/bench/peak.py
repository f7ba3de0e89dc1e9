"""The node's theoretical peak DP GFLOPS: the bound above which an `ok` run is `suspicious`.

Derived at run time from what the machine says (`peak_from`: CPU flags and clock), never
measured and never stored: a number measured earlier must not govern a later run. Each choice
errs high; where a VM reports a base clock far below the host's turbo, raise `peak_margin`
(docs/bench.md, "Status taxonomy and reward").
"""

from __future__ import annotations

import contextlib
import glob
import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path

NOMINAL_TURBO = 2.0  # turbo over a nominal clock reading (cpu MHz, model name)
ASSUMED_GHZ = 6.5  # no clock reported at all: above any shipped CPU's turbo (6.2 GHz)
UNKNOWN_FLOP_PER_CYCLE = 64

_MODEL_GHZ = re.compile(r"@\s*([0-9]+(?:\.[0-9]+)?)\s*GHz", re.IGNORECASE)


@dataclass(frozen=True)
class Peak:
    """The theoretical peak of `cpus` CPUs of this node and the suspicious bound on it."""

    gflops: float  # cpus x ghz x flop_per_cycle
    bound: float  # margin x gflops
    cpus: int
    ghz: float  # the clock used (turbo included, see the module docstring)
    flop_per_cycle: int
    isa: str  # the flag F was chosen from: "avx512f", "avx2", ..., "unknown"
    clock_source: str  # "cpufreq max", "2.0 x cpu MHz 2600", "assumed", ...
    margin: float

    def to_dict(self) -> dict[str, float | int | str]:
        return asdict(self)


def cpu_flags(cpuinfo: str) -> frozenset[str]:
    """The flags every processor of a /proc/cpuinfo text lists (x86 `flags`, aarch64
    `Features`): the intersection, so a choice made from them holds on every CPU."""
    sets = [frozenset(line.split(":", 1)[1].split()) for line in cpuinfo.splitlines()
            if line.split(":", 1)[0].strip() in ("flags", "Features") and ":" in line]  # fmt: skip
    if not sets:
        return frozenset()
    return frozenset.intersection(*sets)


def flop_per_cycle(flags: Iterable[str]) -> tuple[int, str]:
    """(F, the flag it was chosen from): DP FLOP per cycle per CPU, the most any core of the
    instruction set issues (two FMA pipes of the widest vector, 2 FLOP per FMA lane), from the
    flags every processor lists:

        avx512f                 2 x 8 x 2 = 32
        avx2 / fma / fma4       2 x 4 x 2 = 16
        avx                     2 x 4     =  8   (one 256-bit add and one mul pipe, no FMA)
        sse2                    2 x 2     =  4
        aarch64 sve             2 x 8 x 2 = 32   (A64FX: two 512-bit FMA pipes)
        aarch64 asimd           4 x 2 x 2 = 16   (four 128-bit FMA pipes)
        anything else                       64   (unknown: generous)

    Cores with one FMA pipe, 256-bit datapaths for 512-bit instructions (Zen 4) or
    hyperthreads sharing one core's pipes (a CPU is a logical CPU here) have a lower real
    peak: F errs high."""
    f = set(flags)
    for flag, flop in (("avx512f", 32), ("avx2", 16), ("fma", 16), ("fma4", 16), ("avx", 8),
                       ("sve", 32), ("asimd", 16), ("sse2", 4)):  # fmt: skip
        if flag in f:
            return flop, flag
    return UNKNOWN_FLOP_PER_CYCLE, "unknown"


def clock_ghz(cpuinfo: str, max_freq_khz: Sequence[int]) -> tuple[float, str]:
    """(f in GHz, where it came from): the largest `cpufreq/cpuinfo_max_freq` (the maximum
    turbo clock) where the kernel exposes cpufreq; else (VMs, no cpufreq driver) NOMINAL_TURBO
    x the largest nominal reading of cpuinfo (`cpu MHz`, the model name's `@ x.yGHz`), which
    turbo exceeds (server parts turbo up to ~1.9 x base); where no clock is reported at all,
    ASSUMED_GHZ."""
    good = [k for k in max_freq_khz if k > 0]
    if good:
        return max(good) / 1e6, "cpufreq cpuinfo_max_freq"
    readings: list[tuple[float, str]] = []
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "cpu MHz":
            with contextlib.suppress(ValueError):
                readings.append((float(value) / 1000.0, f"cpu MHz {value.strip()}"))
        elif key == "model name" and (m := _MODEL_GHZ.search(value)):
            readings.append((float(m.group(1)), f"model name {m.group(1)} GHz"))
    readings = [r for r in readings if r[0] > 0]
    if not readings:
        return ASSUMED_GHZ, "assumed (no clock reported)"
    ghz, source = max(readings)
    return NOMINAL_TURBO * ghz, f"{NOMINAL_TURBO:g} x {source}"


def peak_from(cpuinfo: str, max_freq_khz: Sequence[int], cpus: int, margin: float) -> Peak:
    """The peak and bound of `cpus` CPUs from a /proc/cpuinfo text and the cpufreq maxima (kHz):

        peak  = cpus x f x F            (GFLOPS; f: `clock_ghz`, F: `flop_per_cycle`)
        bound = margin x peak           (`BenchSettings.peak_margin`, default 1.25)"""
    flop, isa = flop_per_cycle(cpu_flags(cpuinfo))
    ghz, source = clock_ghz(cpuinfo, max_freq_khz)
    gflops = max(1, cpus) * ghz * flop
    return Peak(gflops=round(gflops, 3), bound=round(margin * gflops, 3), cpus=max(1, cpus),
                ghz=round(ghz, 4), flop_per_cycle=flop, isa=isa, clock_source=source,
                margin=margin)  # fmt: skip


@lru_cache(maxsize=1)
def _this_machine() -> tuple[str, tuple[int, ...]]:
    """(/proc/cpuinfo, cpufreq maxima in kHz) of this node, read once per process."""
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        cpuinfo = ""
    freqs = []
    for path in glob.glob("/sys/devices/system/cpu/cpu[0-9]*/cpufreq/cpuinfo_max_freq"):
        with contextlib.suppress(OSError, ValueError):
            freqs.append(int(Path(path).read_text().strip()))
    return cpuinfo, tuple(freqs)


def machine_peak(cpus: int, margin: float) -> Peak:
    """The peak and bound of `cpus` CPUs of the machine this runs on."""
    cpuinfo, freqs = _this_machine()
    return peak_from(cpuinfo, freqs, cpus, margin)


def machine_flags() -> frozenset[str]:
    """The CPU flags every processor of this machine lists."""
    return cpu_flags(_this_machine()[0])
