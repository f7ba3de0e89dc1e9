"""Extraction: the C source of the kernel from a raw model completion.

`extract_code(completion)` applies the extraction rule: reasoning dropped, fenced blocks found
as CommonMark finds them (`fenced_blocks`), C-tagged blocks preferred, the last block that
defines `gemm(` taken, and unfenced text kept only when it looks like C. The rule, step by
step: docs/bench.md, "Extraction rule (`extract.py`)".
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

FENCE_TAG = re.compile(r"[ \t]*([A-Za-z0-9_+#.-]*)")
C_TAGS = {"c", "h"}
CPP_TAGS = {"cpp", "c++", "cc", "cxx", "hpp", "cplusplus"}
# a parameter list holds no parentheses: each attempt stops at the next "(", so the search stays
# linear on hostile text ("gemm(" repeated 40 000 times: 2 s with [^;{]{0,4000}, now ms)
DEFINES_GEMM = re.compile(r"\bgemm\s*\([^;{()]*\)\s*\{", re.DOTALL)


def fenced_blocks(text: str, max_indent: int | None = 3) -> list[tuple[str, str]]:
    """(tag, body) of every fenced code block of `text`, as CommonMark finds them at the top
    level (docs/bench.md, "Extraction rule"): the tag is the start of the info string
    (`FENCE_TAG`), the body the lines between the fences, each without up to as many leading
    blanks as the opening fence had. `max_indent` None: fences at any indentation (blanks only
    before them).

    One pass over the lines, each looked at once and in time linear in its length, so 100 kB of
    backticks cost milliseconds (a regex with a lazy body went quadratic on them: 24 s)."""
    blocks: list[tuple[str, str]] = []
    fence: tuple[str, int, int] | None = None  # the open fence: its character, length, indent
    tag, body = "", []
    for line in _lines(text):
        if fence is None:
            opened = _opening(line, max_indent)
            if opened is not None:
                fence, info = opened[:3], opened[3]
                tag, body = FENCE_TAG.match(info).group(1), []  # type: ignore[union-attr]
        elif _closes(line, fence, max_indent):
            blocks.append((tag, "".join(body)))
            fence = None
        else:
            body.append(_dedent(line, fence[2]))
    if fence is not None:  # an unclosed fence runs to the end (less a last line of blanks)
        if body and not body[-1].endswith("\n") and not body[-1].strip(" \t"):
            body.pop()
        blocks.append((tag, "".join(body)))
    return blocks


def _lines(text: str) -> Iterator[str]:
    """The lines of `text`, each with its "\n" (the last one may have none)."""
    pos = 0
    while pos < len(text):
        end = text.find("\n", pos)
        end = len(text) if end < 0 else end + 1
        yield text[pos:end]
        pos = end


def _indent(line: str, max_indent: int | None) -> int | None:
    """The blanks a fence line starts with (spaces; spaces and tabs with no maximum), or None
    when there are more than `max_indent`."""
    blanks = " " if max_indent is not None else " \t"
    indent = len(line) - len(line.lstrip(blanks))
    return indent if max_indent is None or indent <= max_indent else None


def _opening(line: str, max_indent: int | None) -> tuple[str, int, int, str] | None:
    """(fence character, run length, indent, info string) when `line` opens a fence."""
    indent = _indent(line, max_indent)
    if indent is None or line[indent : indent + 1] not in ("`", "~"):
        return None
    char = line[indent]
    info = line[indent:].lstrip(char)
    run = len(line) - indent - len(info)
    if run < 3 or (char == "`" and "`" in info):
        return None
    return char, run, indent, info.rstrip("\r\n")


def _closes(line: str, fence: tuple[str, int, int], max_indent: int | None) -> bool:
    """Whether `line` closes the open `fence`: its character, at least as many, then blanks."""
    char, run, _ = fence
    indent = _indent(line, max_indent)
    if indent is None:
        return False
    rest = line[indent:].lstrip(char)
    return len(line) - indent - len(rest) >= run and not rest.strip(" \t\r\n")


def _dedent(line: str, indent: int) -> str:
    """`line` without up to `indent` leading blanks (the opening fence's indentation)."""
    blanks = len(line[:indent]) - len(line[:indent].lstrip(" \t"))
    return line[blanks:]


@dataclass(frozen=True)
class Extracted:
    """The code found in a completion; `language` is "c" or "c++" (from the fence tag)."""

    code: str
    language: str
    blocks: int


def extract_code(completion: str) -> Extracted | None:
    """Return the kernel source of `completion`, or None when it holds no code."""
    text = completion.split("</think>")[-1]
    blocks = fenced_blocks(text) or fenced_blocks(text, max_indent=None)
    if not blocks:
        if "{" in text and ";" in text:
            return Extracted(text.strip() + "\n", "c", 0)
        return None
    c_blocks = [b for t, b in blocks if t.lower() in C_TAGS]
    untagged = [b for t, b in blocks if t == ""]
    cpp_blocks = [b for t, b in blocks if t.lower() in CPP_TAGS]
    candidates, language = c_blocks or untagged, "c"
    if not candidates:
        candidates, language = cpp_blocks, "c++"
    candidates = [b for b in candidates if b.strip()]
    if not candidates:
        return None
    defining = [b for b in candidates if DEFINES_GEMM.search(b)]
    chosen = (defining or candidates)[-1]
    return Extracted(chosen.strip() + "\n", language, len(blocks))
