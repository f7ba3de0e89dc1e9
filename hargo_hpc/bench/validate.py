"""Validation: what makes a completion a `format_violation`, before and after compiling.

Before compiling, the source (`check_source`); after compiling the kernel alone, its object
(`check_object`, `check_static_size`, `check_artefact_size`, `check_writable_code`: the build
made every symbol but ``gemm`` local, so helpers need no ``static`` and cannot interpose);
after linking, the binary's program headers (`check_binary`). With the seccomp filter's "never
PROT_EXEC" at run time, the kernel's process holds no page it can both write and execute: no
new code. Each rule and why: docs/bench.md, "Validation".
"""

from __future__ import annotations

import re
import struct
from pathlib import Path
from typing import BinaryIO, NamedTuple

from hargo_hpc.bench.extract import DEFINES_GEMM
from hargo_hpc.bench.techniques import (
    MAX_CODE_BYTES,
    drop_comments,
    lex,
    string_literals,
    translation_phases,
)
from hargo_hpc.errors import HargoError

KERNEL = "gemm"
SIGNATURE = "void gemm(int M, int N, int K, const double *A, const double *B, double *C)"

FORBIDDEN_HEADERS = re.compile(
    r"^(?:cblas|lapacke?|mkl.*|openblas.*|blis.*|f77blas|clapack|dlfcn|spawn|netdb|ifaddrs|"
    r"sys/(?:socket|ptrace|syscall|wait|prctl|resource|ipc|shm|msg|sem|stat|file|ioctl)|"
    r"syscall|fcntl|signal|setjmp|threads|sched|netinet/.*|arpa/.*|linux/.*|asm/.*)\.h$"
)
CPP_MARKERS = re.compile(
    r"\bstd::|\btemplate\s*<|\bnamespace\s+\w|\bclass\s+\w+\s*[{:]|extern\s+\"C\"|\bnullptr\b"
    r"|\bstatic_cast\s*<|\breinterpret_cast\s*<|#\s*include\s*<(?:iostream|vector|algorithm|"
    r"cstdio|cstdlib|cmath|cstring|string|memory|thread|array|chrono)>|\bnew\s+\w+\s*\["
)
# blanks within a line only ([ \t\f\v], not \s): `^\s*#` restarts at every line of a run of blank
# lines and is quadratic on them (40 KB of newlines: 2.5 s)
INCLUDE = re.compile(r"^[ \t\f\v]*#[ \t\f\v]*(include|include_next|import|embed)\b[ \t\f\v]*(.*)$",
                     re.MULTILINE)
# `#line N "file"` and GNU line markers `# N "file"`: gcc's diagnostics would then quote that
# file's line N into the record (a file read one line per request); no kernel needs them
LINE_DIRECTIVE = re.compile(r"^[ \t\f\v]*#[ \t\f\v]*(?:line\b|\d)", re.MULTILINE)
MAIN = re.compile(r"\bmain\s*\([^;{()]*\)\s*\{")  # each attempt stops at the next paren: linear
# assembler directives that read files or build directive names by macro
ASM_FILE_DIRECTIVES = ("incbin", "include", "macro", "irpc?", "rept", "altmacro", "purgem")


def asm_directive_pattern(names: tuple[str, ...]) -> re.Pattern[str]:
    """`.name` as a whole assembler directive, for any of `names` (regex alternatives)."""
    return re.compile(rf"(?:^|[^\w$.])\.({'|'.join(names)})\b", re.IGNORECASE)


# in the source's string literals (asm statements) `.file` too: the compiler writes its own
ASM_DIRECTIVE = asm_directive_pattern((*ASM_FILE_DIRECTIVES, "file"))
ESCAPE = re.compile(r"\\(?:x([0-9A-Fa-f]+)|([0-7]{1,3})|u([0-9A-Fa-f]{4})|U([0-9A-Fa-f]{8})|(.))",
                    re.DOTALL)  # fmt: skip
