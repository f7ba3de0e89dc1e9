"""Issue 24 (items 2-5), each finding a test: bounded artefacts and cache, bounded text checks,
honest kernels the text checks used to refuse, and a technique detector that follows the code
(with its confusion table on kernels written for the purpose, data/techniques/)."""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

import pytest

from hargo_hpc.bench import run_request
from hargo_hpc.bench.cache import CompileCache
from hargo_hpc.bench.extract import extract_code
from hargo_hpc.bench.techniques import MAX_CODE_BYTES, TECHNIQUES, detect_techniques
from hargo_hpc.bench.validate import Violation, check_source
from hargo_hpc.tasks.corpus import declared_techniques

from .sources import NAIVE_BODY, SIG

DATA = Path(__file__).parent / "data" / "techniques"
DOCS = Path(__file__).resolve().parents[2] / "docs" / "bench.md"
BODY = SIG + " {" + NAIVE_BODY + "}\n"


def run(code: str, settings, cache_dir: str, forbidden: tuple[str, ...] = ()) -> dict:
    return run_request({"id": "o24", "completion": "```c\n" + code + "```\n",
                        "forbidden": list(forbidden)}, settings, cache_dir=cache_dir)  # fmt: skip


# 2: a non-allocated section filled by .fill made an 80 MB kernel.bin: ok, reward, and cached
FILL = '__asm__(".section .junk,\\"\\",@progbits\\n.fill {n},1,0\\n.previous");\n'


def test_a_filled_non_allocated_section_is_refused_and_not_cached(settings, tmp_path,
                                                                  run_tmp) -> None:  # fmt: skip
    cache = str(tmp_path / "cache")
    rec = run(FILL.format(n=80_000_000) + BODY, settings, cache)
    assert rec["status"] == "format_violation" and rec["reward"] == -100, rec["reason"]
    assert "non-allocated sections of 76 MB" in rec["reason"] and ".junk" in rec["reason"]
    files = [p for p in Path(cache).rglob("*") if p.is_file()]
    assert max(p.stat().st_size for p in files) < 1 << 20, files  # no binary: only metadata
    small = run(FILL.format(n=100_000) + BODY, settings, cache)  # 100 KB of notes: fine
    assert small["status"] == "ok", small["reason"]


def test_the_cache_never_holds_more_than_its_cap(tmp_path) -> None:
    cap = 200_000
    cache = CompileCache(tmp_path / "c", max_bytes=cap, min_age_s=3600, scan_interval_s=0)
    blob = tmp_path / "blob"
    blob.write_bytes(b"x" * 60_000)
    stored = [cache.store(f"{i:02x}" + "0" * 62, {"verdict": "built"}, {"kernel.bin": str(blob)})
              for i in range(6)]  # fmt: skip
    on_disk = sum(p.stat().st_size for p in (tmp_path / "c").rglob("*") if p.is_file())
    assert on_disk <= cap, on_disk
    assert stored[0] is not None and stored[-1] is None  # every entry is young: no room left
    huge = tmp_path / "huge"
    huge.write_bytes(b"x" * (cap + 1))
    assert cache.store("ff" + "0" * 62, {"verdict": "built"}, {"kernel.bin": str(huge)}) is None


def test_a_build_the_full_cache_refuses_still_runs(settings, tmp_path, run_tmp) -> None:
    cache = str(tmp_path / "tiny")
    settings = settings.model_copy(update={"cache_max_bytes": 64 << 10})  # < one kernel.bin
    rec = run(BODY, settings, cache)
    assert rec["status"] == "ok", rec["reason"]
    on_disk = sum(p.stat().st_size for p in Path(cache).rglob("*") if p.is_file())
    assert on_disk <= 64 << 10, on_disk  # the kernel's binary lived in a scratch dir of its own


