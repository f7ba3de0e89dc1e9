"""Unit tests of the pure parts: extraction, validation, techniques, reward, cache."""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path

import pytest

from hargo_hpc.bench.cache import CompileCache, cache_key
from hargo_hpc.bench.extract import extract_code
from hargo_hpc.bench.reward import is_suspicious, penalty, shaped_reward, speed_ratio
from hargo_hpc.bench.settings import BenchSettings
from hargo_hpc.bench.techniques import detect_techniques, normalise_forbidden
from hargo_hpc.bench.validate import (
    Violation,
    check_object,
    check_source,
    parse_readelf,
)

from .sources import SIG


def test_extract_plain_c_and_no_code() -> None:
    ex = extract_code(f"{SIG} {{ C[0] = 0; }}")
    assert ex is not None and ex.code.startswith("void gemm") and ex.blocks == 0
    assert extract_code("Sure! Here is an explanation without code.") is None


def test_extract_prefers_last_c_block_defining_gemm() -> None:
    text = (
        "naive first:\n```c\n" + SIG + " { /* v1 */ }\n```\nthen a helper:\n"
        "```c\nstatic int helper(void) { return 1; }\n```\nbetter:\n```c\n"
        + SIG + " { /* v2 */ }\n```\nand a usage example:\n```c\nint x = 1;\n```\n"
    )
    ex = extract_code(text)
    assert ex is not None and "v2" in ex.code and ex.blocks == 4


def test_extract_c_tag_beats_untagged_and_cpp_is_flagged() -> None:
    text = f"```\n{SIG} {{ /* untagged */ }}\n```\n```c\n{SIG} {{ /* tagged */ }}\n```"
    assert "tagged */" in extract_code(text).code and "untagged" not in extract_code(text).code
    cpp = extract_code(f"```cpp\n{SIG} {{ }}\n```")
    assert cpp is not None and cpp.language == "c++"


def test_extract_unterminated_fence_and_think() -> None:
    ex = extract_code(f"<think>```c\nint bogus;\n```</think>\n```c\n{SIG} {{ C[0] = 1; }}")
    assert ex is not None and "bogus" not in ex.code and "C[0] = 1" in ex.code


def test_check_source_accepts_common_spellings() -> None:
    check_source(
        "#include <stdlib.h>\n#include <immintrin.h>\n#include <omp.h>\n"
        "void gemm(const int M, const int N, const int K, const double *restrict A,\n"
        "          const double *restrict B, double *restrict C) { }\n"
    )


@pytest.mark.parametrize(
    "code",
    [
        "#include <cblas.h>\n" + SIG + " {}",
        '#include "kernel.h"\n' + SIG + " {}",
        "#include </dev/zero>\n" + SIG + " {}",
        "#include <../../etc/passwd>\n" + SIG + " {}",
        # (a gemm of another type is the compiler's to refuse: test_bounded_and_honest.py)
        "void matmul(int M, int N, int K, const double *A, const double *B, double *C) {}",
        '__attribute__((target_clones("avx2", "default"))) ' + SIG + " {}",
        SIG + " {}\n" + "x" * (300 << 10),
        SIG + " {}\nint main() { return 0; }",
        "// " + SIG + " {}",
    ],
)
def test_check_source_rejects(code: str) -> None:
    with pytest.raises(Violation):
        check_source(code)


def syms(*rows: str) -> list[tuple[str, str, str, str]]:
    """'name BIND TYPE NDX' rows -> symbol tuples."""
    return [tuple(r.split()[i] for i in (0, 1, 2, 3)) for r in rows]  # type: ignore[misc]


def test_check_object_rules() -> None:
    good = syms("gemm GLOBAL FUNC 1", "helper LOCAL FUNC 1", "sqrt GLOBAL NOTYPE UND",
                "malloc GLOBAL NOTYPE UND", "GOMP_parallel GLOBAL NOTYPE UND",
                "omp_get_num_threads GLOBAL NOTYPE UND")  # fmt: skip
    check_object(good, [".text", ".data", ".note.GNU-stack"])
    for rows, why in [
        (("gemm GLOBAL FUNC 1", "clock_gettime GLOBAL FUNC 1"), "clock_gettime"),
        (("gemm GLOBAL FUNC 1", "system GLOBAL NOTYPE UND"), "system"),
        (("gemm GLOBAL FUNC 1", "scipy_cblas_dgemm64_ GLOBAL NOTYPE UND"), "BLAS"),
        (("gemm WEAK FUNC 1",), "WEAK"),
        (("gemm GLOBAL IFUNC 1",), "IFUNC"),
        (("helper LOCAL FUNC 1",), "no gemm"),
        (("gemm GLOBAL FUNC 1", "table GLOBAL OBJECT 3"), "table"),
        (("gemm GLOBAL FUNC 1", "buf GLOBAL OBJECT COM"), "buf"),
    ]:
        with pytest.raises(Violation, match=why):
            check_object(syms(*rows), [".text"])
    with pytest.raises(Violation, match="init_array"):
        check_object(syms("gemm GLOBAL FUNC 1"), [".text", ".init_array"])


