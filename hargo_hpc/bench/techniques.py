"""Static detection of optimisation techniques in a kernel's source (used by SQD and reports).

Names: ``openmp`` (threading: ``#pragma omp parallel/for/task...`` or ``pthread_create``;
``omp_get_wtime()`` and the other queries are not), ``simd`` (intrinsic types/calls,
``#pragma omp simd``, ``#pragma GCC ivdep``, vector extensions), ``blocking`` (loops stepping
by a block/tile size, or inner bounds ``ii + BS``), ``unrolling`` (``#pragma unroll``/``GCC
unroll`` with a count other than 0 or 1, or a loop stepping by 2..16, a literal or a named
constant, whose body indexes ``[x + 1]``, ``[x + 2]`` ...).  The detector reads the code
with comments and strings removed; it is a heuristic, deliberately simple, and documented as
such.

Every textual check (here and in validate.py) first applies the C translation phases that can
hide a directive from a regex (`translation_phases`): trigraphs, backslash-newline splices and the
digraphs ``%:`` ``%:%:`` ``<:`` ``:>`` ``<%`` ``%>``.  ``_Pragma("...")`` is read as ``#pragma``.
What the preprocessor can still assemble through macros (``_Pragma(STR(CAT(o, mp) parallel))``)
is caught after compiling, on the object's OpenMP runtime symbols (see validate.check_object).
"""

from __future__ import annotations

import bisect
import re

# completions longer than this (characters of the extracted code) are refused by
# validate.check_source before any other check; the detector reads no further
MAX_CODE_BYTES = 256 << 10
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
    r'|(?P<raw>(?<![\w])(?:u8|u|U|L)?R"(?P<delim>[^()\\\s"]{0,16})\((?P<rbody>.*?)(?:\)(?P=delim)"|\Z))'
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


# `#pragma omp` constructs that run code on more than one thread (or offload it): calls such as
# omp_get_wtime() or omp_get_max_threads() are not threading, and neither is `omp simd`
OMP_THREADING = re.compile(
    r"#[ \t]*pragma[ \t]+omp[ \t]+"
    r"(?:parallel|for|task|taskloop|sections|single|teams|distribute|target|loop)\b"
    r"|\bpthread_create[ \t]*\("  # POSIX threads count as threading (alias `threads`)
)
# explicit vectors: intrinsic calls and types, vector extensions, SIMD pragmas. Including a header
# alone is not using it; auto-vectorisation by the compiler is not the kernel's technique
SIMD = re.compile(
    r"\b_mm(?:256|512)?_\w+[ \t]*\(|\b__m(?:128|256|512)[di]?\b"
    r"|#[ \t]*pragma[ \t]+omp[ \t]+(?:declare[ \t]+)?(?:[\w \t]{0,200}[ \t])?simd\b"
    r"|#[ \t]*pragma[ \t]+GCC[ \t]+ivdep|\bvector_size[ \t]*\("
    r"|\bsv(?:float|int)\w*_t\b|\bfloat64x\d_t\b|\bv(?:fmaq|mlaq|addq|mulq)_f64\b"
)
BLOCK_NAME = re.compile(
    r"[A-Za-z_]*(?:BLOCK|TILE|BLK|BS|NB|MB|KB|MC|NC|KC|MR|NR)[A-Za-z0-9_]*"
    r"|[a-z_]*(?:block|tile|blk|bs)[a-z0-9_]*"
)
CONSTANT_NAME = re.compile(r"[A-Z][A-Z0-9_]*")
# `#pragma unroll`, `#pragma GCC unroll 4`, `#pragma unroll(8)`; a count of 0 or 1 asks for no
# unrolling (group 1: the count, None when there is none: unroll fully)
UNROLL_PRAGMA = re.compile(r"#[ \t]*pragma[ \t]+(?:GCC[ \t]+)?unroll\b[ \t]*\(?[ \t]*(\d+)?")
MIN_TILE_LITERAL = 16  # `MIN(ii + 64, M)` bounds a tile; `MIN(j + 1, N)` does not
TOKEN = re.compile(r"[A-Za-z_]\w*|\d[\w.]*|\S")
NUMBER = re.compile(r"\d+")
MAX_LOOPS = 4096  # for-loops analysed per kernel; a kernel has tens
STEP_BUDGET = 2_000_000  # token steps the loop analysis may take in all, whatever the text


