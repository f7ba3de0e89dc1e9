"""The trusted reference DGEMM timed in every request, next to the candidate.

`reference(settings, cache, timeout_s)` builds (once, cached) the binary `bench.reference`
chooses: numpy's OpenBLAS (`auto`, `openblas`) or a shipped kernel (`kernel_source`).
`openblas_kernel` picks the OPENBLAS_CORETYPE that makes OpenBLAS run the best kernel this
CPU supports (`cpu_level`, `coretype_candidates`, `openblas_corename`). The choices, the core
type rule and the record's `reference*` fields: docs/bench.md, "Reference, roof and
calibration".
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path

from hargo_hpc.bench.build import build_kernel
from hargo_hpc.bench.cache import CompileCache
from hargo_hpc.bench.peak import machine_flags
from hargo_hpc.bench.roof import openblas_library
from hargo_hpc.bench.sandbox import InfraError
from hargo_hpc.bench.settings import BenchSettings

SHIPPED_KERNELS = ("naive", "reordered", "blocked", "openmp", "simd")
FALLBACK = "openmp"  # portable (no intrinsics) and threaded
# the DGEMM level of each OpenBLAS x86-64 core name (lower case); other names: 0
CORE_LEVEL = {"sapphirerapids": 3, "cooperlake": 3, "skylakex": 3, "haswell": 2, "zen": 2,
              "sandybridge": 1, "bulldozer": 1, "piledriver": 1, "steamroller": 1,
              "excavator": 1}  # fmt: skip
SKYLAKEX_FLAGS = frozenset({"avx512f", "avx512cd", "avx512dq", "avx512bw", "avx512vl"})


def kernel_source(name: str) -> str:
    """Source of a shipped kernel (hargo_hpc/bench/kernels/<name>.c)."""
    return resources.files("hargo_hpc.bench").joinpath("kernels", f"{name}.c").read_text()


@dataclass(frozen=True)
class Reference:
    label: str  # "openblas (<library file>)" or "kernel:<name>"
    binary: Path
    kernel: str = ""  # the core name OpenBLAS reports ("SkylakeX"), or "kernel:<name>"
    coretype: str = ""  # the OPENBLAS_CORETYPE the run sets ('' = OpenBLAS's own choice)


def cpu_level(flags: Iterable[str]) -> int:
    """3: AVX-512 (the Skylake-X set F, CD, DQ, BW, VL), 2: AVX2 + FMA, 1: AVX, 0: older."""
    f = set(flags)
    if f >= SKYLAKEX_FLAGS:
        return 3
    if {"avx2", "fma"} <= f:
        return 2
    return 1 if "avx" in f else 0


def coretype_candidates(flags: Iterable[str]) -> list[str]:
    """OpenBLAS core names of the best level these CPU flags support, best first: SapphireRapids
    (also amx_bf16, amx_tile, avx512_bf16), Cooperlake (also avx512_bf16), SkylakeX; Haswell;
    Sandybridge; none below AVX."""
    f = set(flags)
    level = cpu_level(f)
    if level == 3:
        names = ["SkylakeX"]
        if "avx512_bf16" in f:
            names.insert(0, "Cooperlake")
            if {"amx_bf16", "amx_tile"} <= f:
                names.insert(0, "SapphireRapids")
        return names
    return {2: ["Haswell"], 1: ["Sandybridge"]}.get(level, [])


def openblas_kernel(flags: Iterable[str], corename: Callable[[str], str],
                    env_coretype: str | None = None) -> tuple[str, str]:  # fmt: skip
    """(OPENBLAS_CORETYPE to set, the core name OpenBLAS then reports) on a CPU with these
    flags; `corename(t)` is what the library reports with OPENBLAS_CORETYPE=t ('' = unset).

    The environment's type if set; else '' (OpenBLAS's own choice) if that choice is of the
    CPU's level; else the first of `coretype_candidates` the library reports back as itself;
    else OpenBLAS's own choice. The name is '' where the library reports none."""
    if env_coretype:
        return env_coretype, corename(env_coretype)
    own = corename("")
    flags = frozenset(flags)
    if CORE_LEVEL.get(own.lower(), 0) >= cpu_level(flags):
        return "", own
    for name in coretype_candidates(flags):
        if corename(name).lower() == name.lower():
            return name, name
    return "", own


