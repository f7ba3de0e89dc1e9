"""Validation: what makes a completion a `format_violation`, before and after compiling.

Before compiling (`check_source`): C++ instead of C; includes other than `<system headers>`
outside the forbidden list; a missing or wrongly typed ``gemm``; SQD-forbidden techniques.

After compiling the kernel alone (`check_object`, on ``readelf -s -S -W`` output):
  - the only defined global symbol is ``gemm``, a GLOBAL FUNC (not weak, not an IFUNC); everything
    else must be static (a kernel's own ``clock_gettime``, ``main`` or ``omp_get_wtime`` is out);
  - every undefined symbol is on the allow-list (libm, OpenMP runtime, memory functions and
    allocation, stdio output to the already-open streams, a few runtime helpers);
    a BLAS symbol is reported as such;
  - no constructor/destructor sections (``.init_array``, ``.fini_array``, ``.preinit_array``,
    ``.ctors``, ``.dtors``, ``.init``, ``.fini``).
"""

from __future__ import annotations

import re

from hargo_hpc.bench.techniques import COMMENTS, STRINGS, translation_phases

KERNEL = "gemm"
SIGNATURE = "void gemm(int M, int N, int K, const double *A, const double *B, double *C)"

FORBIDDEN_HEADERS = re.compile(
    r"^(?:cblas|lapacke?|mkl.*|openblas.*|blis.*|f77blas|clapack|dlfcn|spawn|netdb|ifaddrs|"
    r"sys/(?:socket|ptrace|syscall|mman|wait|prctl|resource|ipc|shm|msg|sem|stat|file|ioctl)|"
    r"syscall|fcntl|signal|setjmp|pthread|threads|sched|netinet/.*|arpa/.*|linux/.*|asm/.*)\.h$"
)
CPP_MARKERS = re.compile(
    r"\bstd::|\btemplate\s*<|\bnamespace\s+\w|\bclass\s+\w+\s*[{:]|extern\s+\"C\"|\bnullptr\b"
    r"|\bstatic_cast\s*<|\breinterpret_cast\s*<|#\s*include\s*<(?:iostream|vector|algorithm|"
    r"cstdio|cstdlib|cmath|cstring|string|memory|thread|array|chrono)>|\bnew\s+\w+\s*\["
)
INCLUDE = re.compile(r"^\s*#\s*(include|include_next|import|embed)\b\s*(.*)$", re.MULTILINE)
DEFINITION = re.compile(r"\b(\w[\w\s\*]*?)\bgemm\s*\(([^;{)]*)\)\s*\{", re.DOTALL)
EXPECTED_PARAMS = ["int", "int", "int", "const double*", "const double*", "double*"]
QUALIFIERS = {"restrict", "__restrict", "__restrict__", "register"}
# assembler directives that read files or build directive names by macro
ASM_FILE_DIRECTIVES = ("incbin", "include", "macro", "irpc?", "rept", "altmacro", "purgem")


def asm_directive_pattern(names: tuple[str, ...]) -> re.Pattern[str]:
    """`.name` as a whole assembler directive, for any of `names` (regex alternatives)."""
    return re.compile(rf"(?:^|[^\w$.])\.({'|'.join(names)})\b", re.IGNORECASE)


# in the source's string literals (asm statements) `.file` too: the compiler writes its own
ASM_DIRECTIVE = asm_directive_pattern((*ASM_FILE_DIRECTIVES, "file"))
ADJACENT_STRINGS = re.compile(r'"\s*(?:L|u8|u|U)?"')
CTOR_TYPES = {"INIT_ARRAY": ".init_array", "FINI_ARRAY": ".fini_array",
              "PREINIT_ARRAY": ".preinit_array"}  # fmt: skip
OPENMP_RUNTIME = ("omp_", "GOMP_", "__kmpc_")
CTOR_SECTIONS = (".init_array", ".fini_array", ".preinit_array", ".ctors", ".dtors")

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
    "_GLOBAL_OFFSET_TABLE_", "__cpu_model", "__cpu_indicator_init",
}  # fmt: skip
ALLOWED_PREFIXES = OPENMP_RUNTIME
BLAS = re.compile(r"cblas|dgemm|sgemm|openblas|^mkl_|^bli_|^blas", re.IGNORECASE)


class Violation(Exception):
    """A format violation, with a one-line reason."""