SIMPLE_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "v": "\v", "f": "\f", "a": "\a", "b": "\b",
                  "e": "\x1b"}  # fmt: skip
ATTRIBUTE = re.compile(r"\b(?:__attribute__|__attribute|__declspec)\s*\(")
CTOR_TYPES = {"INIT_ARRAY": ".init_array", "FINI_ARRAY": ".fini_array",
              "PREINIT_ARRAY": ".preinit_array"}  # fmt: skip
OPENMP_RUNTIME = ("omp_", "GOMP_", "__kmpc_")
# the runtime entries that start threads: a parallel region (also `parallel for`, `sections`,
# `loop` and the combined constructs: GOMP_parallel*), host teams, LLVM's fork calls. A kernel
# that only calls omp_get_wtime() or omp_get_max_threads() runs on one thread. pthread_create is
# threading too: the technique `openmp` is "threads" (its aliases: threads, parallel, ...)
OPENMP_THREADING = ("GOMP_parallel", "GOMP_teams", "__kmpc_fork_call", "__kmpc_fork_teams",
                    "pthread_create")
# non-allocated sections (.comment, .note*, .symtab, debug info, a `.section x,""` of an asm
# statement): nothing at run time reads them, but they fill the object, the binary and the cache
NONALLOC_LIMIT = 8 << 20
# what `-static` adds to the kernel's own bytes (libc, libm, libgomp: about 2 MB today)
LINK_SLACK = 32 << 20
CTOR_SECTIONS = (".init_array", ".fini_array", ".preinit_array", ".ctors", ".dtors")
# sections that make the linker ask for a program interpreter or dynamic linking: the kernel's
# binary is static, and an interpreter it names would be loaded (or fail to load) at exec
LOADER_SECTIONS = (".interp", ".dynamic", ".dynsym", ".dynstr", ".gnu.hash", ".hash")

