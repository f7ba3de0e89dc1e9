"""Build: compile the kernel as its own translation unit, inspect it, link it with the child
side of the judge, into a static `kernel.bin` the judge execs.

    kernel.c -> kernel.s (checked) -> kernel.o (one global symbol, gemm; checked) ->
    + kernel_main.o -> kernel.bin (checked)

Both compiler runs are sandboxed with a `view` of only the toolchain and the build directory.
A failure counts as the machine's (`infra_error`) only when the toolchain says so and a probe
(the naive kernel through the same path) confirms it; else it is the completion's
`compile_error`. Builds are cached (cache.py). Each check and why: docs/bench.md, "Build and
cache".
"""

from __future__ import annotations

import atexit
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
import weakref
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from hargo_hpc.bench.cache import CompileCache, cache_key
from hargo_hpc.bench.sandbox import InfraError, Limits, Outcome, base_env, run_sandboxed
from hargo_hpc.bench.settings import BenchSettings
from hargo_hpc.bench.validate import (
    ASM_FILE_DIRECTIVES,
    LINK_SLACK,
    NONALLOC_LIMIT,
    SIGNATURE,
    Violation,
    asm_directive_pattern,
    check_artefact_size,
    check_binary,
    check_object,
    check_static_size,
    check_writable_code,
    openmp_symbols,
    parse_readelf,
)

PROTOTYPE = f"{SIGNATURE};\n"
# In the generated assembly, no directive that reads a file or builds directives by macro: this
# is what the assembler will see, whatever preprocessor or string tricks produced it.  (`.file`
# is allowed here: the compiler writes it.)
ASM_FORBIDDEN = asm_directive_pattern(ASM_FILE_DIRECTIVES)
# GNU as drops /* comments */ before it parses (".inc/**/bin" is .incbin to it); gcc never
# writes one, so a "/*" outside the assembly's string literals came from an asm statement
ASM_LEXEMES = re.compile(r'"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\\\n])|(/\*)')
ASM_TEXT_LIMIT = 128 << 20  # bytes of kernel.s read for the scan; more is refused
COMPILE_FILE_LIMIT = 256 << 20  # RLIMIT_FSIZE of the compile: kernel.s, the objects, the binary
DATA_REJECTED = 98  # exit status of the build script when `size` finds more than that
FILE_REJECTED = 97  # ... when kernel.o or kernel.bin is larger than its bound (all sections)
PROBE_TTL_S = 60.0  # how long a probe's verdict on a toolchain is believed
PIPELINE = "5"  # in every kernel's cache key: verdicts of earlier build pipelines are not reused
TOOLCHAIN_VIEW = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")

# compiler output that means the machine, not the code, failed - believed only on the
# toolchain's own lines (see LOCATED) and confirmed by the probe
ENVIRONMENTAL = re.compile(
    r"No space left on device|cannot execute|installation problem|Resource temporarily "
    r"unavailable|Too many open files|Read-only file system|Input/output error|"
    r"error while loading shared libraries|cannot fork|Cannot allocate memory for|"
    r"Disk quota exceeded|Stale file handle|Permission denied",
    re.IGNORECASE,
)
# the compiler (or a sub-process) was killed or ran out of memory: the policy's compile bomb
# under the memory limit (a compile_error), but not cached - the limit is a setting
RESOURCE = re.compile(
    r"Killed signal|terminated program|out of memory|virtual memory exhausted|cannot allocate|"
    r"internal compiler error|File size limit exceeded",
    re.IGNORECASE,
)
# a line about the code, not about the toolchain: a diagnostic located in a file
# (`kernel.c:3:5: ...`, `kernel.s:12: Error: ...`, `/usr/include/x.h:9:1: ...`), the include
# chain, the source excerpt and caret lines gcc prints under a diagnostic, and the
# `kernel.c: In function 'gemm':` / `kernel.s: Assembler messages:` headers
LOCATED = re.compile(
    r"^(?:In file included from |\s+from )?[^\s:]+:\d+(?::\d+)?[:,]"
    r"|^\s*\d*\s*\|"
    r"|^(?:kernel\.[cs]|hargo_gemm\.h): "
)
LOCATED_ERROR = re.compile(r"^[^\s:]+:\d+(?::\d+)?: (?:fatal )?(?:error|Error):", re.MULTILINE)
KERNEL_ERROR = re.compile(r"^kernel\.c:\d+(?::\d+)?: (?:fatal )?error:", re.MULTILINE)
# gemm's type is the compiler's to judge: kernel.c is compiled with the prototype included, so
# a definition of another type conflicts with it and a static one follows a non-static one
CONFLICT = re.compile(r"^kernel\.c:\d+(?::\d+)?: error: (?:conflicting types for|static "
                      r"declaration of) \W?gemm\W", re.MULTILINE)  # fmt: skip