def strip_comments(code: str) -> str:
    """The code after `translation_phases`, without comments and string literals (so that prose
    does not count)."""
    return lex(translation_phases(code), strings=True)


class Loop:
    """One `for` loop of the token stream: its header and body spans, the variable it steps
    and how (`step`: the step token when the increment is `v += S` / `v = v + S`, else None)."""

    __slots__ = ("end", "header_end", "idents", "start", "step", "var")

    def __init__(self, start: int, header_end: int, end: int, var: str | None,
                 step: str | None, idents: frozenset[str]) -> None:  # fmt: skip
        self.start, self.header_end, self.end = start, header_end, end
        self.var, self.step, self.idents = var, step, idents


def _matches(tokens: list[str]) -> list[int]:
    """For each bracket token the index of its partner (-1 when unbalanced, and for others)."""
    match = [-1] * len(tokens)
    stack: list[int] = []
    pairs = {")": "(", "]": "[", "}": "{"}
    for i, t in enumerate(tokens):
        if t in "([{":
            stack.append(i)
        elif t in pairs:
            while stack and tokens[stack[-1]] != pairs[t]:
                stack.pop()  # an unbalanced opener: left unmatched
            if stack:
                match[i], match[stack[-1]] = stack[-1], i
                stack.pop()
    return match


def _increment(parts: list[list[str]]) -> tuple[str | None, str | None]:
    """(variable, step) of a for header's increment clause: `v += S` or `v = v + S` (S one
    token), also as one of several comma-separated increments; (v, None) for `v++`."""
    var, step = None, None
    for part in parts:
        if len(part) == 3 and part[1] == "+=":
            return part[0], part[2]
        if len(part) == 5 and part[1] == "=" and part[2] == part[0] and part[3] == "+":
            return part[0], part[4]
        if len(part) == 2 and "++" in part:
            var = var or next(t for t in part if t != "++")
    return var, step


def _split_commas(tokens: list[str]) -> list[list[str]]:
    parts: list[list[str]] = [[]]
    depth = 0
    for t in tokens:
        depth += (t in "([{") - (t in ")]}")
        if t == "," and depth == 0:
            parts.append([])
        else:
            parts[-1].append(t)
    return parts


def _join_operators(tokens: list[str]) -> list[str]:
    """`+` `=` -> `+=`, `+` `+` -> `++` (the tokeniser splits punctuators into characters)."""
    out: list[str] = []
    for t in tokens:
        if out and (out[-1], t) in (("+", "="), ("+", "+")):
            out[-1] += t
        else:
            out.append(t)
    return out


def loops(tokens: list[str], match: list[int]) -> list[Loop]:
    """The for-loops of `tokens` (at most MAX_LOOPS, within STEP_BUDGET steps)."""
    found: list[Loop] = []
    budget = STEP_BUDGET
    n = len(tokens)
    for t in range(n - 1):
        if tokens[t] != "for" or tokens[t + 1] != "(" or match[t + 1] < 0:
            continue
        close = match[t + 1]
        header = tokens[t + 2 : close]
        budget -= len(header)
        clauses, depth, cur = [], 0, []  # the three clauses at depth 0
        for tok in header[:512]:
            depth += (tok in "([{") - (tok in ")]}")
            if tok == ";" and depth == 0:
                clauses.append(cur)
                cur = []
            else:
                cur.append(tok)
        clauses.append(cur)
        var, step = (_increment(_split_commas(_join_operators(clauses[2])))
                     if len(clauses) == 3 else (None, None))  # fmt: skip
        # the body: a braced block, or one statement up to its ';' (brackets jumped)
        i = close + 1
        if i < n and tokens[i] == "{" and match[i] > 0:
            end = match[i]
        else:
            while i < n and tokens[i] != ";" and budget > 0:
                if tokens[i] in "([{" and match[i] > i:
                    i = match[i]
                i += 1
                budget -= 1
            end = i
        idents = frozenset(x for x in header[:512] if x[0].isalpha() or x[0] == "_")
        found.append(Loop(t, close, end, var, step, idents))
        if len(found) >= MAX_LOOPS or budget <= 0:
            break
    return found