LIBM = {
    base + suffix
    for base in (
        "sqrt", "fabs", "fma", "fmin", "fmax", "floor", "ceil", "round", "trunc", "exp", "exp2",
        "expm1", "log", "log2", "log10", "log1p", "pow", "sin", "cos", "tan", "asin", "acos",
        "atan", "atan2", "sinh", "cosh", "tanh", "hypot", "cbrt", "copysign", "nearbyint", "rint",
        "lround", "llround", "lrint", "ldexp", "frexp", "modf", "fmod", "erf", "erfc",
    )
    for suffix in ("", "f", "l")
}
ALLOWED_UNDEFINED = LIBM | {
    "malloc", "calloc", "realloc", "free", "aligned_alloc", "posix_memalign", "memalign",
    "valloc", "memcpy", "memmove", "memset", "memcmp", "__memcpy_chk", "__memmove_chk",
    "__memset_chk", "__stack_chk_fail", "__assert_fail", "abort", "exit", "__errno_location",
    "printf", "puts", "putchar", "fprintf", "fputs", "fputc", "putc", "fwrite", "fflush",
    "stdout", "stderr", "__printf_chk", "__fprintf_chk", "sprintf", "snprintf",
    "__sprintf_chk", "__snprintf_chk", "abs", "labs", "llabs", "qsort",
    "sleep", "usleep", "nanosleep",
    # clocks (an autotuning kernel times its candidates; vDSO or allowed system calls) and
    # sysconf (cache sizes come from cpuid; processor counts from the affinity mask)
    "clock_gettime", "clock", "gettimeofday", "time", "sysconf",
    # POSIX threads, like OpenMP: at most the uid's RLIMIT_NPROC, on the run's CPUs, under the
    # CPU-time tripwire (no pthread_kill/cancel/setaffinity: signals and re-pinning)
    "pthread_create", "pthread_join", "pthread_self", "pthread_equal", "pthread_once",
    "pthread_attr_init", "pthread_attr_destroy", "pthread_attr_setstacksize",
    "pthread_mutex_init", "pthread_mutex_destroy", "pthread_mutex_lock", "pthread_mutex_trylock",
    "pthread_mutex_unlock", "pthread_cond_init", "pthread_cond_destroy", "pthread_cond_wait",
    "pthread_cond_signal", "pthread_cond_broadcast", "pthread_barrier_init",
    "pthread_barrier_destroy", "pthread_barrier_wait", "pthread_spin_init",
    "pthread_spin_destroy", "pthread_spin_lock", "pthread_spin_unlock", "sched_yield",
    # memory advice (MADV_HUGEPAGE, MADV_WILLNEED, ...): one rule with the raw system call, which
    # the seccomp filter allows (glibc's own free() needs it); <sys/mman.h> is allowed for the
    # constants, its mmap/mprotect/mlock are not on this list (nor PROT_EXEC past the filter)
    "madvise", "posix_madvise",
    "_GLOBAL_OFFSET_TABLE_", "__cpu_model", "__cpu_indicator_init",
}  # fmt: skip
ALLOWED_PREFIXES = OPENMP_RUNTIME
BLAS = re.compile(r"cblas|dgemm|sgemm|openblas|^mkl_|^bli_|^blas", re.IGNORECASE)
# ELF program and section headers (check_binary): the types and flags the loader obeys
PT_LOAD, PT_GNU_STACK = 1, 0x6474E551
PF_X, PF_W, PF_R = 1, 2, 4
SHF_WRITE, SHF_ALLOC, SHF_EXECINSTR = 1, 2, 4
# per ELF class (EI_CLASS 1: 32-bit, 2: 64-bit): the struct formats of the ELF header after
# e_ident, a program header and a section header, and where p_type, p_flags, p_vaddr, p_memsz
# sit in a program header (the 64-bit one moved p_flags up for alignment)
ELF_CLASSES = {1: ("HHIIIIIHHHHHH", "IIIIIIII", "IIIIIIIIII", (0, 6, 2, 5)),
               2: ("HHIQQQIHHHHHH", "IIQQQQQQ", "IIQQQQIIQQ", (0, 1, 3, 6))}  # fmt: skip
SHSTRTAB_LIMIT = 1 << 20  # bytes of section names read for messages; more: the names are left out


class Violation(HargoError):
    """A format violation, with a one-line reason."""


def unescape(body: str) -> str:
    """A C string literal's body with its escapes decoded (`\\x2e` is a '.')."""

    def one(m: re.Match[str]) -> str:
        hexa, octal, u4, u8, other = m.groups()
        if other is not None:
            return SIMPLE_ESCAPES.get(other, other)
        value = int(hexa, 16) if hexa else int(octal, 8) if octal else int(u4 or u8, 16)
        return chr(value) if value < 0x110000 else "?"

    return ESCAPE.sub(one, body)


def strip_attributes(src: str) -> tuple[str, list[str]]:
    """`src` without ``__attribute__((...))``, ``__declspec(...)`` and ``[[...]]`` (each
    balanced), and the attribute texts removed."""
    found: list[str] = []
    out, pos = [], 0
    for m in ATTRIBUTE.finditer(src):
        if m.start() < pos:
            continue
        depth, i = 1, m.end()
        while i < len(src) and depth:
            depth += {"(": 1, ")": -1}.get(src[i], 0)
            i += 1
        found.append(src[m.end():i - 1])
        out.append(src[pos:m.start()] + " ")
        pos = i
    out.append(src[pos:])
    text = "".join(out)
    out, pos = [], 0  # [[...]]: str.find, linear (a lazy regex is quadratic on many "[[")
    while (start := text.find("[[", pos)) >= 0:
        end = text.find("]]", start + 2)
        if end < 0:
            break
        found.append(text[start + 2 : end])
        out.append(text[pos:start] + " ")
        pos = end + 2
    out.append(text[pos:])
    return "".join(out), found


