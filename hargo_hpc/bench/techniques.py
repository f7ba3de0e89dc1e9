"""Static detection of optimisation techniques in a kernel's source (used by SQD and reports).

Names: ``openmp`` (threading: ``#pragma omp parallel/for/task...`` or ``omp_*`` calls),
``simd`` (intrinsics headers/types/calls, ``#pragma omp simd``, ``#pragma GCC ivdep``, vector
extensions), ``blocking`` (loops stepping by a block/tile size, or inner bounds ``ii + BS``),
``unrolling`` (``#pragma unroll``/``GCC unroll`` or a loop stepping by a literal 2..16 whose body
indexes ``[x + 1]``, ``[x + 2]`` ...).  The detector reads the code with comments and strings
removed; it is a heuristic, deliberately simple, and documented as such.

Every textual check (here and in validate.py) first applies the C translation phases that can
hide a directive from a regex (`translation_phases`): trigraphs, backslash-newline splices and the
digraphs ``%:`` ``%:%:`` ``<:`` ``:>`` ``<%`` ``%>``.  ``_Pragma("...")`` is read as ``#pragma``.
What the preprocessor can still assemble through macros (``_Pragma(STR(CAT(o, mp) parallel))``)
is caught after compiling, on the object's OpenMP runtime symbols (see validate.check_object).
"""

from __future__ import annotations

import re

TECHNIQUES = ("openmp", "simd", "blocking", "unrolling")
ALIASES = {
    "openmp": "openmp", "omp": "openmp", "threads": "openmp", "threading": "openmp",
    "parallel": "openmp", "multithreading": "openmp",
    "simd": "simd", "vectorization": "simd", "vectorisation": "simd", "intrinsics": "simd",
    "blocking": "blocking", "tiling": "blocking", "cache_blocking": "blocking",
    "register_blocking": "blocking", "loop_tiling": "blocking",
    "unrolling": "unrolling", "unroll": "unrolling", "loop_unrolling": "unrolling",
}  # fmt: skip

TRIGRAPHS = {"??=": "#", "??/": "\\", "??'": "^", "??(": "[", "??)": "]", "??!": "|",
             "??<": "{", "??>": "}", "??-": "~"}
TRIGRAPH = re.compile(r"\?\?[=/'()!<>-]")
SPLICE = re.compile(r"\\[ \t]*\r?\n")  # gcc also splices a backslash followed by blanks
DIGRAPHS = (("%:%:", "##"), ("%:", "#"), ("<:", "["), (":>", "]"), ("<%", "{"), ("%>", "}"))
PRAGMA_OP = re.compile(r'\b_Pragma\s*\(\s*L?"((?:\\.|[^"\\\n])*)"\s*\)')


def translation_phases(code: str) -> str:
    """`code` as the compiler's tokenizer sees it, for textual checks only: trigraphs replaced,
    line splices removed, digraphs spelled as their punctuators, and ``_Pragma("x")`` written
    as ``#pragma x`` on its own line.  (Digraphs inside string literals are replaced too: the
    result is only ever searched, never compiled.)"""
    code = TRIGRAPH.sub(lambda m: TRIGRAPHS[m.group(0)], code)
    code = SPLICE.sub("", code)
    for digraph, token in DIGRAPHS:
        code = code.replace(digraph, token)
    return PRAGMA_OP.sub(
        lambda m: "\n#pragma " + m.group(1).replace('\\"', '"').replace("\\\\", "\\") + "\n", code
    )


# One left-to-right pass over comments, string and character literals and header names, as the
# compiler's lexer sees them: a "/*" inside a literal or a header name opens no comment, and a
# quote inside a comment opens no literal (two separate regexes, comments first, are blinded by
# `"/*"`). Unterminated literals run to the end of the line (as gcc lexes them), raw strings
# (`R"x(...)x"`, a GNU C extension) to their delimiter.
_GAP = r"(?:\s|/\*.*?\*/)*"
LEXEMES = re.compile(
    r"(?P<comment>//[^\n]*|/\*.*?(?:\*/|\Z))"
    rf"|(?P<header>(?P<hprefix>(?:#{_GAP}(?:include(?:_next)?|import|embed)|"
    rf"__has_include(?:_next)?{_GAP}\(){_GAP})(?P<hname><[^>\n]*>))"
    r'|(?P<raw>(?<![\w])(?:u8|u|U|L)?R"(?P<delim>[^()\\\s"]{0,16})\((?P<rbody>.*?)\)(?P=delim)")'
    r'|(?P<string>(?:(?<![\w])(?:u8|u|U|L))?"(?P<sbody>(?:\\.|[^"\\\n])*)"?)'
    r"|(?P<char>'(?:\\.|[^'\\\n])*'?)",
    re.DOTALL,
)
COMMENT = re.compile(r"/\*.*?\*/", re.DOTALL)
STRINGS = re.compile(r'"(?:\\.|[^"\\\n])*"')  # a plain literal, once comments are gone