MISSING_LIB = re.compile(r"cannot find -l(\S+?):?(?:\s|$)")
LINK_FLAGS = ["-static", "-fopenmp", "-lm", "-Wl,-z,noexecstack"]
TRUSTED_LINK_FLAGS = ["-fopenmp", "-lm", "-Wl,-z,noexecstack,-z,now,-z,relro"]
HARNESS_FLAGS = ["-O2", "-Wall"]
PARTIAL_LINK_FLAGS = ("-m", "-B", "--sysroot", "-fuse-ld", "-L")
HARNESS_FILES = ("judge.c", "kernel_main.c", "hargo_shared.h")


@dataclass
class Build:
    """Outcome of building one kernel: verdict is built | compile_error | format_violation |
    timeout; `binary` is the linked executable (inside the cache or a scratch dir); `sandbox`
    and `sandbox_unavailable` are the compile's layers (of the build that made a cached entry)."""

    verdict: str
    reason: str
    output: str
    binary: Path | None  # kernel.bin: kernel_main.o + the kernel, what the judge execs
    cache_hit: bool
    seconds: float
    openmp: list[str] | None = None  # OpenMP runtime symbols the kernel object calls
    sandbox: list[str] = field(default_factory=list)
    sandbox_unavailable: list[str] = field(default_factory=list)


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
            entry = cache.store(key, {"verdict": "harness"}, files) or _scratch(key, files)
    else:
        entry = hit[1]
    return Harness(entry / "judge", entry / "kernel_main.o")


def toolchain_view(compiler: str, args: list[str]) -> list[str]:
    """What the compile may see besides its directory: /usr (and the merged-/usr links), the
    compiler's installation when it lives elsewhere (its prefix when it sits in a `bin`
    directory, else the file itself), and absolute paths named in the flags (`-I/opt/x`,
    `--sysroot=/x`, a library to link)."""
    paths = list(TOOLCHAIN_VIEW)
    real = os.path.realpath(compiler)
    if not real.startswith("/usr/"):
        parent = os.path.dirname(real)
        paths.append(os.path.dirname(parent) if os.path.basename(parent) == "bin" else real)
    for arg in args:
        for m in re.finditer(r"(?:^-[A-Za-z]?|[=,:]|^)(/[^\s,:=]+)", arg):
            if os.path.exists(m.group(1)):
                paths.append(m.group(1))
    return paths


@dataclass
class _Toolchain:
    """Everything of one build but the source: how and as whom it compiles and links."""

    compiler: str
    flags: list[str]
    identity: str
    trusted_link: list[str] | None
    kernel_main: Path
    ids: tuple[int, int] | None
    memory_mb: int
    processes: int
    cap: int
    static_limit: int  # bytes of allocated sections + commons (`static_data_limit_mb`)