def gemm_dimensions(tokens: list[str], match: list[int]) -> set[str]:
    """The names of gemm's int parameters (`M`, `N`, `K` as usually spelled): a loop stepping
    by one of them walks rows, it does not tile."""
    for t in range(len(tokens) - 1):
        if tokens[t] == "gemm" and tokens[t + 1] == "(" and match[t + 1] > 0:
            close = match[t + 1]
            if close + 1 < len(tokens) and tokens[close + 1] == "{":
                names = set()
                for part in _split_commas(tokens[t + 2 : close][:256]):
                    words = [w for w in part if w[0].isalpha() or w[0] == "_"]
                    if words and "*" not in part and "[" not in part:
                        names.add(words[-1])
                return names
    return {"M", "N", "K"}


def named_constants(tokens: list[str]) -> dict[str, int]:
    """Names the code defines as a number, with the number: `#define BS 64`,
    `enum { BS = 64 }`, `const int BS = 64` (the first few thousand tokens of each kind
    suffice)."""
    names: dict[str, int] = {}
    for t in range(len(tokens) - 2):
        a, b, c = tokens[t], tokens[t + 1], tokens[t + 2]
        if a == "define" and t and tokens[t - 1] == "#" and NUMBER.match(c):
            names[b] = int(NUMBER.match(c).group(0))
        elif b == "=" and NUMBER.match(c) and (a[0].isalpha() or a[0] == "_"):
            back = tokens[max(0, t - 6) : t]
            if "const" in back or "enum" in back:
                names[a] = int(NUMBER.match(c).group(0))
    return names


def _offset_positions(tokens: list[str]) -> dict[int, list[int]]:
    """Positions of `]` closing an index that ends in `+ d` (d a literal), by d."""
    out: dict[int, list[int]] = {}
    for i in range(2, len(tokens)):
        if tokens[i] == "]" and tokens[i - 2] == "+" and tokens[i - 1].isdigit():
            out.setdefault(int(tokens[i - 1]), []).append(i)
    return out


def _within(positions: list[int], lo: int, hi: int) -> bool:
    k = bisect.bisect_left(positions, lo)
    return k < len(positions) and positions[k] <= hi


def _tile_size(token: str, dims: set[str], consts: dict[str, int]) -> bool:
    """Whether `token`, added to a loop variable in a bound, is a tile's size: a block-like or
    upper-case name or a named constant (not a dimension), or a literal >= MIN_TILE_LITERAL."""
    if token.isdigit():
        return int(token) >= MIN_TILE_LITERAL
    return token not in dims and bool(token in consts or BLOCK_NAME.fullmatch(token)
                                      or CONSTANT_NAME.fullmatch(token))


