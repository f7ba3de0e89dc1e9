"""Build: compile the kernel as its own translation unit, inspect it, link it with the child
side of the judge.

    kernel.c --[compiler flags -include hargo_gemm.h -S]--> kernel.s
    kernel.s --[no .incbin/.include/.macro...: the assembler must not read files]--> kernel.o
    kernel.o + kernel_main.o --[compiler flags -static -fopenmp -lm]--> kernel.bin
    (all in one sandboxed shell, one timeout), then
    kernel.o --[readelf -s -S: validate.check_object]--> accepted, or the build is rejected

`kernel.bin` is static: the judge execs it under a seccomp filter that opens no file, so it must
need no dynamic loader and no shared library. The judge itself (judge.c) and `kernel_main.o` are
trusted, compiled once per compiler (`harness`). The prototype header makes a wrongly typed gemm
a compiler error ("conflicting types"), reported as a format violation. Builds are cached by
hash(source, compiler identity, flags, harness sources) - see cache.py; the compiler identity
includes `--version` and the resolved target (`-Q --help=target` under the flags), so
`-march=native` on a different CPU is a new key.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from hargo_hpc.bench.cache import CompileCache, cache_key
from hargo_hpc.bench.sandbox import InfraError, Limits, base_env, run_sandboxed
from hargo_hpc.bench.settings import BenchSettings
from hargo_hpc.bench.validate import (
    ASM_FILE_DIRECTIVES,
    SIGNATURE,
    Violation,
    asm_directive_pattern,
    check_object,
    openmp_symbols,
    parse_readelf,
)

PROTOTYPE = f"{SIGNATURE};\n"
# In the generated assembly, no directive that reads a file or builds directives by macro: this
# is what the assembler will see, whatever preprocessor or string tricks produced it.  (`.file`
# is allowed here: the compiler writes it.)  The same pattern for Python and for grep -E.
ASM_FORBIDDEN = asm_directive_pattern(ASM_FILE_DIRECTIVES)
ASM_FORBIDDEN_ERE = (
    rf"(^|[^[:alnum:]_$.])\.({'|'.join(ASM_FILE_DIRECTIVES)})([^[:alnum:]_]|$)"
)
ASM_REJECTED = 97  # exit status of the build script when kernel.s holds such a directive
# compiler output that means the machine, not the code, failed: infra_error, never cached
ENVIRONMENTAL = re.compile(
    r"No space left on device|cannot execute|installation problem|Resource temporarily "
    r"unavailable|Too many open files|Read-only file system|Input/output error|"
    r"error while loading shared libraries",
    re.IGNORECASE,
)
# the compiler (or a sub-process) was killed or ran out of memory: the policy's compile bomb
# under the memory limit (a compile_error), but not cached - the limit is a setting
RESOURCE = re.compile(
    r"Killed signal|terminated program|out of memory|virtual memory exhausted|cannot allocate|"
    r"internal compiler error",
    re.IGNORECASE,
)
LINK_FLAGS = ["-static", "-fopenmp", "-lm", "-Wl,-z,noexecstack"]
TRUSTED_LINK_FLAGS = ["-fopenmp", "-lm", "-Wl,-z,noexecstack,-z,now,-z,relro"]
HARNESS_FLAGS = ["-O2", "-Wall"]
HARNESS_FILES = ("judge.c", "kernel_main.c", "hargo_shared.h")


@dataclass
class Build:
    """Outcome of building one kernel: verdict is built | compile_error | format_violation |
    timeout; `binary` is the linked executable (inside the cache or a scratch dir)."""

    verdict: str
    reason: str
    output: str
    binary: Path | None  # kernel.bin: kernel_main.o + the kernel, what the judge execs
    cache_hit: bool
    seconds: float
    openmp: list[str] | None = None  # OpenMP runtime symbols the kernel object calls


@dataclass(frozen=True)
class Harness:
    """The trusted parts, compiled once per compiler: the judge and the child's main."""

    judge: Path
    kernel_main: Path


@functools.lru_cache(maxsize=1)
def harness_sources() -> dict[str, str]:
    package = resources.files("hargo_hpc.bench")
    return {name: package.joinpath(name).read_text() for name in HARNESS_FILES}


