"""The trusted reference DGEMM timed in every request, next to the candidate.

`bench.reference` chooses it: "auto" (numpy's bundled OpenBLAS, as `hargo bench calibrate` uses
it; the shipped `openmp` kernel where no OpenBLAS is found), "openblas", or the name of a shipped
kernel (`hargo_hpc/bench/kernels/<name>.c`). The record's `reference` says which one ran.
The reference is the project's own code: it is built once per compiler and flags (cached), never
validated, and run by the judge unfiltered; OpenBLAS is linked dynamically.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from hargo_hpc.bench.build import build_kernel
from hargo_hpc.bench.cache import CompileCache
from hargo_hpc.bench.roof import openblas_library
from hargo_hpc.bench.sandbox import InfraError
from hargo_hpc.bench.settings import BenchSettings

SHIPPED_KERNELS = ("naive", "reordered", "blocked", "openmp", "simd")
FALLBACK = "openmp"  # portable (no intrinsics) and threaded


def kernel_source(name: str) -> str:
    """Source of a shipped kernel (hargo_hpc/bench/kernels/<name>.c)."""
    return resources.files("hargo_hpc.bench").joinpath("kernels", f"{name}.c").read_text()


@dataclass(frozen=True)
class Reference:
    label: str  # "openblas (<library file>)" or "kernel:<name>"
    binary: Path


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
    """The reference binary for `settings` (built on first use; InfraError if it cannot be)."""
    choice = settings.reference
    blas = openblas_source() if choice in ("auto", "openblas") else None
    if choice == "openblas" and blas is None:
        raise InfraError("bench.reference is openblas but no trusted OpenBLAS was found "
                         "(numpy's bundled one, or set HARGO_OPENBLAS)")  # fmt: skip
    if blas is not None:
        code, link, name = blas
        label = f"openblas ({name})"
    else:
        kernel = FALLBACK if choice == "auto" else choice
        if kernel not in SHIPPED_KERNELS:
            raise InfraError(f"bench.reference: no shipped kernel {kernel!r} "
                             f"(choose auto, openblas, {', '.join(SHIPPED_KERNELS)})")  # fmt: skip
        code, link, label = kernel_source(kernel), [], f"kernel:{kernel}"
    build = build_kernel(code, settings, cache, timeout_s=timeout_s, trusted_link=link)
    if build.verdict != "built" or build.binary is None:
        raise InfraError(f"the reference {label} does not build: {build.reason} {build.output}")
    return Reference(label, build.binary)