def test_parse_readelf() -> None:
    text = """
  [ 1] .text             PROGBITS        0000000000000000 000040 0000f6 00  AX  0   0 16
  [ 5] .init_array       INIT_ARRAY      0000000000000000 000140 000008 08  WA  0   0  8
     3: 0000000000000000     1 FUNC    LOCAL  DEFAULT    1 early
     9: 0000000000000000     0 NOTYPE  GLOBAL DEFAULT  UND sqrt
    10: 00000000000000c0    41 FUNC    GLOBAL DEFAULT    1 gemm
"""
    symbols, sections = parse_readelf(text)
    assert sections == [".text", ".init_array"]
    assert symbols == [("early", "LOCAL", "FUNC", "1"), ("sqrt", "GLOBAL", "NOTYPE", "UND"),
                       ("gemm", "GLOBAL", "FUNC", "1")]  # fmt: skip


def test_detect_techniques() -> None:
    assert detect_techniques(SIG + "{ for (int i = 0; i < M; i++) C[i] = 0; }") == []
    omp = "#pragma omp parallel for\nfor (int i = 0; i < M; i++) {}"
    assert detect_techniques(omp) == ["openmp"]
    assert detect_techniques("#pragma omp simd\nfor (;;) {}") == ["simd"]
    assert detect_techniques("__m256d x = _mm256_setzero_pd();") == ["simd"]
    blk = "for (int ii = 0; ii < M; ii += BLOCK) for (int i = ii; i < MIN(ii + BLOCK, M); i++) {}"
    assert detect_techniques(blk) == ["blocking"]
    unr = "for (j = 0; j < N; j += 4) { c[j] += a; c[j + 1] += a; c[j + 2] += a; c[j + 3] += a; }"
    assert detect_techniques(unr) == ["unrolling"]
    assert detect_techniques("/* #pragma omp parallel for */ int x;") == []
    assert normalise_forbidden(["OpenMP", "tiling", "omp"]) == ["openmp", "blocking"]
    with pytest.raises(ValueError):
        normalise_forbidden(["quantum"])


def test_the_detectors_false_positives_of_issue_v() -> None:
    """A wrong technique costs a kernel its stage (SQD): each false positive the review found,
    with the true positive next to it (whole kernels: tests/bench/data/techniques/)."""
    # an upper-case step that unrolls is unrolling, not blocking; one that tiles is blocking
    unrolled = ("#define U 4\nfor (j = 0; j + U <= N; j += U) { c[j] += a; c[j + 1] += a; "
                "c[j + 2] += a; c[j + 3] += a; }")
    assert detect_techniques(unrolled) == ["unrolling"]
    tiled = "for (jj = 0; jj < N; jj += T) for (j = jj; j < jj + T && j < N; j++) c[j] = 0;"
    assert detect_techniques(tiled) == ["blocking"]
    assert detect_techniques("for (i = 0; i < M; i += MR) c[i] = 0;") == ["blocking"]
    # MIN(j + 1, N) bounds a sum; MIN(ii + 64, M) and MIN(ii + BS, M) bound a tile
    assert detect_techniques("int e = MIN(j + 1, N); for (k = 0; k < e; k++) s += 1;") == []
    assert detect_techniques("int e = MIN(ii + 64, M);") == ["blocking"]
    assert detect_techniques("int e = min(ii + BS, M);") == ["blocking"]
    # a count of 0 or 1 switches unrolling off; none (unroll fully) or more turns it on
    for off in ("#pragma GCC unroll 1", "#pragma GCC unroll 0", "#pragma unroll 1",
                "#pragma unroll(1)"):
        assert detect_techniques(off + "\nfor (j = 0; j < N; j++) c[j] = 0;") == [], off
    for on in ("#pragma unroll", "#pragma GCC unroll 4", "#pragma unroll(8)"):
        assert detect_techniques(on + "\nfor (j = 0; j < N; j++) c[j] = 0;") == ["unrolling"]
    # asking the OpenMP runtime for the time or the thread count starts no thread
    timed = "double t = omp_get_wtime(); int n = omp_get_max_threads(); c[0] = t + n;"
    assert detect_techniques(timed) == []