def lex(code: str, *, strings: bool = False) -> str:
    """`code` with comments replaced by a space and, with `strings`, literals emptied (`""`,
    `' '`); header names stay (comments before them go). Run after `translation_phases`."""

    def sub(m: re.Match[str]) -> str:
        if m.group("comment") is not None:
            return " "
        if m.group("header") is not None:
            return COMMENT.sub(" ", m.group("hprefix")) + m.group("hname")
        if strings:
            return "' '" if m.group("char") is not None else '""'
        return m.group(0)

    return LEXEMES.sub(sub, code)


def string_literals(code: str) -> list[str]:
    """The contents of the string literals of `code` (after `translation_phases`), escapes
    left as written; adjacent literals (only blanks or comments between) joined, as the
    compiler concatenates them."""
    out: list[str] = []
    end = -1
    for m in LEXEMES.finditer(code):
        if m.group("comment") is not None:
            if end >= 0 and not code[end:m.start()].strip():
                end = m.end()  # a comment between two literals keeps them adjacent
            continue
        body = m.group("rbody") if m.group("raw") is not None else m.group("sbody")
        if body is None:
            continue
        if out and end >= 0 and not code[end:m.start()].strip():
            out[-1] += body
        else:
            out.append(body)
        end = m.end()
    return out


OMP_THREADING = re.compile(
    r"#\s*pragma\s+omp\s+"
    r"(?:parallel|for|task|taskloop|sections|single|teams|distribute|target|loop)\b"
    r"|\bomp_(?:set|get)_\w+\s*\("
)
SIMD = re.compile(
    r"#\s*include\s*<\s*(?:imm|x86|emm|xmm|pmm|tmm|smm|nmm|wmm|zmm|ammint|arm_neon|arm_sve)\w*\.h\s*>"
    r"|\b_mm(?:256|512)?_\w+\s*\(|\b__m(?:128|256|512)[di]?\b"
    r"|#\s*pragma\s+omp\s+(?:[\w ]*\s)?simd\b|#\s*pragma\s+GCC\s+ivdep|\bvector_size\s*\("
    r"|\bsv(?:float|int)\w*_t\b|\bfloat64x\d_t\b"
)
BLOCK_NAME = (
    r"(?:[A-Za-z_]*(?:BLOCK|TILE|BLK|BS|NB|MB|KB|MC|NC|KC)[A-Za-z0-9_]*"
    r"|[a-z_]*(?:block|tile|blk|bs)[a-z0-9_]*)"
)
BLOCKING = re.compile(
    rf"for\s*\([^;]*;[^;]*;\s*\w+\s*\+=\s*(?:{BLOCK_NAME}|[A-Z][A-Z0-9_]*)\s*\)"
    rf"|<\s*\w+\s*\+\s*{BLOCK_NAME}|\b(?:MIN|min)\s*\(\s*\w+\s*\+\s*\w+\s*,"
)
UNROLL_PRAGMA = re.compile(r"#\s*pragma\s+(?:GCC\s+)?unroll\b")
LITERAL_STEP = re.compile(r"for\s*\([^;]*;[^;]*;\s*\w+\s*\+=\s*(\d+)\s*\)")
OFFSET_INDEX = re.compile(r"\[\s*[^\]]*\+\s*(\d+)\s*\]")


def strip_comments(code: str) -> str:
    """The code after `translation_phases`, without comments and string literals (so that prose
    does not count)."""
    return lex(translation_phases(code), strings=True)


def detect_techniques(code: str) -> list[str]:
    """The techniques `code` uses, in the order of TECHNIQUES."""
    src = strip_comments(code)
    found = set()
    if OMP_THREADING.search(src):
        found.add("openmp")
    if SIMD.search(src):
        found.add("simd")
    if BLOCKING.search(src):
        found.add("blocking")
    steps = {int(s) for s in LITERAL_STEP.findall(src)}
    offsets = {int(s) for s in OFFSET_INDEX.findall(src)}
    if UNROLL_PRAGMA.search(src) or (
        any(2 <= s <= 16 for s in steps) and {1, 2} <= offsets
    ):
        found.add("unrolling")
    return [t for t in TECHNIQUES if t in found]


def normalise_forbidden(names: list[str] | None) -> list[str]:
    """Canonical technique names of an SQD `forbidden` list; raises ValueError on unknown ones."""
    out = []
    for name in names or []:
        key = str(name).strip().lower().replace("-", "_").replace(" ", "_")
        if key not in ALIASES:
            raise ValueError(f"unknown technique {name!r} (known: {', '.join(TECHNIQUES)})")
        if ALIASES[key] not in out:
            out.append(ALIASES[key])
    return out