def harness_digest() -> str:
    """One hash of the harness sources (part of every build's cache key)."""
    return cache_key(*(f"{name}\0{text}" for name, text in sorted(harness_sources().items())))


def resolve_compiler(compiler: str) -> str:
    path = shutil.which(compiler)
    if not path:
        raise InfraError(f"compiler {compiler!r} not found on PATH")
    return os.path.realpath(path)


@functools.lru_cache(maxsize=16)
def compiler_identity(compiler: str, flags: tuple[str, ...]) -> str:
    """`--version` first line + hash of the target options the flags resolve to."""
    try:
        version = subprocess.run(
            [compiler, "--version"], capture_output=True, text=True, timeout=30, check=True
        ).stdout.splitlines()[0]
        target = subprocess.run(
            [compiler, *flags, "-Q", "--help=target"], capture_output=True, text=True, timeout=30
        ).stdout
    except (OSError, subprocess.SubprocessError, IndexError) as err:
        raise InfraError(f"cannot run {compiler}: {err}") from None
    return f"{version} target:{hashlib.sha256(target.encode()).hexdigest()[:16]}"


def compiler_version(compiler: str) -> str:
    return compiler_identity(compiler, ()).split(" target:")[0]


def _compile_limits(settings: BenchSettings, timeout: float) -> Limits:
    return Limits(
        wall_s=timeout,
        cpu_s=int(timeout) + 2,
        address_space_mb=settings.compile_memory_limit_mb,
        processes=settings.max_processes,
        file_size_bytes=256 << 20,
        open_files=256,
        stack_mb=64,
    )


def _excerpt(text: str, workdir: str, cap: int) -> str:
    text = text.replace(workdir + "/", "").replace(workdir, ".")
    return text if len(text) <= cap else text[:cap] + f"\n[... {len(text) - cap} more chars]"


def harness(cache: CompileCache, compiler: str) -> Harness:
    """The judge binary and `kernel_main.o` (trusted code, fixed flags), from the cache."""
    key = cache_key("harness", harness_digest(), compiler_identity(compiler, tuple(HARNESS_FLAGS)))
    hit = cache.load(key)
    if hit is None:
        with tempfile.TemporaryDirectory(prefix="hargo-harness-") as tmp:
            for name, text in harness_sources().items():
                Path(tmp, name).write_text(text)
            for argv in (
                [compiler, *HARNESS_FLAGS, "judge.c", "-o", "judge", "-lm"],
                [compiler, *HARNESS_FLAGS, "-c", "kernel_main.c", "-o", "kernel_main.o"],
            ):
                proc = subprocess.run(argv, cwd=tmp, capture_output=True, text=True, timeout=120)
                if proc.returncode != 0:
                    raise InfraError(f"the harness does not compile: {proc.stderr[:500]}")
            files = {name: str(Path(tmp, name)) for name in ("judge", "kernel_main.o")}
            entry = cache.store(key, {"verdict": "harness"}, files)
    else:
        entry = hit[1]
    return Harness(entry / "judge", entry / "kernel_main.o")