_PROBE = """import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
for name in sys.argv[2:]:
    try:
        f = getattr(lib, name)
    except AttributeError:
        continue
    f.restype = ctypes.c_char_p
    print(f().decode())
    break
"""


def corename_symbols(cblas_symbol: str) -> list[str]:
    """openblas_get_corename with the prefix and suffix of the library's cblas_dgemm symbol
    (scipy_cblas_dgemm64_ -> scipy_openblas_get_corename64_), then the plain name."""
    prefix, _, suffix = cblas_symbol.partition("cblas_dgemm")
    named = f"{prefix}openblas_get_corename{suffix}"
    return [named] if named == "openblas_get_corename" else [named, "openblas_get_corename"]


@lru_cache(maxsize=32)
def openblas_corename(lib: str, cblas_symbol: str, coretype: str) -> str:
    """The core name `lib` reports with OPENBLAS_CORETYPE=coretype ('' = unset), asked in a
    fresh isolated interpreter (the type is chosen when the library loads); '' if it cannot say
    (not an OpenBLAS, or it failed)."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "OPENBLAS_NUM_THREADS": "1",
           "LC_ALL": "C"}  # fmt: skip
    if coretype:
        env["OPENBLAS_CORETYPE"] = coretype
    try:
        done = subprocess.run([sys.executable, "-I", "-S", "-c", _PROBE, lib,
                               *corename_symbols(cblas_symbol)], env=env, capture_output=True,
                              text=True, timeout=20)  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return ""
    words = done.stdout.split()
    return words[0] if done.returncode == 0 and words else ""


def openblas_source() -> tuple[str, list[str], str] | None:
    """(source, link arguments, library file name) of the OpenBLAS kernel, or None."""
    found = openblas_library()
    if not found:
        return None
    lib, symbol = found
    int64 = symbol.endswith("64_") or os.environ.get("HARGO_OPENBLAS_INT64") == "1"
    code = (
        f"#define HARGO_CBLAS {symbol}\n#define HARGO_BLASINT {'long' if int64 else 'int'}\n"
        + kernel_source("openblas")
    )
    return code, [lib, f"-Wl,-rpath,{os.path.dirname(lib)}"], os.path.basename(lib)


def reference(settings: BenchSettings, cache: CompileCache, timeout_s: float) -> Reference:
    """The reference binary for `settings` (built on first use; InfraError if it cannot be),
    with the OpenBLAS core type its runs set and the core name OpenBLAS reports."""
    choice = settings.reference
    blas = openblas_source() if choice in ("auto", "openblas") else None
    if choice == "openblas" and blas is None:
        raise InfraError("bench.reference is openblas but no trusted OpenBLAS was found "
                         "(numpy's bundled one, or set HARGO_OPENBLAS)")  # fmt: skip
    coretype = ""
    if blas is not None:
        code, link, name = blas
        label = f"openblas ({name})"
        lib, symbol = openblas_library() or ("", "")
        coretype, kernel = openblas_kernel(
            machine_flags(), lambda t: openblas_corename(lib, symbol, t),
            os.environ.get("OPENBLAS_CORETYPE"),
        )
        kernel = kernel or "unknown (the library reports no core name)"
    else:
        shipped = FALLBACK if choice == "auto" else choice
        if shipped not in SHIPPED_KERNELS:
            raise InfraError(f"bench.reference: no shipped kernel {shipped!r} "
                             f"(choose auto, openblas, {', '.join(SHIPPED_KERNELS)})")  # fmt: skip
        code, link, label = kernel_source(shipped), [], f"kernel:{shipped}"
        kernel = label
    build = build_kernel(code, settings, cache, timeout_s=timeout_s, trusted_link=link)
    if build.verdict != "built" or build.binary is None:
        raise InfraError(f"the reference {label} does not build: {build.reason} {build.output}")
    return Reference(label, build.binary, kernel, coretype)