def check_source(code: str, language: str = "c") -> None:
    """Raise Violation when `code` breaks the kernel contract before compiling: code over
    `techniques.MAX_CODE_BYTES` (first: every check is linear, but none need read more); C++
    instead of C; includes other than `<system headers>` outside the forbidden list; no
    definition of ``gemm`` at all (its type is the compiler's to judge: the build includes the
    prototype); SQD-forbidden techniques."""
    size = len(code.encode("utf-8", "surrogatepass"))
    if size > MAX_CODE_BYTES:  # before any other check: every one below is linear, but no need
        raise Violation(f"the code is {size >> 10} KB, over the limit of {MAX_CODE_BYTES >> 10} KB "
                        "(techniques.MAX_CODE_BYTES)")  # fmt: skip
    if "\0" in code:
        raise Violation("the code contains a NUL character")
    phased = translation_phases(code)  # trigraphs, line splices, digraphs, _Pragma
    no_comments = lex(phased)  # comments out, literals kept (one pass: "/*" opens nothing)
    src = lex(phased, strings=True)  # = techniques.strip_comments(code)
    if language != "c" or CPP_MARKERS.search(src):
        raise Violation("the code is C++, not C")
    for literal in string_literals(phased):
        text = unescape(literal)
        # the assembler drops /* comments */: ".inc/**/bin" is .incbin to it
        asm = ASM_DIRECTIVE.search(text) or ASM_DIRECTIVE.search(drop_comments(text))
        if asm:
            raise Violation(f"assembler directive .{asm.group(1)} is not allowed")
    if LINE_DIRECTIVE.search(no_comments):
        raise Violation("#line directives and line markers are not allowed")
    for directive, rest in INCLUDE.findall(no_comments):
        if directive != "include":
            raise Violation(f"#{directive} is not allowed")
        m = re.match(r"<\s*([A-Za-z0-9_./+-]+)\s*>", rest.strip())
        if not m:
            raise Violation(f"only #include <system header> is allowed, not {rest.strip()[:60]!r}")
        header = m.group(1)
        if header.startswith("/") or ".." in header or FORBIDDEN_HEADERS.match(header):
            raise Violation(f"forbidden header <{header}>")
    if MAIN.search(src):
        raise Violation("the code defines main; the harness owns it")
    src, attributes = strip_attributes(src)
    if any(re.search(r"\b_*(?:constructor|destructor|ifunc)_*\b", a) for a in attributes):
        raise Violation("constructors, destructors and ifunc resolvers are not allowed")
    if any(re.search(r"\b_*target_clones_*\b", a) for a in attributes):
        raise Violation("__attribute__((target_clones)) is not allowed: it makes an ifunc resolver "
                        "that runs when the binary loads, outside any call of gemm; the kernel "
                        "is compiled for this node already (-march=native), and "
                        "__attribute__((target(...))) on a function is fine")  # fmt: skip
    # only "is there a definition at all": its type is the compiler's to judge (the prototype
    # is included: "conflicting types" and a static gemm are format violations, see build.py)
    if not DEFINES_GEMM.search(src):
        raise Violation(f"no definition of {SIGNATURE}")


def check_forbidden(techniques: list[str], forbidden: list[str]) -> None:
    """SQD hook: raise Violation when a detected technique is forbidden for this problem."""
    used = [t for t in techniques if t in forbidden]
    if used:
        raise Violation(f"uses technique(s) forbidden at this stage: {', '.join(used)}")


class Section(NamedTuple):
    """One row of readelf's section table."""

    name: str
    type: str
    flags: str  # readelf's letters: A = allocated (in memory at run time), W, X, T, ...
    size: int


HEX = re.compile(r"[0-9a-fA-F]+")
SECTION_ROW = re.compile(r"^\s*\[\s*\d+\]\s?(.*)$")