def test_the_off_stage_reward_sits_between_wrong_result_and_zero() -> None:
    from pydantic import ValidationError

    from hargo_hpc.bench.settings import Penalties

    assert Penalties().off_stage == -5.0
    assert BenchSettings().stage_penalty() == -5.0  # a required technique missing, judged after
    assert BenchSettings(stage_rules="before").stage_penalty() == -100.0  # the ablation
    for bad in (-10.0, -40.0, 0.0, 3.0):
        with pytest.raises(ValidationError, match="must lie above wrong_result"):
            Penalties(off_stage=bad)
    assert Penalties(wrong_result=-50.0, off_stage=-20.0).off_stage == -20.0
    with pytest.raises(ValidationError):
        BenchSettings(stage_rules="never")


def test_reward_shaping_and_penalties() -> None:
    s = BenchSettings()
    assert penalty("format_violation", s) == -100 and penalty("compile_error", s) == -40
    assert penalty("timeout", s) == -30 and penalty("runtime_error", s) == -20
    assert penalty("wrong_result", s) == -10 and penalty("infra_error", s) is None
    # the shape in q, the peak bound and the opt-in reference margin: test_reward.py
    assert shaped_reward(30.0, 0.5, s) == pytest.approx(50.0)  # scaled: % of the reference
    assert shaped_reward(90.0, 1.5, s) == pytest.approx(100 * (2 - 1 / 1.5))  # 133.3: above it
    assert is_suspicious(111.0, 110.0, None, s) and not is_suspicious(109.0, 110.0, 10.0, s)
    # pairs (t, u): ratios 2, 0.5, 1 -> median 1; the ratio of medians would be 2/2 too, but
    # one slow pair (t = 8) does not move the paired estimate
    assert speed_ratio([1.0, 2.0, 8.0], [2.0, 1.0, 8.0]) == 1.0
    assert speed_ratio([1.0, 1.0, 8.0], [2.0, 2.0, 2.0]) == 2.0


def test_cache_key_is_unambiguous() -> None:
    assert cache_key("ab", "c") != cache_key("a", "bc")


def _publish(args: tuple[str, int]) -> str:
    root, n = args
    cache = CompileCache(root)
    src = Path(root) / f"src-{n}"
    src.write_text(f"binary {n}")
    return str(cache.store("k" * 64, {"verdict": "built", "n": n}, {"gemm.bin": str(src)}))


def test_cache_concurrent_publishers_agree(tmp_path: Path) -> None:
    with multiprocessing.get_context("fork").Pool(4) as pool:
        entries = pool.map(_publish, [(str(tmp_path), n) for n in range(16)])
    assert len(set(entries)) == 1
    meta, entry = CompileCache(tmp_path).load("k" * 64)
    assert (entry / "gemm.bin").read_text() == f"binary {meta['n']}"
    assert json.loads((entry / "meta.json").read_text())["files"] == ["gemm.bin"]
    leftovers = [p for p in (tmp_path / "kk").iterdir() if p.name != "k" * 64]
    assert leftovers == []


def test_fenced_blocks_agree_with_commonmark_on_random_text() -> None:
    """Issue U.1: fences are found as CommonMark finds them; markdown-it-py (a CommonMark
    parser) is the oracle on random texts of fence pieces, prose and C (no lists, quotes or
    tabs: the extractor parses no containers and expands no tabs; CRLF it keeps, the oracle
    turns into LF)."""
    import random

    import markdown_it  # markdown-it-py: installed with rich, a dependency of the project

    from hargo_hpc.bench.extract import FENCE_TAG, fenced_blocks

    md = markdown_it.MarkdownIt("commonmark")
    rng = random.Random(7)
    pieces = ["```", "````", "~~~", "```c", "``` c ", "```cpp x", "~~~c`", "```c`", "x ```c",
              "\n", "\n", "\r\n", "`", "~", " ", "   ", "    ", "void gemm() {}", "a;", "c"]
    for _ in range(4000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 18)))
        expected = [(FENCE_TAG.match(t.info).group(1), t.content)  # type: ignore[union-attr]
                    for t in md.parse(text) if t.type == "fence"]  # fmt: skip
        got = [(tag, body.replace("\r\n", "\n")) for tag, body in fenced_blocks(text)]
        assert got == expected, repr(text)


