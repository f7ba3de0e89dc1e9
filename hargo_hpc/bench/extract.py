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

FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+#.-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)
C_TAGS = {"c", "h"}
CPP_TAGS = {"cpp", "c++", "cc", "cxx", "hpp", "cplusplus"}
DEFINES_GEMM = re.compile(r"\bgemm\s*\([^;{]*\)\s*\{", re.DOTALL)


@dataclass(frozen=True)
class Extracted:
    """The code found in a completion; `language` is "c" or "c++" (from the fence tag)."""

    code: str
    language: str
    blocks: int


def extract_code(completion: str) -> Extracted | None:
    """Return the kernel source of `completion`, or None when it holds no code."""
    text = completion.split("</think>")[-1]
    blocks = [(tag.strip(), body) for tag, body in FENCE.findall(text)]
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