def check_source(code: str, language: str = "c") -> None:
    """Raise Violation when `code` breaks the kernel contract before compiling."""
    if "\0" in code:
        raise Violation("the code contains a NUL character")
    phased = translation_phases(code)  # trigraphs, line splices, digraphs, _Pragma
    no_comments = COMMENTS.sub(" ", phased)
    src = STRINGS.sub('""', no_comments)  # = techniques.strip_comments(code)
    if language != "c" or CPP_MARKERS.search(src):
        raise Violation("the code is C++, not C")
    literals = " ".join(STRINGS.findall(ADJACENT_STRINGS.sub("", no_comments)))
    asm = ASM_DIRECTIVE.search(literals.replace("\\n", "\n").replace("\\t", " "))
    if asm:
        raise Violation(f"assembler directive .{asm.group(1)} is not allowed")
    for directive, rest in INCLUDE.findall(no_comments):
        if directive != "include":
            raise Violation(f"#{directive} is not allowed")
        m = re.match(r"<\s*([A-Za-z0-9_./+-]+)\s*>", rest.strip())
        if not m:
            raise Violation(f"only #include <system header> is allowed, not {rest.strip()[:60]!r}")
        header = m.group(1)
        if header.startswith("/") or ".." in header or FORBIDDEN_HEADERS.match(header):
            raise Violation(f"forbidden header <{header}>")
    if re.search(r"\bmain\s*\([^;]*\)\s*\{", src):
        raise Violation("the code defines main; the harness owns it")
    if re.search(r"__attribute__\s*\(\(\s*[^)]*\b(?:constructor|destructor|ifunc)\b", src):
        raise Violation("constructors, destructors and ifunc resolvers are not allowed")
    definitions = DEFINITION.findall(src)
    if not definitions:
        raise Violation(f"no definition of {SIGNATURE}")
    ret, params = definitions[-1]
    ret_words = ret.split()
    if not ret_words or ret_words[-1] != "void" or "static" in ret_words:
        raise Violation(f"gemm must be declared as {SIGNATURE}")
    got = [normalise_param(p) for p in params.split(",")]
    if got != EXPECTED_PARAMS:
        raise Violation(f"gemm has parameters ({', '.join(got)}); expected {SIGNATURE}")


def normalise_param(param: str) -> str:
    """'const double *restrict A' -> 'const double*'; 'const int M' -> 'int'."""
    text = param.replace("*", " * ").replace("[", " [ ").replace("]", " ] ")
    words = [w for w in text.split() if w not in QUALIFIERS]
    if words and words[-1] == "]" and "[" in words:  # double A[] -> double *A
        cut = words.index("[")
        words = [*words[: cut - 1], "*", words[cut - 1]]
    if len(words) >= 2 and re.fullmatch(r"[A-Za-z_]\w*", words[-1]) and words[-1] not in {
        "int", "double", "const", "void", "float", "long", "char",
    }:
        words = words[:-1]  # drop the parameter name
    while words and words[-1] == "const":  # double *const A
        words = words[:-1]
    stars = words.count("*")
    base = [w for w in words if w != "*"]
    if stars == 0:
        base = [w for w in base if w != "const"]
    return " ".join(base) + "*" * stars


def check_forbidden(techniques: list[str], forbidden: list[str]) -> None:
    """SQD hook: raise Violation when a detected technique is forbidden for this problem."""
    used = [t for t in techniques if t in forbidden]
    if used:
        raise Violation(f"uses technique(s) forbidden at this stage: {', '.join(used)}")


def parse_readelf(text: str) -> tuple[list[tuple[str, str, str, str]], list[str]]:
    """Symbols (name, bind, type, ndx) and section names from ``readelf -s -S -W`` output."""
    symbols, sections = [], []
    for line in text.splitlines():
        parts = line.split()
        if line.lstrip().startswith("[") and "]" in line:
            rest = line.split("]", 1)[1].split()
            if rest and rest[0].startswith("."):
                sections.append(rest[0])
                ctor = CTOR_TYPES.get(rest[1]) if len(rest) > 1 else None
                if ctor and not rest[0].startswith(ctor):  # a constructor table by any name
                    sections.append(ctor)
        elif len(parts) >= 8 and parts[0].endswith(":") and parts[0][:-1].isdigit():
            _, _, _, typ, bind, _, ndx, name = parts[:8]
            symbols.append((name, bind, typ, ndx))
    return symbols, sections


def openmp_symbols(symbols: list[tuple[str, str, str, str]]) -> list[str]:
    """The OpenMP runtime functions the object calls (``GOMP_parallel``, ``omp_get_num_threads``,
    ...): the compiler's own record of an OpenMP region, however the pragma was spelled."""
    return sorted({n for n, _, _, ndx in symbols if ndx == "UND" and n.startswith(OPENMP_RUNTIME)})


def check_object(symbols: list[tuple[str, str, str, str]], sections: list[str]) -> None:
    """Raise Violation when the compiled kernel object defines or needs the wrong symbols.

    `symbols` are (name, bind, type, section index) as readelf prints them; `sections` the
    section names (see parse_readelf).
    """
    kernel = None
    for name, bind, typ, ndx in symbols:
        if bind == "LOCAL" or not name:
            continue
        if ndx == "UND":
            if name in ALLOWED_UNDEFINED or name.startswith(ALLOWED_PREFIXES):
                continue
            if BLAS.search(name):
                raise Violation(f"calls a BLAS ({name}); the kernel must compute the product")
            raise Violation(f"uses {name}, which is not on the allow-list")
        if name != KERNEL:
            raise Violation(f"defines global symbol {name}; only gemm may be global")
        kernel = (bind, typ)
    if kernel is None:
        raise Violation("the object defines no gemm")
    if kernel != ("GLOBAL", "FUNC"):
        raise Violation(f"gemm must be an ordinary global function, not {' '.join(kernel)}")
    for sec in sections:
        if sec.startswith(CTOR_SECTIONS) or sec in (".init", ".fini"):
            raise Violation(f"section {sec}: constructors and destructors are not allowed")