# 3: quadratic regexes held a worker (32 KB of one word in a #define: +5.9 s; 1 MB: ~1.5 h)
def shapes(size: int) -> dict[str, str]:
    return {
        "define_word": BODY + "#define UNUSED " + "word " * (size // 5) + "\n",
        "blank_lines": BODY + "\n" * size + "int x;\n",
        "blank_space_lines": BODY + " \n" * (size // 2) + "int x;\n",
        "a_gemm_paren": BODY + "a gemm(" * (size // 7) + "\n",
        "raw_string": BODY + 'const char *s = R"x(' + "a" * size + "\n",
        "raw_strings": BODY + ' R"x(' * (size // 5) + "\n",
        "for_headers": BODY + "for(" * (size // 4),
        "brackets": BODY + "int x = a" + "[" * size,
        "attributes": BODY + "[[" * (size // 2),
        "asm_comments": BODY + '__asm__("' + "/*" * (size // 2) + '");\n',
        "main_parens": BODY + "main(" * (size // 5),
    }


@pytest.mark.parametrize("shape", list(shapes(10)))
def test_a_1mb_degenerate_completion_gets_a_verdict_fast(shape, settings, cache_dir,
                                                         run_tmp) -> None:  # fmt: skip
    start = time.monotonic()
    rec = run(shapes(1 << 20)[shape], settings, cache_dir)
    assert time.monotonic() - start < 5  # seconds to hours before; ~0.2 s here
    assert rec["status"] == "format_violation" and "MAX_CODE_BYTES" in rec["reason"], rec


@pytest.mark.parametrize("shape", list(shapes(10)))
def test_the_checks_are_linear_below_the_size_limit(shape) -> None:
    code = shapes(MAX_CODE_BYTES - 4096)[shape]
    start = time.monotonic()
    extract_code("```c\n" + code + "```")
    detect_techniques(code)
    with contextlib.suppress(Violation):
        check_source(code)
    assert time.monotonic() - start < 5  # quadratic: minutes at this size; linear: < 1 s


# 4: honest kernels the text comparison of parameters (and the allow-list) refused with -100
HONEST = {
    "double_const": "void gemm(int M, int N, int K, double const *A, double const *B, double *C)"
                    " {" + NAIVE_BODY + "}\n",
    "restrict_macro": "#define RESTRICT __restrict__\nvoid gemm(int M, int N, int K, const double "
                      "*RESTRICT A, const double *RESTRICT B, double *RESTRICT C) {"
                      + NAIVE_BODY + "}\n",
    "int32_sizes": "#include <stdint.h>\nvoid gemm(int32_t M, int32_t N, int32_t K, const double "
                   "*A, const double *B, double *C) {" + NAIVE_BODY + "}\n",
    "clock_gettime_clock": "#include <time.h>\n" + SIG + " { struct timespec t; "
                           "clock_gettime(CLOCK_MONOTONIC, &t); (void)clock();"
                           + NAIVE_BODY + "}\n",
    "gettimeofday": "#include <sys/time.h>\n" + SIG + " { struct timeval tv; gettimeofday(&tv, 0);"
                    + NAIVE_BODY + "}\n",
    "sysconf": "#include <unistd.h>\n" + SIG + " { long l1 = sysconf(_SC_LEVEL1_DCACHE_SIZE), "
               "n = sysconf(_SC_NPROCESSORS_ONLN); (void)l1; (void)n;" + NAIVE_BODY + "}\n",
    "pthreads": (DATA / "pthread_rows.c").read_text(),
    "autotune": (DATA / "clock_autotune.c").read_text(),
}


@pytest.mark.parametrize("name", list(HONEST))
def test_honest_variants_are_accepted(name, settings, cache_dir, run_tmp) -> None:
    rec = run(HONEST[name], settings, cache_dir)
    assert rec["status"] == "ok" and rec["reward"] > 0, rec["reason"]


@pytest.mark.parametrize(("code", "why"), [
    ("int gemm(int M, int N, int K, const double *A, const double *B, double *C) { return 0; }",
     "gemm is not"),
    ("void gemm(int M, int N, const double *A, const double *B, double *C) {}", "gemm is not"),
    ("void gemm(long M, int N, int K, const double *A, const double *B, double *C) {}",
     "gemm is not"),
    ("void gemm(int M, int N, int K, double *A, const double *B, double *C) {}", "gemm is not"),
    ("static " + SIG + " {}", "gemm is not"),
    ('__attribute__((target_clones("avx2", "default")))\n' + BODY, "target_clones"),
])  # fmt: skip
def test_the_compiler_decides_the_signature(code, why, settings, cache_dir, run_tmp) -> None:
    rec = run(code, settings, cache_dir)
    assert rec["status"] == "format_violation" and why in rec["reason"], rec["reason"]


# 5: the detector followed spelling: omp_get_wtime was "openmp", `ia += K` was "blocking"
@pytest.mark.parametrize(("kernel", "forbidden", "off"), [
    ("serial_wtime", "openmp", False), ("row_pointers", "blocking", False),
    ("index_bump", "blocking", False), ("header_only_autovec", "simd", False),
    ("pthread_rows", "openmp", True), ("runtime_tiles", "blocking", True),
])  # fmt: skip
def test_a_stage_bans_what_the_code_does(kernel, forbidden, off, settings, cache_dir,
                                         run_tmp) -> None:  # fmt: skip
    rec = run((DATA / f"{kernel}.c").read_text(), settings, cache_dir, (forbidden,))
    assert rec["status"] == "ok", rec["reason"]
    assert rec["off_stage"] == ([forbidden] if off else []), rec["reason"]
    assert (rec["reward"] == settings.penalties.off_stage) == off


def confusion_markdown() -> str:
    """The techniques x detected table over data/techniques/ (kernels written after the
    detector was fixed, never used to tune it)."""
    kernels = sorted(DATA.glob("*.c"))
    rows = ["| technique | declared | detected | true pos. | false pos. | false neg. |",
            "|---|---|---|---|---|---|"]  # fmt: skip
    misses = []
    for t in TECHNIQUES:
        tp = fp = fn = 0
        for path in kernels:
            code = path.read_text()
            declared = t in declared_techniques(path.stem, code)
            found = t in detect_techniques(code)
            tp += declared and found
            fp += found and not declared
            fn += declared and not found
            if declared != found:
                misses.append(f"{'false negative' if declared else 'false positive'} of {t}: "
                              f"{path.stem}")  # fmt: skip
        rows.append(f"| {t} | {tp + fn} | {tp + fp} | {tp} | {fp} | {fn} |")
    same = sum(tuple(detect_techniques(p.read_text())) == declared_techniques(p.stem,
               p.read_text()) for p in kernels)  # fmt: skip
    rows.append("")
    rows.append(f"Exact-set agreement: {same} of {len(kernels)} kernels. "
                f"Mismatches: {'; '.join(misses) or 'none'}.")  # fmt: skip
    return "\n".join(rows)


def test_the_confusion_table_in_the_docs_is_current() -> None:
    text = DOCS.read_text()
    begin, end = "<!-- techniques-confusion:begin -->", "<!-- techniques-confusion:end -->"
    block = text[text.index(begin) + len(begin) : text.index(end)].strip()
    assert block == confusion_markdown(), confusion_markdown()
    assert len(list(DATA.glob("*.c"))) >= 12


def test_every_purpose_kernel_is_ok(settings, cache_dir, run_tmp) -> None:
    for path in sorted(DATA.glob("*.c")):
        rec = run(path.read_text(), settings, cache_dir)
        assert rec["status"] == "ok", (path.name, rec["reason"])


def test_the_object_decides_openmp_when_the_pragma_is_hidden(settings, cache_dir,
                                                             run_tmp) -> None:  # fmt: skip
    hidden = ("#define P(x) _Pragma(#x)\n#define PAR P(omp parallel for)\n" + SIG
              + " { PAR for (int i = 0; i < M * N; i++) C[i] = 0; " + NAIVE_BODY + "}\n")
    rec = run(hidden, settings, cache_dir, ("openmp",))
    assert rec["status"] == "ok" and rec["off_stage"] == ["openmp"], rec
    before = settings.model_copy(update={"stage_rules": "before"})
    rec = run(hidden, before, cache_dir, ("openmp",))
    assert rec["status"] == "format_violation" and "GOMP_parallel" in rec["reason"], rec
    assert os.path.exists(DATA)