@dataclass
class _Attempt:
    """One run of the pipeline. verdict: built | compile_error | format_violation | timeout, or
    `suspect` (the toolchain may be at fault: the probe decides)."""

    verdict: str
    reason: str = ""
    output: str = ""  # excerpt for the record
    cacheable: bool = True
    openmp: list[str] = field(default_factory=list)
    layers: list[str] = field(default_factory=list)
    unavailable: list[str] = field(default_factory=list)
    link_output: str = ""  # the raw output of a link that failed (names missing libraries)


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
    project's own reference only) skips the symbol checks and links dynamically with these
    arguments (e.g. OpenBLAS): the judge runs a trusted binary unfiltered."""
    start = time.monotonic()
    compiler = resolve_compiler(settings.compiler)
    flags = list(settings.flags)
    identity = compiler_identity(compiler, tuple(flags))
    key = cache_key(
        "kernel", code, identity, "\0".join(flags), harness_digest(), repr(trusted_link),
        f"pipeline={PIPELINE} static<={settings.static_data_limit_mb}MB",
    )  # fmt: skip
    hit = cache.load(key)
    if hit:
        meta, entry = hit
        binary = entry / "kernel.bin" if meta["verdict"] == "built" else None
        return Build(meta["verdict"], meta["reason"], meta["output"], binary, True,
                     time.monotonic() - start, meta.get("openmp", []),
                     meta.get("sandbox", []), meta.get("sandbox_unavailable", []))  # fmt: skip
    tc = _Toolchain(compiler, flags, identity, trusted_link,
                    harness(cache, compiler).kernel_main, ids, settings.compile_memory_limit_mb,
                    settings.max_processes, settings.output_cap_bytes,
                    settings.static_data_limit_mb << 20)  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="hargo-build-") as work:
        att = _attempt(code, work, tc, timeout_s)
        if att.verdict == "suspect":
            if trusted_link is not None:
                raise InfraError(f"the toolchain failed on a trusted kernel: {att.reason}")
            # the probe has a budget of its own: a completion that used up the request's cannot
            # make the toolchain look broken (and so its failure unscored)
            failure = _probe(tc, settings.compile_timeout_s)
            if failure:
                raise InfraError(f"the toolchain failed: {att.reason} (and the shipped naive "
                                 f"kernel does not build either: {failure})")  # fmt: skip
            # the toolchain builds a known-good kernel: the failure is the completion's
            att.verdict, att.cacheable = "compile_error", False
        seconds = time.monotonic() - start
        meta = {"verdict": att.verdict, "reason": att.reason, "output": att.output,
                "openmp": att.openmp, "sandbox": att.layers,
                "sandbox_unavailable": att.unavailable}  # fmt: skip
        build = Build(att.verdict, att.reason, att.output, None, False, seconds, att.openmp,
                      att.layers, att.unavailable)  # fmt: skip
        if att.verdict == "built":
            files = {"kernel.bin": str(Path(work, "kernel.bin"))}
            entry = cache.store(key, meta, files)
            if entry is None:  # the cache is full of entries in use: the binary is ours alone
                entry = _scratch(key, files, build if trusted_link is None else None)
            build.binary = entry / "kernel.bin"
        elif att.verdict != "timeout" and att.cacheable:
            cache.store(key, meta)
    build.seconds = time.monotonic() - start
    return build


_SCRATCH: dict[str, Path] = {}  # process-lifetime copies of trusted artefacts the cache refused


def _scratch(key: str, files: dict[str, str], owner: object | None = None) -> Path:
    """A private directory holding copies of `files` when the cache has no room for them:
    removed when `owner` (a candidate's Build) is dropped, or at exit (the harness and the
    reference, which callers keep by path; one per key)."""
    if owner is None and key in _SCRATCH and _SCRATCH[key].is_dir():
        return _SCRATCH[key]
    path = Path(tempfile.mkdtemp(prefix="hargo-bin-"))
    os.chmod(path, 0o755)  # the judge's child execs kernel.bin as the sandbox uid
    for name, src in files.items():
        shutil.copy2(src, path / name)
    if owner is None:
        _SCRATCH[key] = path
        atexit.register(shutil.rmtree, path, True)
    else:
        weakref.finalize(owner, shutil.rmtree, path, True)
    return path


_PROBES: dict[tuple[str, str, tuple[str, ...]], tuple[float, str | None]] = {}


def _probe(tc: _Toolchain, timeout: float) -> str | None:
    """None when the shipped naive kernel builds through `tc` (the toolchain works), else why
    not. Remembered per process and compiler for PROBE_TTL_S."""
    key = (tc.compiler, tc.identity, tuple(tc.flags))
    now = time.monotonic()
    known = _PROBES.get(key)
    if known and now - known[0] < PROBE_TTL_S:
        return known[1]
    naive = resources.files("hargo_hpc.bench").joinpath("kernels", "naive.c").read_text()
    with tempfile.TemporaryDirectory(prefix="hargo-build-") as work:
        att = _attempt(naive, work, tc, timeout)
    failure = None
    if att.verdict != "built":
        failure = att.reason or att.verdict
        missing = sorted(set(MISSING_LIB.findall(att.link_output)))
        if missing:
            failure = ("static libraries missing: "
                       + ", ".join(f"lib{name}.a" for name in missing)
                       + " (the kernel is linked -static: install the static C library, libm "
                       "and libgomp, e.g. Debian's libc6-dev and libgcc-12-dev)")  # fmt: skip
    _PROBES[key] = (time.monotonic(), failure)
    return failure


def _attempt(code: str, work: str, tc: _Toolchain, timeout_s: float) -> _Attempt:
    """Run the pipeline on `code` in the fresh directory `work`; no cache, no probe."""
    deadline = time.monotonic() + timeout_s
    Path(work, "kernel.c").write_text(code)
    Path(work, "hargo_gemm.h").write_text(PROTOTYPE)
    shutil.copy2(tc.kernel_main, Path(work, "kernel_main.o"))
    for name in ("kernel.c", "hargo_gemm.h", "kernel_main.o"):  # whatever the worker's umask
        os.chmod(Path(work, name), 0o644)
    env = base_env(work, {"PATH": f"{os.path.dirname(tc.compiler)}:/usr/bin:/bin"})
    link = LINK_FLAGS if tc.trusted_link is None else [*TRUSTED_LINK_FLAGS, *tc.trusted_link]
    view = toolchain_view(tc.compiler, [*tc.flags, *link])

    def run(argv: list[str]) -> Outcome:
        left = deadline - time.monotonic()
        limits = Limits(wall_s=max(0.05, left), cpu_s=int(max(left, 0)) + 2,
                        address_space_mb=tc.memory_mb, processes=tc.processes,
                        file_size_bytes=COMPILE_FILE_LIMIT, open_files=256,
                        stack_mb=64)  # fmt: skip
        return run_sandboxed(argv, work, limits, env, ids=tc.ids, output_cap=tc.cap * 4,
                             view=view)  # fmt: skip

    # 1: C -> assembly, and what the assembler would read is checked before it runs
    res = run([tc.compiler, *tc.flags, "-include", "hargo_gemm.h", "-S", "kernel.c",
               "-o", "kernel.s"])  # fmt: skip
    att = _Attempt("built", layers=res.layers, unavailable=res.unavailable)
    att.output = _excerpt(res.output, work, tc.cap)
    if _timed_out(res):
        return _verdict(att, "timeout", f"compile exceeded {timeout_s:g} s", cacheable=False)
    asm = Path(work, "kernel.s")
    if res.signal is not None or res.returncode != 0 or not asm.is_file():
        return _diagnose(att, res, tc.static_limit)
    why = scan_assembly(asm, tc.static_limit)
    if why:
        return _verdict(att, "format_violation", why, output="")  # the assembler never ran
    # 2: assemble, localise every symbol but gemm, dump the object, guard its size, link
    script = _object_script(tc, link)
    res = run(["/bin/sh", "-c", script])
    att.layers, att.unavailable = res.layers, res.unavailable
    first = att.output
    att.output = _excerpt((first + "\n" if first else "") + res.output, work, tc.cap)
    if _timed_out(res):
        return _verdict(att, "timeout", f"compile exceeded {timeout_s:g} s", cacheable=False)
    rc = res.returncode if res.signal is None else None
    if rc == 10:  # the assembler refused kernel.s (an asm statement's text)
        return _diagnose(att, res, tc.static_limit)
    if tc.trusted_link is None:
        if rc in (11, 12, 13) or rc is None or not Path(work, "kernel.elf").is_file():
            return _suspect(att, "the toolchain could not process the kernel's object")
        elf = Path(work, "kernel.elf").read_text(errors="replace")
        try:
            symbols, sections = parse_readelf(elf)
            att.openmp = openmp_symbols(symbols)
            check_object(symbols, sections)
            check_static_size(elf, tc.static_limit)
            check_artefact_size(elf)
            check_writable_code(elf)
        except Violation as v:
            return _verdict(att, "format_violation", str(v))
        if rc == DATA_REJECTED:  # `size` saw more than readelf: believe the larger
            return _verdict(att, "format_violation", "static data exceeds the limit of "
                            f"{tc.static_limit >> 20} MB")  # fmt: skip
        if rc == FILE_REJECTED:
            return _verdict(att, "format_violation", "the kernel's object or binary exceeds "
                            f"{_file_bound(tc) >> 20} MB over all its sections")  # fmt: skip
    if rc != 0 or not Path(work, "kernel.bin").is_file():
        # the object passed every check: a link failure is suspected to be the toolchain's
        att.link_output = res.output
        return _suspect(att, f"link failed: {_first_error(res.output)}")
    if tc.trusted_link is None:
        try:  # what the loader will map: however the sections were named, no page W and X
            check_binary(Path(work, "kernel.bin"))
        except Violation as v:
            return _verdict(att, "format_violation", str(v))
    return att


def _object_script(tc: _Toolchain, link: list[str]) -> str:
    """The shell script of step 2 (exit 10: assembler, 11-13: localising and dumping the object,
    98: static data over the limit, 20: link)."""
    cc = shlex.join([tc.compiler, *tc.flags])
    # the partial link with only the flags that choose the linker and the ABI: -fopenmp would
    # link libgomp into the object, -flto hand it to the LTO plugin
    partial = shlex.join([tc.compiler, *(f for f in tc.flags if f.startswith(PARTIAL_LINK_FLAGS)),
                          "-r", "-nostdlib", "-Wl,-d"])  # fmt: skip
    link_cmd = f"{cc} kernel.o kernel_main.o {shlex.join(link)} -o kernel.bin || exit 20"
    if tc.trusted_link is not None:
        return f"{cc} -c kernel.s -o kernel.o || exit 10\n{link_cmd}\n"
    bound = _file_bound(tc)
    guard = 'n=$(wc -c < {0}) && [ "$n" -le ' + f'{bound} ] || exit {FILE_REJECTED}\n'
    return (
        f"{cc} -c kernel.s -o kernel.as.o || exit 10\n"
        f"{partial} kernel.as.o -o kernel.r.o || exit 11\n"
        "objcopy --keep-global-symbol=gemm kernel.r.o kernel.o || exit 12\n"
        "readelf -s -S -W kernel.o > kernel.elf || exit 13\n"
        + guard.format("kernel.o") +
        "set -- $(size kernel.o 2>/dev/null | tail -n 1)\n"
        f'case "$4" in ""|*[!0-9]*) ;; *) [ "$4" -le {tc.static_limit} ] || exit '
        f"{DATA_REJECTED};; esac\n"
        f"{link_cmd}\n"
        + guard.format("kernel.bin")
    )


def _file_bound(tc: _Toolchain) -> int:
    """The most bytes kernel.o and kernel.bin may hold, all sections: the static data, the
    non-allocated sections and what the static link adds."""
    return tc.static_limit + NONALLOC_LIMIT + LINK_SLACK


def scan_assembly(path: Path, static_limit: int) -> str | None:
    """Why `kernel.s` must not be assembled (a directive that reads a file or builds
    directives, a C comment outside its strings), or None."""
    if path.stat().st_size > ASM_TEXT_LIMIT:
        return (f"the generated assembly is over {ASM_TEXT_LIMIT >> 20} MB (static data "
                f"over the limit of {static_limit >> 20} MB?)")  # fmt: skip
    text = path.read_text(errors="replace")
    m = ASM_FORBIDDEN.search(text)
    if m:
        return f"assembler directive .{m.group(1).lower()} is not allowed"
    if any(m.group(1) for m in ASM_LEXEMES.finditer(text)):
        return "a /* comment */ in an asm statement is not allowed (the assembler removes it and "\
            "joins the text around it)"
    return None


def _timed_out(res: Outcome) -> bool:
    return res.timed_out or res.signal in (signal.SIGKILL, signal.SIGXCPU)


def _verdict(att: _Attempt, verdict: str, reason: str, *, cacheable: bool = True,
             output: str | None = None) -> _Attempt:  # fmt: skip
    att.verdict, att.reason = verdict, reason
    att.cacheable = att.cacheable and cacheable
    if output is not None:
        att.output = output
    return att


def _suspect(att: _Attempt, reason: str) -> _Attempt:
    return _verdict(att, "suspect", reason, cacheable=False)


def toolchain_lines(output: str) -> list[str]:
    """The lines of compiler output that are not about a place in a source file."""
    return [ln for ln in output.splitlines() if ln.strip() and not LOCATED.match(ln)]


def _diagnose(att: _Attempt, res: Outcome, static_limit: int) -> _Attempt:
    """A compile or assemble step failed: the completion's compile_error (cached when located
    in kernel.c), a format violation (gemm's type), or a suspicion on the toolchain."""
    out = res.output
    own = toolchain_lines(out)
    env = next((ln for ln in own if ENVIRONMENTAL.search(ln)), None)
    if res.signal is not None or res.returncode in (126, 127) or env:
        how = (f"killed by signal {res.signal}" if res.signal is not None
               else env or f"exit status {res.returncode}")  # fmt: skip
        return _suspect(att, f"the compiler could not run: {how.strip()[:200]}")
    cacheable = not RESOURCE.search(out)
    if any("File size limit exceeded" in ln for ln in own):  # cc1 or as killed by RLIMIT_FSIZE
        return _verdict(att, "format_violation", f"the compiler's output exceeds "
                        f"{COMPILE_FILE_LIMIT >> 20} MB: static data over the limit of "
                        f"{static_limit >> 20} MB?", cacheable=False)  # fmt: skip
    if CONFLICT.search(out):
        return _verdict(att, "format_violation", f"gemm is not {SIGNATURE}", cacheable=cacheable)
    if cacheable and not LOCATED_ERROR.search(out):
        return _suspect(att, f"the compiler failed without locating an error: "
                        f"{_first_error(out)}")  # fmt: skip
    return _verdict(att, "compile_error", _first_error(att.output),
                    cacheable=cacheable and bool(KERNEL_ERROR.search(out)))  # fmt: skip


def _first_error(output: str) -> str:
    lines = [ln for ln in output.splitlines() if ln.strip()]
    for pattern in (r"(?:error|Error):", r"error"):
        for line in lines:
            if re.search(pattern, line) and not re.match(r"^\s*\d*\s*\|", line):
                return line.strip()[:200]
    return (lines or ["the compiler failed"])[0].strip()[:200]