def section_table(text: str) -> list[Section]:
    """The sections of ``readelf -S -W`` output (the NULL section left out). A row that cannot
    be read raises Violation: nothing about the object is assumed."""
    sections = []
    for line in text.splitlines():
        m = SECTION_ROW.match(line)
        if not m:
            continue
        parts = m.group(1).split()
        # name type address offset size entsize [flags] link info align: the address is the
        # first field of 8 or 16 hex digits followed by three more hex fields
        at = next((i for i in range(1, len(parts) - 6)
                   if len(parts[i]) in (8, 16) and all(HEX.fullmatch(x) for x in parts[i:i + 4])),
                  None)  # fmt: skip
        if at is None or len(parts) - at not in (7, 8):
            raise Violation(f"cannot read the object's section table: {line.strip()[:80]!r}")
        name = " ".join(parts[:at - 1])
        if not name and parts[at - 1] == "NULL":
            continue
        flags = parts[at + 4] if len(parts) - at == 8 else ""
        sections.append(Section(name, parts[at - 1], flags, int(parts[at + 2], 16)))
    return sections


def parse_readelf(text: str) -> tuple[list[tuple[str, str, str, str]], list[str]]:
    """Symbols (name, bind, type, ndx) and section names from ``readelf -s -S -W`` output; a
    section of a constructor-table type is also listed under that table's name."""
    symbols, sections = [], []
    for sec in section_table(text):
        sections.append(sec.name)
        ctor = CTOR_TYPES.get(sec.type)
        if ctor and not sec.name.startswith(ctor):  # a constructor table by any name
            sections.append(ctor)
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 8 and parts[0].endswith(":") and parts[0][:-1].isdigit():
            _, _, _, typ, bind, _, ndx, name = parts[:8]
            symbols.append((name, bind, typ, ndx))
    return symbols, sections


def common_bytes(text: str) -> int:
    """Bytes of the common symbols (``-fcommon`` tentative definitions) in readelf's symbols."""
    total = 0
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 8 and parts[0].endswith(":") and parts[6] == "COM":
            size = parts[2]
            total += int(size, 16) if size.lower().startswith("0x") else int(size)
    return total


def static_bytes(text: str) -> int:
    """Memory the object takes at run time before any malloc: its allocated sections (code,
    data, bss, rodata, TLS, ...) and common symbols, from ``readelf -s -S -W`` output."""
    return sum(s.size for s in section_table(text) if "A" in s.flags) + common_bytes(text)


def check_static_size(text: str, limit: int) -> None:
    """Raise Violation when the object's static data exceeds `limit` bytes."""
    size = static_bytes(text)
    if size > limit:
        raise Violation(f"static data of {size / 2**20:.0f} MB exceeds the limit of "
                        f"{limit / 2**20:.0f} MB (allocate large buffers with malloc)")  # fmt: skip


def nonalloc_bytes(text: str) -> tuple[int, str]:
    """Bytes the object's non-allocated sections hold in the file (all but NOBITS), and the
    largest one's name, from ``readelf -S -W`` output."""
    rows = [s for s in section_table(text) if "A" not in s.flags and s.type != "NOBITS"]
    largest = max(rows, key=lambda s: s.size, default=None)
    return sum(s.size for s in rows), largest.name if largest else ""


def check_artefact_size(text: str, limit: int = NONALLOC_LIMIT) -> None:
    """Raise Violation when the non-allocated sections (in the file, never loaded) exceed
    `limit`: with check_static_size every section of the object is bounded."""
    size, largest = nonalloc_bytes(text)
    if size > limit:
        raise Violation(f"non-allocated sections of {size / 2**20:.0f} MB (largest {largest}) "
                        f"exceed the limit of {limit / 2**20:.0f} MB: nothing at run time reads "
                        "them")  # fmt: skip


def openmp_symbols(symbols: list[tuple[str, str, str, str]]) -> list[str]:
    """The OpenMP runtime functions the object calls that start threads (``GOMP_parallel``,
    ``GOMP_parallel_loop_*``, ``GOMP_teams*``, ``__kmpc_fork_call``): the compiler's own record of
    a parallel region, however the pragma was spelled. ``omp_get_wtime`` and the other queries
    are not threading."""
    return sorted({n for n, _, _, ndx in symbols
                   if ndx == "UND" and n.startswith(OPENMP_THREADING)})  # fmt: skip


