"""Extraction: the C source of the kernel from a raw model completion.

Rule (documented in docs/bench.md):

1. Text up to a closing ``</think>`` is dropped (reasoning models).
2. If the completion has fenced blocks (```` ```lang ... ``` ````; an unterminated last fence runs
   to the end of the text), the candidates are the blocks tagged ``c`` or ``h``; if there are none,
   the untagged blocks.  Blocks tagged as C++ (``cpp``, ``c++``, ``cc``, ``cxx``) only count when
   nothing else does, and then the code is reported as C++ (a format violation).
3. Among the candidates the **last block that defines** ``gemm(`` wins (models often show a naive
   version first and the improved one last); if none defines it, the last candidate.
4. Without fences the whole text is the code if it looks like C (has ``{`` and ``;``), else there is
   no code.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

FENCE_TAG = re.compile(r"[ \t]*([A-Za-z0-9_+#.-]*)")
C_TAGS = {"c", "h"}
CPP_TAGS = {"cpp", "c++", "cc", "cxx", "hpp", "cplusplus"}
# a parameter list holds no parentheses: each attempt stops at the next "(", so the search stays
# linear on hostile text ("gemm(" repeated 40 000 times: 2 s with [^;{]{0,4000}, now ms)
DEFINES_GEMM = re.compile(r"\bgemm\s*\([^;{()]*\)\s*\{", re.DOTALL)


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(tag, body) of every fenced block: "```", the tag, the rest of that line, then the body up
    to the next "```" (or the end of the text). One pass over the text with str.find, so a
    completion of 100 kB of backticks costs milliseconds (a regex with a lazy body and a
    line-rest group went quadratic on it: 24 s)."""
    blocks, pos = [], 0
    while (start := text.find("```", pos)) >= 0:
        newline = text.find("\n", start + 3)
        if newline < 0:  # no line after any later fence either
            break
        header = text[start + 3 : newline]
        tag = FENCE_TAG.match(header).group(1)  # type: ignore[union-attr]  # matches "" at worst
        end = text.find("```", newline + 1)
        if end < 0:  # an unterminated last fence runs to the end
            blocks.append((tag, text[newline + 1 :]))
            break
        blocks.append((tag, text[newline + 1 : end]))
        pos = end + 3
    return blocks


@dataclass(frozen=True)
class Extracted:
    """The code found in a completion; `language` is "c" or "c++" (from the fence tag)."""

    code: str
    language: str
    blocks: int


def extract_code(completion: str) -> Extracted | None:
    """Return the kernel source of `completion`, or None when it holds no code."""
    text = completion.split("</think>")[-1]
    blocks = [(tag.strip(), body) for tag, body in fenced_blocks(text)]
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