def build_kernel(
    code: str,
    settings: BenchSettings,
    cache: CompileCache,
    *,
    timeout_s: float,
    ids: tuple[int, int] | None = None,
    trusted_link: list[str] | None = None,
) -> Build:
    """Compile, inspect and link `code` (cached) as the sandbox user `ids`. `trusted_link` (the
    project's own reference only) skips the symbol check and links dynamically with these
    arguments (e.g. OpenBLAS): the judge runs a trusted binary unfiltered."""
    start = time.monotonic()
    compiler = resolve_compiler(settings.compiler)
    flags = list(settings.flags)
    identity = compiler_identity(compiler, tuple(flags))
    key = cache_key(
        "kernel", code, identity, "\0".join(flags), harness_digest(), repr(trusted_link)
    )
    hit = cache.load(key)
    if hit:
        meta, entry = hit
        binary = entry / "kernel.bin" if meta["verdict"] == "built" else None
        return Build(meta["verdict"], meta["reason"], meta["output"], binary, True,
                     time.monotonic() - start, meta.get("openmp", []))  # fmt: skip
    kernel_main = harness(cache, compiler).kernel_main
    cap = settings.output_cap_bytes
    with tempfile.TemporaryDirectory(prefix="hargo-build-") as work:
        Path(work, "kernel.c").write_text(code)
        Path(work, "hargo_gemm.h").write_text(PROTOTYPE)
        shutil.copy2(kernel_main, Path(work, "kernel_main.o"))
        env = base_env(work, {"PATH": f"{os.path.dirname(compiler)}:/usr/bin:/bin"})
        limits = _compile_limits(settings, timeout_s)
        # kernel.c -> kernel.s -> (no file-reading directives) -> kernel.o -> kernel.bin, in one
        # sandboxed shell (one process start); the binary only ever runs after the object
        # passed the checks below
        asm_cmd = [compiler, *flags, "-include", "hargo_gemm.h", "-S", "kernel.c",
                   "-o", "kernel.s"]  # fmt: skip
        obj_cmd = [compiler, *flags, "-c", "kernel.s", "-o", "kernel.o"]
        link = LINK_FLAGS if trusted_link is None else [*TRUSTED_LINK_FLAGS, *trusted_link]
        link_cmd = [compiler, *flags, "kernel.o", "kernel_main.o", *link, "-o", "kernel.bin"]
        script = (
            f"{shlex.join(asm_cmd)} || exit $?\n"
            f"if grep -Eiq {shlex.quote(ASM_FORBIDDEN_ERE)} kernel.s; "
            f"then exit {ASM_REJECTED}; fi\n"
            f"{shlex.join(obj_cmd)} && {shlex.join(link_cmd)}"
        )
        res = run_sandboxed(["/bin/sh", "-c", script], work, limits, env, ids=ids,
                            output_cap=cap * 4)  # fmt: skip
        output = _excerpt(res.output, work, cap)
        seconds = time.monotonic() - start
        if res.timed_out or res.signal in (signal.SIGKILL, signal.SIGXCPU):
            return Build("timeout", f"compile exceeded {timeout_s:g} s", output, None, False,
                         seconds)  # fmt: skip
        shell_failed = res.returncode in (126, 127)  # sh could not find or run a program
        if res.signal is not None or shell_failed or ENVIRONMENTAL.search(res.output):
            raise InfraError(f"the compiler could not run: {_first_error(output)}")
        # a deterministic verdict is cached; one caused by resources (memory limit) is not
        cacheable = not RESOURCE.search(res.output)

        def verdict(v: str, reason: str, out: str = output) -> Build:
            if cacheable:
                cache.store(key, {"verdict": v, "reason": reason, "output": out})
            return Build(v, reason, out, None, False, seconds)

        asm = Path(work, "kernel.s")
        if res.returncode == ASM_REJECTED and asm.is_file() and not Path(work, "kernel.o").exists():
            m = ASM_FORBIDDEN.search(asm.read_text(errors="replace"))
            name = m.group(1).lower() if m else "incbin"
            return verdict("format_violation", f"assembler directive .{name} is not allowed", "")
        obj = Path(work, "kernel.o")
        if not obj.is_file():
            if "conflicting types for" in res.output and "gemm" in res.output:
                return verdict("format_violation", f"gemm is not {SIGNATURE}")
            return verdict("compile_error", _first_error(output))
        openmp: list[str] = []
        if trusted_link is None:
            try:
                symbols, sections = parse_readelf(_tool(["readelf", "-s", "-S", "-W", str(obj)]))
                openmp = openmp_symbols(symbols)
                check_object(symbols, sections)
            except Violation as v:
                return verdict("format_violation", str(v))
        if res.returncode != 0 or not Path(work, "kernel.bin").is_file():
            return verdict("compile_error", "link failed")
        meta = {"verdict": "built", "reason": "", "output": output, "openmp": openmp}
        entry = cache.store(key, meta, {"kernel.bin": str(Path(work, "kernel.bin"))})
    return Build("built", "", output, entry / "kernel.bin", False, time.monotonic() - start,
                 openmp)


def _first_error(output: str) -> str:
    for line in output.splitlines():
        if "error" in line:
            return line.strip()[:200]
    return (output.strip().splitlines() or ["the compiler failed"])[0][:200]


def _tool(argv: list[str]) -> str:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as err:
        raise InfraError(f"{argv[0]} failed: {err}") from None
    if proc.returncode != 0:
        raise InfraError(f"{argv[0]} failed: {proc.stderr[:300]}")
    return proc.stdout