def check_object(symbols: list[tuple[str, str, str, str]], sections: list[str]) -> None:
    """Raise Violation when the compiled kernel object defines or needs the wrong symbols:
    the only global symbol defined must be ``gemm``, a GLOBAL FUNC (not weak, not an IFUNC);
    no IFUNC at all; every undefined symbol on the allow-list (libm, the OpenMP runtime,
    memory functions and allocation, stdio output to the already-open streams, a few runtime
    helpers), a BLAS symbol reported as such; no constructor or destructor sections
    (``.init_array``, ``.fini_array``, ``.preinit_array``, ``.ctors``, ``.dtors``, ``.init``,
    ``.fini``, or a section of such a type under any name).

    `symbols` are (name, bind, type, section index) as readelf prints them; `sections` the
    section names (see parse_readelf).
    """
    kernel = None
    for name, bind, typ, ndx in symbols:
        if typ in ("IFUNC", "GNU_IFUNC") and ndx != "UND":
            raise Violation(f"{name or 'a symbol'} is an IFUNC: resolvers are not allowed")
        if bind == "LOCAL" or not name:
            continue
        if ndx == "UND":
            if name in ALLOWED_UNDEFINED or name.startswith(ALLOWED_PREFIXES):
                continue
            if BLAS.search(name):
                raise Violation(f"calls a BLAS ({name}); the kernel must compute the product")
            raise Violation(f"uses {name}, which is not on the allow-list")
        if name != KERNEL:  # the build localises every other symbol; this is a second line
            raise Violation(f"defines global symbol {name}; only gemm may be global")
        kernel = (bind, typ)
    if kernel is None:
        raise Violation("the object defines no gemm")
    if kernel != ("GLOBAL", "FUNC"):
        raise Violation(f"gemm must be an ordinary global function, not {' '.join(kernel)}")
    for sec in sections:
        if sec.startswith(CTOR_SECTIONS) or sec in (".init", ".fini"):
            raise Violation(f"section {sec}: constructors and destructors are not allowed")
        if sec in LOADER_SECTIONS:
            raise Violation(f"section {sec}: the kernel's binary is static, it names no loader")


def check_writable_code(text: str) -> None:
    """Raise Violation when a section of the object (``readelf -S -W`` output) is allocated,
    writable and executable: code the kernel could write at run time (an asm ``"awx"``)."""
    for sec in section_table(text):
        if {"A", "W", "X"} <= set(sec.flags):
            raise Violation(f"section {sec.name} is writable and executable (flags {sec.flags}): "
                            "code written at run time is not allowed")  # fmt: skip


class Segment(NamedTuple):
    """One program header of an ELF file, and the allocated sections in its address range."""

    index: int
    type: int
    flags: int  # PF_R | PF_W | PF_X
    sections: tuple[tuple[str, int], ...]  # (name, sh_flags), in the segment's address range


def _read(f: BinaryIO, offset: int, size: int) -> bytes:
    f.seek(offset)
    data = f.read(size)
    if len(data) != size:
        raise Violation("cannot read the kernel's binary's program headers (truncated)")
    return data


