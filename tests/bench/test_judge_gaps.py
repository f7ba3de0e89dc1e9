"""Issue U ("the judge's last gaps"), items 2 and 3, each a test: no page of a kernel's process
both writable and executable (code written at run time ran `ok`), and one rule for huge-page
advice (libc's `madvise` was -100, the same request as a raw system call passed). Items 1
(fences) and 6 (the CPU-time flag's words) are tested in test_units.py and test_judge.py."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from hargo_hpc.bench import run_request
from hargo_hpc.bench.validate import (
    PF_R,
    PF_W,
    PF_X,
    PT_GNU_STACK,
    PT_LOAD,
    Violation,
    check_binary,
    check_object,
    check_source,
    elf_segments,
)

from .sources import NAIVE_BODY, SIG
from .test_judge import judge, unchecked_binary

X86_64 = pytest.mark.skipif(os.uname().machine != "x86_64", reason="x86-64 machine code")


def run(code: str, settings, cache_dir: str) -> dict:
    return run_request({"id": "gaps", "completion": "```c\n" + code + "```\n"}, settings,
                       cache_dir=cache_dir)  # fmt: skip


# 2: an asm section "awx" is mapped writable and executable when the static binary loads; the
# kernel writes machine code there and calls it (`mov eax, edi; add eax, 0; ret`: returns M).
# Before: status ok, the record showing only ld's warning about an RWX LOAD segment.
JIT = r'''
__asm__(".section .jit,\"awx\",@progbits\n"
        "jit_code: ret\n"
        "  .zero 63\n"
        ".previous\n");
extern unsigned char jit_code[];
''' + SIG + r''' {
    static const unsigned char code[] = {0x89, 0xf8, 0x83, 0xc0, 0x00, 0xc3};
    for (unsigned i = 0; i < sizeof code; i++) ((volatile unsigned char *)jit_code)[i] = code[i];
    int (*written)(int) = (int (*)(int))(void *)jit_code;
    M = written(M);   /* the code written at run time decides how many rows are computed */
''' + NAIVE_BODY + "}\n"
# the same with an "ax" section named .data.jit: the linker's script puts it into the writable
# .data, so no section of the object is both writable and executable, but the binary's data
# segment is (RWX): only the program headers show it
DATA_X = JIT.replace('.section .jit,\\"awx\\"', '.section .data.jit,\\"ax\\"')


@X86_64
def test_code_written_at_run_time_would_run_without_the_checks(settings, cache_dir, tmp_path,
                                                               run_tmp) -> None:  # fmt: skip
    """The attack is real: built past the checks (by the test), the judge runs it to `ok`; the
    binary check reads the RWX segment from its program headers and names the section."""
    binary = unchecked_binary(JIT, tmp_path, settings, cache_dir)
    res = judge(binary, settings, cache_dir)
    assert res.status == "ok" and res.reward > 0, (res.status, res.reason)
    with pytest.raises(Violation, match=r"maps section \.jit writable and executable \(LOAD "
                                        r"segment \d+, RWX\)"):  # fmt: skip
        check_binary(binary)


@X86_64
def test_an_awx_section_is_refused(settings, cache_dir, run_tmp) -> None:
    rec = run(JIT, settings, cache_dir)
    assert rec["status"] == "format_violation" and rec["reward"] == -100.0, rec["reason"]
    assert rec["reason"] == ("section .jit is writable and executable (flags WAX): code written "
                             "at run time is not allowed")  # fmt: skip


@X86_64
def test_code_placed_among_data_is_refused_by_the_program_headers(settings, cache_dir,
                                                                  run_tmp) -> None:  # fmt: skip
    rec = run(DATA_X, settings, cache_dir)
    assert rec["status"] == "format_violation" and rec["reward"] == -100.0, rec["reason"]
    assert rec["reason"].startswith("the kernel's binary maps section .data writable and "
                                    "executable (LOAD segment"), rec["reason"]  # fmt: skip


def _patched(binary: Path, dest: Path, ptype: int, field: str, value: int) -> Path:
    """A copy of the 64-bit little-endian `binary` whose first program header of type `ptype`
    has `field` ("type" or "flags") set to `value`."""
    data = bytearray(binary.read_bytes())
    phoff, = struct.unpack_from("<Q", data, 32)
    phentsize, phnum = struct.unpack_from("<HH", data, 54)
    for i in range(phnum):
        at = phoff + i * phentsize
        if struct.unpack_from("<I", data, at)[0] == ptype:
            struct.pack_into("<I", data, at + (0 if field == "type" else 4), value)
            dest.write_bytes(bytes(data))
            return dest
    raise AssertionError(f"no program header of type {ptype:#x}")


@X86_64
def test_the_binary_check_reads_every_rule_from_the_program_headers(settings, cache_dir,
                                                                    tmp_path) -> None:  # fmt: skip
    honest = unchecked_binary(SIG + " {" + NAIVE_BODY + "}\n", tmp_path, settings, cache_dir)
    check_binary(honest)  # the honest kernel: R, R X, R, R W segments and a R W stack
    loads = [s for s in elf_segments(honest) if s.type == PT_LOAD]
    assert {s.flags for s in loads} <= {PF_R, PF_R | PF_X, PF_R | PF_W}
    assert any(".text" in dict(s.sections) for s in loads if s.flags & PF_X)
    data = next(s for s in loads if s.flags & PF_W)
    rwx = _patched(honest, tmp_path / "rwx.bin", PT_LOAD, "flags", PF_R | PF_W | PF_X)
    with pytest.raises(Violation, match=r"maps sections \.\S+, .*writable and executable \(LOAD "
                                        r"segment 0, RWX\)"):  # fmt: skip
        check_binary(rwx)
    assert data.sections  # the data segment's sections are named (.tdata, .data, .bss, ...)
    stack = _patched(honest, tmp_path / "stack.bin", PT_GNU_STACK, "flags", PF_R | PF_W | PF_X)
    with pytest.raises(Violation, match=r"executable stack \(PT_GNU_STACK RWX\)"):
        check_binary(stack)
    no_stack = _patched(honest, tmp_path / "nostack.bin", PT_GNU_STACK, "type", 0)
    with pytest.raises(Violation, match="no PT_GNU_STACK"):
        check_binary(no_stack)
    (tmp_path / "short.bin").write_bytes(honest.read_bytes()[:80])
    with pytest.raises(Violation, match="cannot read"):
        check_binary(tmp_path / "short.bin")
    (tmp_path / "text.bin").write_text("#!/bin/sh\n")
    with pytest.raises(Violation, match="not an ELF file"):
        check_binary(tmp_path / "text.bin")


@pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc")
def test_an_executable_stack_is_refused(settings, cache_dir, tmp_path) -> None:
    """A binary linked with an executable stack (the build links -z noexecstack; this shows the
    check sees what the linker was told)."""
    (tmp_path / "k.c").write_text(SIG + " {" + NAIVE_BODY + "}\nint main(void) { return 0; }\n")
    subprocess.run(["gcc", "-O2", "k.c", "-static", "-Wl,-z,execstack", "-o", "k.bin"],
                   cwd=tmp_path, check=True, capture_output=True, timeout=120)  # fmt: skip
    with pytest.raises(Violation, match="executable stack"):
        check_binary(tmp_path / "k.bin")


# 3: huge pages. libc's madvise declared by hand was -100 ("not on the allow-list"), the same
# advice as a raw system call passed (the seccomp filter allows madvise: glibc's free() calls
# it). One rule now: both allowed, with <sys/mman.h> for the constants.
HUGE = r'''
#include <stdlib.h>
#include <string.h>
%s
''' + SIG + r''' {
    /* B copied into a 2 MiB-aligned buffer advised MADV_HUGEPAGE (14): fewer TLB misses */
    size_t bytes = ((sizeof(double) * (size_t)K * N + (2u << 20) - 1) / (2u << 20)) * (2u << 20);
    double *packed = 0;
    if (posix_memalign((void **)&packed, 2u << 20, bytes) != 0) abort();
    %s
    memcpy(packed, B, sizeof(double) * (size_t)K * N);
    B = packed;
''' + NAIVE_BODY + "    free(packed);\n}\n"
RAW = r'''
static long advise(void *p, size_t n, long advice) {   /* the raw system call (x86-64: 28) */
    long ret;
    __asm__ volatile("syscall" : "=a"(ret) : "a"(28L), "D"(p), "S"(n), "d"(advice)
                     : "rcx", "r11", "memory");
    return ret;
}
'''
ROUTES = {
    "libc_declared_by_hand": ("int madvise(void *addr, size_t length, int advice);",
                              "madvise(packed, bytes, 14);"),
    "sys_mman_h": ("#include <sys/mman.h>",
                   "madvise(packed, bytes, MADV_HUGEPAGE);\n"
                   "    posix_madvise(packed, bytes, POSIX_MADV_WILLNEED);"),
    "raw_system_call": (RAW, "advise(packed, bytes, 14);"),
}


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_huge_page_advice_has_one_verdict_by_every_route(route, settings, cache_dir,
                                                         run_tmp) -> None:  # fmt: skip
    if route == "raw_system_call" and os.uname().machine != "x86_64":
        pytest.skip("x86-64 system call")
    declaration, call = ROUTES[route]
    rec = run(HUGE % (declaration, call), settings, cache_dir)
    assert rec["status"] == "ok" and rec["reward"] > 0, (rec["status"], rec["reason"])


def test_the_memory_calls_around_madvise_stay_refused() -> None:
    check_source("#include <sys/mman.h>\n" + SIG + " {}\n")  # the header: for the constants
    good = [("gemm", "GLOBAL", "FUNC", "1"), ("madvise", "GLOBAL", "NOTYPE", "UND"),
            ("posix_madvise", "GLOBAL", "NOTYPE", "UND")]  # fmt: skip
    check_object(good, [".text"])
    for name in ("mmap", "mprotect", "mlock", "shm_open", "memfd_create"):
        with pytest.raises(Violation, match=f"uses {name}, which is not on the allow-list"):
            check_object([*good, (name, "GLOBAL", "NOTYPE", "UND")], [".text"])