def structure(src: str) -> tuple[bool, bool]:
    """(blocking, unrolling) from the loop structure of `src` (comments and strings removed).

    blocking: a for loop steps by a tile size: a block-like name (`BS`, `NB`, `TILE`, `MR`,
    `kc`), or another named or upper-case constant unless the loop is unrolled by it (`j += U`
    over `[j + 1]`, `[j + 2]`: unrolling), or a variable (a run-time block size) when a loop
    nested in it is bounded by its variable (`for (ii...; ii += bs) for (i = ii; i < ii + bs...)`);
    or an inner bound `i < ii + BS`, `MIN(ii + BS, M)` (a tile: a block-like or upper-case name,
    or a literal of at least 16; `MIN(j + 1, N)` is not). A step by a dimension (`ia += K`,
    `p += N`) walks rows: not blocking.
    unrolling: a for loop stepping by 2..16 (a literal, or a constant defined as one) whose body
    indexes `[x + 1]` and `[x + 2]`."""
    tokens = _join_operators(TOKEN.findall(src))
    match = _matches(tokens)
    dims = gemm_dimensions(tokens, match)
    consts = {name: value for name, value in named_constants(tokens).items()
              if name not in dims}  # fmt: skip
    offsets = _offset_positions(tokens)
    blocking = unrolling = False
    stack: list[Loop] = []
    tile_vars: dict[str, int] = {}  # variables of enclosing loops that step by a variable
    for loop in loops(tokens, match):
        while stack and stack[-1].end < loop.start:
            gone = stack.pop()
            if gone.var in tile_vars:
                tile_vars[gone.var] -= 1
        if any(tile_vars.get(v) for v in loop.idents):
            blocking = True
        step = loop.step
        if step is not None and loop.var is not None:
            width = int(step) if step.isdigit() else consts.get(step)
            unrolled = width is not None and 2 <= width <= 16 \
                and _within(offsets.get(1, []), loop.start, loop.end) \
                and _within(offsets.get(2, []), loop.start, loop.end)  # fmt: skip
            unrolling = unrolling or unrolled
            if step in dims or not (step[0].isalpha() or step[0] == "_"):
                pass  # a literal, or a dimension: a row walk
            elif BLOCK_NAME.fullmatch(step):
                blocking = True  # `i += MR` is register blocking even when unrolled too
            elif not unrolled and (step in consts or CONSTANT_NAME.fullmatch(step)):
                blocking = True  # `jj += T`; `j += U` over [j + 1], [j + 2] is unrolling
            elif not unrolled:  # a run-time size: a tile if a nested loop is bounded by it
                tile_vars[loop.var] = tile_vars.get(loop.var, 0) + 1
        stack.append(loop)
    for i in range(len(tokens) - 4):
        a, b, c, d = tokens[i], tokens[i + 1], tokens[i + 2], tokens[i + 3]
        if a == "<" and c == "+" and d not in dims and BLOCK_NAME.fullmatch(d):
            blocking = True  # i < ii + BS
        elif a in ("MIN", "min") and b == "(" and tokens[i + 3] == "+" \
                and i + 5 < len(tokens) and tokens[i + 5] == "," \
                and _tile_size(tokens[i + 4], dims, consts):  # fmt: skip
            blocking = True  # MIN(ii + BS, M)
    return blocking, unrolling


def detect_techniques(code: str) -> list[str]:
    """The techniques `code` uses, in the order of TECHNIQUES. Bounded: only the first
    MAX_CODE_BYTES characters are read (validate refuses longer code), every pattern is linear
    and the loop analysis has a fixed budget."""
    src = strip_comments(code[:MAX_CODE_BYTES])
    found = set()
    if OMP_THREADING.search(src):
        found.add("openmp")
    if SIMD.search(src):
        found.add("simd")
    blocking, unrolling = structure(src)
    if blocking:
        found.add("blocking")
    if unrolling or any(m.group(1) is None or int(m.group(1)) > 1
                        for m in UNROLL_PRAGMA.finditer(src)):  # fmt: skip
        found.add("unrolling")
    return [t for t in TECHNIQUES if t in found]


def drop_comments(text: str) -> str:
    """`text` without `/* ... */` comments (an unterminated one runs to the end), in one pass
    with str.find (COMMENT.sub is quadratic on many unterminated `/*`)."""
    out, pos = [], 0
    while (start := text.find("/*", pos)) >= 0:
        out.append(text[pos:start])
        end = text.find("*/", start + 2)
        if end < 0:
            return "".join(out)
        pos = end + 2
    out.append(text[pos:])
    return "".join(out)


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