def elf_segments(path: Path) -> list[Segment]:
    """The program headers of the ELF file at `path`, read with struct (32 or 64 bits, either
    byte order), each with the allocated sections it maps (names for messages only: a section
    table that cannot be read leaves them out). A file whose program headers cannot be read
    raises Violation: nothing about the binary is assumed."""
    with open(path, "rb") as f:
        ident = f.read(16)
        if len(ident) < 16 or ident[:4] != b"\x7fELF" or ident[4] not in ELF_CLASSES \
                or ident[5] not in (1, 2):  # fmt: skip
            raise Violation("the kernel's binary is not an ELF file")
        order = "<" if ident[5] == 1 else ">"
        head_fmt, ph_fmt, sh_fmt, (at_type, at_flags, at_vaddr, at_memsz) = ELF_CLASSES[ident[4]]
        head, ph, sh = (struct.Struct(order + fmt) for fmt in (head_fmt, ph_fmt, sh_fmt))
        fields = head.unpack(_read(f, 16, head.size))
        phoff, shoff, phentsize, phnum, shentsize, shnum, shstrndx = (fields[4], fields[5],
                                                                       *fields[8:])  # fmt: skip
        if phentsize < ph.size or not 0 < phnum < 0xFFFF:
            raise Violation("cannot read the kernel's binary's program headers")
        raw = _read(f, phoff, phnum * phentsize)
        rows = [ph.unpack_from(raw, i * phentsize) for i in range(phnum)]
        sections = _alloc_sections(f, sh, shoff, shentsize, shnum, shstrndx)
    segments = []
    for i, row in enumerate(rows):
        start, size = row[at_vaddr], row[at_memsz]
        inside = tuple((name, fl) for name, fl, addr in sections if start <= addr < start + size)
        segments.append(Segment(i, row[at_type], row[at_flags], inside))
    return segments


def _alloc_sections(f: BinaryIO, sh: struct.Struct, shoff: int, shentsize: int, shnum: int,
                    shstrndx: int) -> list[tuple[str, int, int]]:  # fmt: skip
    """(name, sh_flags, sh_addr) of the allocated sections; [] when the table is unreadable."""
    if not shoff or shentsize < sh.size or not 0 < shstrndx < shnum:
        return []
    try:
        raw = _read(f, shoff, shnum * shentsize)
        rows = [sh.unpack_from(raw, i * shentsize) for i in range(shnum)]
        _, _, _, _, str_off, str_size, *_ = rows[shstrndx]
        names = _read(f, str_off, min(str_size, SHSTRTAB_LIMIT))
    except (Violation, OSError, struct.error):
        return []

    def name(at: int) -> str:
        end = names.find(b"\0", at)
        return names[at : end if end >= 0 else len(names)].decode("ascii", "replace") or "?"

    return [(name(row[0]), row[2], row[3]) for row in rows if row[2] & SHF_ALLOC and row[5]]


def _permissions(flags: int) -> str:
    return "".join(c if flags & bit else "-" for c, bit in (("R", PF_R), ("W", PF_W), ("X", PF_X)))


def check_binary(path: Path) -> None:
    """Raise Violation when the linked kernel's binary would map a page both writable and
    executable when it loads: a LOAD segment with PF_W and PF_X, an executable PT_GNU_STACK, or
    none (the loader's default may be executable). The seccomp filter refuses PROT_EXEC after
    the load; this is the load's half of "no new code"."""
    segments = elf_segments(path)
    for seg in segments:
        if seg.type == PT_LOAD and seg.flags & PF_W and seg.flags & PF_X:
            both = [n for n, fl in seg.sections if fl & SHF_WRITE and fl & SHF_EXECINSTR]
            names = both or [n for n, _ in seg.sections]
            what = (f"section{'s' if len(names) > 1 else ''} {', '.join(names[:4])}"
                    if names else "a segment")  # fmt: skip
            raise Violation(f"the kernel's binary maps {what} writable and executable (LOAD "
                            f"segment {seg.index}, {_permissions(seg.flags)}): code written at "
                            "run time is not allowed")  # fmt: skip
    stack = [seg for seg in segments if seg.type == PT_GNU_STACK]
    if not stack:
        raise Violation("the kernel's binary has no PT_GNU_STACK header: its stack could be "
                        "executable")  # fmt: skip
    if stack[0].flags & PF_X:
        raise Violation(f"the kernel's binary asks for an executable stack (PT_GNU_STACK "
                        f"{_permissions(stack[0].flags)})")  # fmt: skip