def test_extract_the_prompt_echoed_then_the_fenced_kernel() -> None:
    """Issue U.1: a completion that repeats the prompt's last line ("... in one ```c code
    block") before its kernel was "no C code" (-100): the mid-line ``` opened a fence and the
    real opening fence closed it."""
    from hargo_hpc.tasks.gemm import render_prompt

    prompt = render_prompt({"name": "dgemm-256", "M": 256, "N": 256, "K": 256},
                           forbidden=["openmp"])  # fmt: skip
    assert prompt.splitlines()[-1].endswith("in one ```c code block.")
    kernel = f"{SIG} {{\n    C[0] = 1; /* the kernel */\n}}\n"
    for echo in (prompt.splitlines()[-1], prompt):
        ex = extract_code(f"{echo}\n\n```c\n{kernel}```\n")
        assert ex is not None and ex.code == kernel and ex.blocks == 1, echo
    ex = extract_code(f"Sure. {prompt.splitlines()[-1]}\n```c\n{kernel}")  # unclosed: to the end
    assert ex is not None and ex.code == kernel


def test_extract_with_prose_around_the_fence() -> None:
    kernel = f"{SIG} {{\n    C[0] = 2;\n}}\n"
    text = (f"Here is a blocked kernel; I use ```c fences as asked:\n\n```c\n{kernel}```\n\n"
            "It tiles the loops (see the ``` above).\nDone. ```")
    ex = extract_code(text)
    assert ex is not None and ex.code == kernel and ex.blocks == 1


def test_extract_keeps_backticks_inside_c_literals_and_comments() -> None:
    kernel = (
        "/* a reply comes in a ```c block; ~~~ works too */\n"
        f"{SIG} {{\n"
        '    const char *fence = "```";  // ``` inside a string and a comment\n'
        "    /*\n"
        "        ```\n"  # indented 8: content, not a closing fence
        "    */\n"
        "    C[0] = fence[0];\n"
        "}\n"
    )
    ex = extract_code(f"```c\n{kernel}```\nThe end.")
    assert ex is not None and ex.code == kernel


def test_a_longer_fence_holds_shorter_ones() -> None:
    kernel = f"/*\n```\nnot a fence here\n```\n*/\n{SIG} {{ C[0] = 3; }}\n"
    tildes = kernel.replace("*/", "~~~\n*/")
    for fence, code in (("````", kernel), ("`````", kernel), ("~~~", kernel), ("~~~~", tildes)):
        ex = extract_code(f"Answer:\n{fence}c\n{code}{fence}\nBye.")
        assert ex is not None and ex.code == code, fence
    # the closing run: the same character, at least as long, nothing but blanks after it
    from hargo_hpc.bench.extract import fenced_blocks

    assert fenced_blocks("````c\nx\n```\ny\n`````  \t\nz") == [("c", "x\n```\ny\n")]
    assert fenced_blocks("~~~c\nx\n```\n~~~ \n") == [("c", "x\n```\n")]
    assert fenced_blocks("```c\nx\n``` c\n```.\ny\n```\r\n") == [("c", "x\n``` c\n```.\ny\n")]
    # no backtick in a backtick fence's info: the first line is text, the last opens a fence
    assert fenced_blocks("```c`\nx\n```") == [("", "")]
    assert fenced_blocks("~~~c`\nx\n~~~") == [("c", "x\n")]  # ... a tilde fence's may


def test_extract_indented_fences() -> None:
    from hargo_hpc.bench.extract import fenced_blocks

    # up to three spaces: a fence; its indentation comes off the body's lines
    assert fenced_blocks("   ```c\n   int a;\n     int b;\n int c;\n  ```\n") == [
        ("c", "int a;\n  int b;\nint c;\n")]
    # four spaces: an indented code block's text, not a fence (nor a closing one)
    assert fenced_blocks("    ```c\n    int a;\n    ```\n") == []
    assert fenced_blocks("```c\nint a;\n    ```\nint b;\n```") == [
        ("c", "int a;\n    ```\nint b;\n")]
    # a fence in a list item (indented by the item): taken when no other fence exists
    kernel = f"{SIG} {{\n    C[0] = 4;\n}}\n"
    listed = "1. The kernel:\n\n    ```c\n" + "".join(f"    {ln}\n" for ln in kernel.splitlines()) \
        + "    ```\n2. Done.\n"
    ex = extract_code(listed)
    assert ex is not None and ex.code == kernel


def test_hostile_backtick_runs_do_not_stall_extraction() -> None:
    """200 kB of backticks without a newline (quadratic under the former regex: ~70 s), and
    repeated 'gemm(' without ';' or '{': both come back fast enough for a worker (
    milliseconds in practice), with an answer; the bound is 2 s."""
    import time

    t0 = time.monotonic()
    assert extract_code("`" * 200_000) is None
    assert extract_code("```c\n" + "gemm(" * 40_000) is not None
    assert time.monotonic() - t0 < 2.0
