#!/usr/bin/env python3
"""Write the task samples that ship with the package: hargo_hpc/tasks/samples/*.json.

The four text tasks each get a small sample in the HPC-GPT record format (a JSON list of
`{"instruction": str, "input": "", "output": str}`), written here by the project itself:

- data_race_c.json: C programs with one OpenMP parallel loop, built from templates whose label
  ('yes' = the pragma causes a data race, 'no' = it does not) follows from how the template is
  written (a loop-carried dependence, a shared scalar without reduction, ... against the
  race-free form of the same kernel); names, sizes, element types and neutral schedule clauses
  vary from one program to the next; half the labels are 'yes';
- data_race_fortran.json: the same idea for Fortran `!$omp parallel do` loops;
- mlperf_qa.json: short factual questions over a FICTIONAL results table (`SYSTEMS` below);
- plp_qa.json: programming-language questions with one-sentence answers (`PLP` below);
- gemm_problems.json: GEMM problem shapes, five written by hand (`GEMM_HAND`: the paper's 256³,
  a rectangular one, one past L2, one with edges at every tile width) and `GEMM_DRAWN` more drawn
  from `GEMM_SIDES`, enough that a held-out quarter of them can tell a trained model from its
  start (`make demo` evaluates on it).

The instruction wording of the data race samples is HPC-GPT's (Ding et al., 2023), so a model
sees the same question shape; no record of HPC-GPT is copied or paraphrased.

Deterministic (fixed seeds, no network); the package never imports this script.
Usage: scripts/make_task_samples.py [--check] [--table] [--dir DIR]
  --check  exit 1 when the files in DIR differ from what would be written (nothing written)
  --table  print the fictional MLPerf-style table as Markdown (for the documentation)
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "hargo_hpc" / "tasks" / "samples"
SEED = 20240611

C_PREFIX = "Given the code snippet: \n"
C_SUFFIX = (
    ", help me detect if adding pragma will cause a data race problem? Answer 'yes' if it "
    "causes a data race problem and 'no' if it will not cause a data race problem."
)
F_PREFIX = "Given a Fortran code snippet: \n"
F_SUFFIX = (
    ", help me detect if adding OpenMP directive will cause a data race problem? Answer 'yes' "
    "if it causes a data race problem and 'no' if it will not cause a data race problem."
)

Record = dict[str, str]

# ---------------------------------------------------------------------------------------------
# Names and sizes of one generated program
# ---------------------------------------------------------------------------------------------

SIZES = (16, 24, 32, 50, 64, 100, 128, 200, 256, 500, 1000)  # all even (the even/odd kernel)
SIZES_2D = (8, 12, 16, 20, 32, 48, 64)  # 2-D arrays stay small (they live on the stack)
ARRAYS = ("a", "b", "c", "x", "y", "z", "u", "v", "w", "src", "dst", "buf", "vals")
# Label-neutral clauses: none of them changes whether a loop races (chunks of 4 never hide
# the races below: every racing pair is either adjacent across any chunk boundary or, for
# the repeated index, iterations K apart with K <= 7 and N >= 16 spread over the threads).
CLAUSES = ("", "", " schedule(static)", " schedule(dynamic)", " schedule(static, 4)",
             " num_threads(4)", " default(shared)", " schedule(guided)")
C_TYPES = {"int": ("%d", ""), "double": ("%f", ".0"), "float": ("%f", ".0f")}
F_TYPES = {"integer": "", "real": ".0", "real(8)": ".0d0", "double precision": ".0d0"}
F_PROGRAM_WORDS = ("kernel", "loop", "update", "compute", "sweep", "sample", "check")


@dataclass(frozen=True)
class Names:
    """What varies between two programs of one template."""

    n: int  # trip count / array length
    size: str  # the macro (C) or parameter (Fortran) holding n
    i: str  # parallel loop index
    j: str  # inner loop index (nested kernels)
    arrays: tuple[str, str, str]  # three distinct array names
    scalar: str  # the template's scalar (sum, tmp, count, last)
    index: str  # the index array (permutation / repeated index)
    ctype: str  # element type
    clause: str  # a label-neutral clause added to the parallel loop directive
    k: int  # a small constant (2..7)
    program: str  # Fortran program name

    def lit(self, value: int) -> str:
        """`value` as a literal of the element type (3, 3.0, 3.0f, 3.0d0)."""
        suffix = C_TYPES[self.ctype][1] if self.ctype in C_TYPES else F_TYPES[self.ctype]
        return f"{value}{suffix}"


SCALARS = {
    "sum": ("sum", "total", "acc", "s"),
    "tmp": ("tmp", "t", "scratch"),
    "count": ("count", "hits", "cnt", "nbig"),
    "last": ("last", "latest", "lastval"),
    "none": ("unused",),
}


def pick(rng: random.Random, fortran: bool, role: str, two_d: bool = False) -> Names:
    """Random names for one program; the roles never collide (distinct pools)."""
    sizes = SIZES_2D if two_d else SIZES
    if fortran:
        size = rng.choice(("n", "nn", "length", "sz"))
        ctype = rng.choice(tuple(F_TYPES))
    else:
        size = rng.choice(("N", "LEN", "SIZE", "M"))
        ctype = rng.choice(tuple(C_TYPES))
    arrays = tuple(rng.sample(ARRAYS, 3))
    return Names(
        n=rng.choice(sizes), clause=rng.choice(CLAUSES), size=size, i=rng.choice(("i", "k", "ii")),
        j=rng.choice(("j", "jj", "l")), arrays=arrays,  # type: ignore[arg-type]
        scalar=rng.choice(SCALARS[role]), index=rng.choice(("idx", "pos", "ind")),
        ctype=ctype, k=rng.randint(2, 7),
        program=f"{rng.choice(F_PROGRAM_WORDS)}_{rng.randint(1, 99)}",
    )


# ---------------------------------------------------------------------------------------------
# C templates: each returns the lines of main's body between the declarations and `return 0`
# ---------------------------------------------------------------------------------------------


def c_program(p: Names, body: list[str], extra_defines: tuple[str, ...] = ()) -> str:
    """A whole C program: includes, the size macro, main with `body`, return 0."""
    lines = ["#include <stdio.h>", "#include <omp.h>", f"#define {p.size} {p.n}",
             *extra_defines, "", "int main(void)", "{", *body, "  return 0;", "}"]
    return "\n".join(lines) + "\n"


def c_decl_init(p: Names, count: int, ctype: str | None = None) -> list[str]:
    """Declare `count` arrays of the element type and fill them with distinct values."""
    ctype = ctype or p.ctype
    a = p.arrays[:count]
    fills = (f"{p.i}", f"{p.size} - {p.i}", f"2 * {p.i} + 1")
    lines = [f"  int {p.i};", f"  {ctype} {', '.join(f'{x}[{p.size}]' for x in a)};",
             f"  for ({p.i} = 0; {p.i} < {p.size}; {p.i}++) {{"]
    lines += [f"    {x}[{p.i}] = {fill};" for x, fill in zip(a, fills, strict=False)]
    return [*lines, "  }"]


def c_print(p: Names, expr: str, ctype: str | None = None) -> str:
    fmt = C_TYPES[ctype or p.ctype][0]
    return f'  printf("{fmt}\\n", {expr});'


def c_pragma(p: Names, clause: str = "") -> str:
    return f"  #pragma omp parallel for{clause}{p.clause}"


def c_for(p: Names, lo: str = "0", hi: str | None = None) -> str:
    hi = hi or p.size
    return f"  for ({p.i} = {lo}; {p.i} < {hi}; {p.i}++)"


def c_scale(p: Names, v: int) -> list[str]:
    """no: each iteration reads and writes only its own element."""
    a, i = p.arrays[0], p.i
    update = (f"{a}[{i}] * {p.lit(p.k)} + {p.lit(1)}", f"{a}[{i}] + {p.lit(p.k)}",
              f"{a}[{i}] - {a}[{i}] / {p.lit(p.k)}")[v % 3]
    return [*c_decl_init(p, 1), c_pragma(p), c_for(p), f"    {a}[{i}] = {update};",
            c_print(p, f"{a}[{p.size} / 2]")]


def c_stencil_out(p: Names, v: int) -> list[str]:
    """no: neighbours are read from an array that the loop does not write."""
    a, b, i = p.arrays[0], p.arrays[1], p.i
    return [*c_decl_init(p, 2), c_pragma(p), c_for(p, "1", f"{p.size} - 1"),
            f"    {b}[{i}] = ({a}[{i} - 1] + {a}[{i}] + {a}[{i} + 1]) / {p.lit(3)};",
            c_print(p, f"{b}[{p.size} / 2]")]


def c_reduction(p: Names, v: int) -> list[str]:
    """no: the shared accumulator is a reduction variable (+, or max for v odd)."""
    a, i, s = p.arrays[0], p.i, p.scalar
    op, init, stmt = (("+", p.lit(0), f"{s} = {s} + {a}[{i}];") if v % 2 == 0 else
                      ("max", f"{a}[0]", f"{s} = {a}[{i}] > {s} ? {a}[{i}] : {s};"))
    return [*c_decl_init(p, 1), f"  {p.ctype} {s} = {init};",
            c_pragma(p, f" reduction({op}:{s})"), c_for(p), f"    {stmt}", c_print(p, s)]


def c_private_tmp(p: Names, v: int) -> list[str]:
    """no: the scratch scalar is private."""
    a, b, i, t = p.arrays[0], p.arrays[1], p.i, p.scalar
    return [*c_decl_init(p, 2), f"  {p.ctype} {t};", c_pragma(p, f" private({t})"),
            c_for(p) + " {", f"    {t} = {a}[{i}] * {p.lit(p.k)};", f"    {b}[{i}] = {t} + {t};",
            "  }", c_print(p, f"{b}[0]")]


def c_block_tmp(p: Names, v: int) -> list[str]:
    """no: the scratch scalar is declared inside the loop body (private by scope)."""
    a, b, i, t = p.arrays[0], p.arrays[1], p.i, p.scalar
    return [*c_decl_init(p, 2), c_pragma(p), c_for(p) + " {",
            f"    {p.ctype} {t} = {a}[{i}] + {b}[{i}];", f"    {a}[{i}] = {t} * {t};", "  }",
            c_print(p, f"{a}[1]")]


def c_critical_count(p: Names, v: int) -> list[str]:
    """no: the shared counter is updated in a critical section (or atomically, v odd)."""
    a, i, c = p.arrays[0], p.i, p.scalar
    guard = "#pragma omp critical" if v % 2 == 0 else "#pragma omp atomic"
    return [*c_decl_init(p, 1), f"  int {c} = 0;", c_pragma(p), c_for(p) + " {",
            f"    if ({a}[{i}] > {p.size} / 2) {{", "      " + guard, f"      {c}++;", "    }",
            "  }", c_print(p, c, "int")]


def c_atomic_hist(p: Names, v: int) -> list[str]:
    """no: histogram bins are incremented atomically."""
    a, h, i, nb = p.arrays[0], p.arrays[1], p.i, p.k + 3
    return [*c_decl_init(p, 1, "int"), f"  int {h}[{nb}] = {{0}};", c_pragma(p), c_for(p) + " {",
            "    #pragma omp atomic", f"    {h}[{a}[{i}] % {nb}] += 1;", "  }",
            c_print(p, f"{h}[0]", "int")]


def coprime_step(n: int, k: int) -> int:
    """The smallest s >= k + 1 with gcd(s, n) == 1: i -> (i * s) % n is then a permutation."""
    s = k + 1
    while math.gcd(s, n) != 1:
        s += 1
    return s


def c_permutation(p: Names, v: int) -> list[str]:
    """no: writes go through an index array holding a permutation (distinct targets)."""
    a, b, i, ix = p.arrays[0], p.arrays[1], p.i, p.index
    perm = (f"({i} * {coprime_step(p.n, p.k)}) % {p.size}" if v % 2 == 0
            else f"{p.size} - 1 - {i}")
    return [*c_decl_init(p, 2), f"  int {ix}[{p.size}];", c_for(p),
            f"    {ix}[{i}] = {perm};", c_pragma(p), c_for(p),
            f"    {a}[{ix}[{i}]] = {b}[{i}] * {p.lit(p.k)};", c_print(p, f"{a}[0]")]


def c_nested_private(p: Names, v: int) -> list[str]:
    """no: the inner index is private (declared in its for, or listed in private())."""
    m, i, j, s = p.arrays[0], p.i, p.j, p.size
    inner = (f"    for (int {j} = 0; {j} < {s}; {j}++)" if v % 2 == 0
             else f"    for ({j} = 0; {j} < {s}; {j}++)")
    decl = [f"  int {i};"] if v % 2 == 0 else [f"  int {i}, {j};"]
    clause = "" if v % 2 == 0 else f" private({j})"
    return [*decl, f"  static {p.ctype} {m}[{s}][{s}];", c_pragma(p, clause), c_for(p), inner,
            f"      {m}[{i}][{j}] = {m}[{i}][{j}] + {i} + {j};", c_print(p, f"{m}[1][1]")]


def c_lastprivate(p: Names, v: int) -> list[str]:
    """no: the scalar written by every iteration is lastprivate."""
    a, i, x = p.arrays[0], p.i, p.scalar
    return [*c_decl_init(p, 1), f"  {p.ctype} {x} = {p.lit(0)};",
            c_pragma(p, f" lastprivate({x})"), c_for(p), f"    {x} = {a}[{i}] * {p.lit(p.k)};",
            c_print(p, x)]


def c_even_odd(p: Names, v: int) -> list[str]:
    """no: iteration i writes only element 2i and reads only element 2i + 1."""
    a, i = p.arrays[0], p.i
    return [*c_decl_init(p, 1), c_pragma(p), c_for(p, "0", f"{p.size} / 2"),
            f"    {a}[2 * {i}] = {a}[2 * {i} + 1] + {p.lit(p.k)};", c_print(p, f"{a}[0]")]


def c_forward(p: Names, v: int) -> list[str]:
    """yes: iteration i writes the element iteration i + 1 reads (true dependence)."""
    a, i = p.arrays[0], p.i
    return [*c_decl_init(p, 1), c_pragma(p), c_for(p, "0", f"{p.size} - 1"),
            f"    {a}[{i} + 1] = {a}[{i}] + {p.lit(p.k)};", c_print(p, f"{a}[{p.size} - 1]")]


def c_backward(p: Names, v: int) -> list[str]:
    """yes: iteration i reads the element iteration i + 1 writes (anti-dependence)."""
    a, i = p.arrays[0], p.i
    return [*c_decl_init(p, 1), c_pragma(p), c_for(p, "0", f"{p.size} - 1"),
            f"    {a}[{i}] = {a}[{i} + 1] * {p.lit(p.k)};", c_print(p, f"{a}[0]")]


def c_stencil_in(p: Names, v: int) -> list[str]:
    """yes: an in-place stencil reads neighbours that other iterations write."""
    a, i = p.arrays[0], p.i
    return [*c_decl_init(p, 1), c_pragma(p), c_for(p, "1", f"{p.size} - 1"),
            f"    {a}[{i}] = ({a}[{i} - 1] + {a}[{i} + 1]) / {p.lit(2)};",
            c_print(p, f"{a}[{p.size} / 2]")]


def c_shared_sum(p: Names, v: int) -> list[str]:
    """yes: a shared accumulator without a reduction clause."""
    a, i, s = p.arrays[0], p.i, p.scalar
    update = f"{s} += {a}[{i}];" if v % 2 == 0 else f"{s} = {s} + {a}[{i}] * {p.lit(p.k)};"
    return [*c_decl_init(p, 1), f"  {p.ctype} {s} = {p.lit(0)};", c_pragma(p), c_for(p),
            f"    {update}", c_print(p, s)]


def c_shared_tmp(p: Names, v: int) -> list[str]:
    """yes: the scratch scalar is declared outside the loop and not private."""
    a, b, i, t = p.arrays[0], p.arrays[1], p.i, p.scalar
    return [*c_decl_init(p, 2), f"  {p.ctype} {t};", c_pragma(p), c_for(p) + " {",
            f"    {t} = {a}[{i}] * {p.lit(p.k)};", f"    {b}[{i}] = {t} + {t};", "  }",
            c_print(p, f"{b}[0]")]


def c_count(p: Names, v: int) -> list[str]:
    """yes: an unprotected shared counter."""
    a, i, c = p.arrays[0], p.i, p.scalar
    inc = f"{c}++;" if v % 2 == 0 else f"{c} = {c} + 1;"
    return [*c_decl_init(p, 1), f"  int {c} = 0;", c_pragma(p), c_for(p),
            f"    if ({a}[{i}] > {p.size} / 2)", f"      {inc}", c_print(p, c, "int")]


def c_hist(p: Names, v: int) -> list[str]:
    """yes: histogram bins incremented without atomic."""
    a, h, i, nb = p.arrays[0], p.arrays[1], p.i, p.k + 3
    return [*c_decl_init(p, 1, "int"), f"  int {h}[{nb}] = {{0}};", c_pragma(p), c_for(p),
            f"    {h}[{a}[{i}] % {nb}]++;", c_print(p, f"{h}[0]", "int")]


def c_repeated_index(p: Names, v: int) -> list[str]:
    """yes: the index array repeats targets (i % K), so iterations K apart write one element."""
    a, b, i, ix = p.arrays[0], p.arrays[1], p.i, p.index
    return [*c_decl_init(p, 2), f"  int {ix}[{p.size}];", c_for(p),
            f"    {ix}[{i}] = {i} % {p.k};", c_pragma(p), c_for(p),
            f"    {a}[{ix}[{i}]] = {a}[{ix}[{i}]] + {b}[{i}];", c_print(p, f"{a}[0]")]


def c_nested_shared(p: Names, v: int) -> list[str]:
    """yes: the inner index is declared outside and shared by all threads."""
    m, i, j, s = p.arrays[0], p.i, p.j, p.size
    return [f"  int {i}, {j};", f"  static {p.ctype} {m}[{s}][{s}];", c_pragma(p), c_for(p),
            f"    for ({j} = 0; {j} < {s}; {j}++)",
            f"      {m}[{i}][{j}] = {m}[{i}][{j}] + {i} + {j};", c_print(p, f"{m}[1][1]")]


def c_shared_last(p: Names, v: int) -> list[str]:
    """yes: every iteration writes the same shared scalar (no lastprivate)."""
    a, i, x = p.arrays[0], p.i, p.scalar
    return [*c_decl_init(p, 1), f"  {p.ctype} {x} = {p.lit(0)};", c_pragma(p), c_for(p),
            f"    {x} = {a}[{i}] * {p.lit(p.k)};", c_print(p, x)]


def c_single_element(p: Names, v: int) -> list[str]:
    """yes: iteration 0 writes element 0, which every other iteration reads."""
    a, i = p.arrays[0], p.i
    return [*c_decl_init(p, 1), c_pragma(p), c_for(p), f"    {a}[{i}] = {a}[{i}] + {a}[0];",
            c_print(p, f"{a}[{p.size} - 1]")]


Template = Callable[[Names, int], list[str]]
# (template, label, scalar role, 2-D)
C_TEMPLATES: tuple[tuple[Template, str, str, bool], ...] = (
    (c_scale, "no", "none", False), (c_stencil_out, "no", "none", False),
    (c_reduction, "no", "sum", False), (c_private_tmp, "no", "tmp", False),
    (c_block_tmp, "no", "tmp", False), (c_critical_count, "no", "count", False),
    (c_atomic_hist, "no", "none", False), (c_permutation, "no", "none", False),
    (c_nested_private, "no", "none", True), (c_lastprivate, "no", "last", False),
    (c_even_odd, "no", "none", False),
    (c_forward, "yes", "none", False), (c_backward, "yes", "none", False),
    (c_stencil_in, "yes", "none", False), (c_shared_sum, "yes", "sum", False),
    (c_shared_tmp, "yes", "tmp", False), (c_count, "yes", "count", False),
    (c_hist, "yes", "none", False), (c_repeated_index, "yes", "none", False),
    (c_nested_shared, "yes", "none", True), (c_shared_last, "yes", "last", False),
    (c_single_element, "yes", "none", False),
)

# ---------------------------------------------------------------------------------------------
# Fortran templates (1-based). Not here: a shared inner DO index, because Fortran makes the
# index of a sequential loop inside a parallel construct private (it would not race).
# ---------------------------------------------------------------------------------------------

FI = "    "  # Fortran indentation


def f_program(p: Names, decls: list[str], body: list[str]) -> str:
    lines = [f"program {p.program}", f"{FI}use omp_lib", f"{FI}implicit none",
             f"{FI}integer, parameter :: {p.size} = {p.n}", f"{FI}integer :: {p.i}",
             *decls, *body, "end program"]
    return "\n".join(lines) + "\n"


def f_arrays(p: Names, count: int, ftype: str | None = None) -> tuple[list[str], list[str]]:
    """Declarations and the fill loop of `count` arrays."""
    ftype = ftype or p.ctype
    a, i = p.arrays[:count], p.i
    fills = (f"{i}", f"{p.size} - {i}", f"2 * {i} + 1")
    decl = [f"{FI}{ftype} :: {', '.join(f'{x}({p.size})' for x in a)}"]
    body = [f"{FI}do {i} = 1, {p.size}"]
    body += [f"{FI}{FI}{x}({i}) = {fill}" for x, fill in zip(a, fills, strict=False)]
    return decl, [*body, f"{FI}end do"]


def f_loop(p: Names, inner: list[str], clause: str = "", lo: str = "1",
           hi: str | None = None) -> list[str]:
    """`!$omp parallel do` over `lo..hi` around the `inner` statements."""
    hi = hi or p.size
    return [f"{FI}!$omp parallel do{clause}{p.clause}", f"{FI}do {p.i} = {lo}, {hi}",
            *(f"{FI}{FI}{s}" for s in inner), f"{FI}end do", f"{FI}!$omp end parallel do"]


def f_simple(p: Names, count: int, inner: list[str], shown: str, clause: str = "",
             lo: str = "1", hi: str | None = None, extra: list[str] | None = None,
             ftype: str | None = None, pre: list[str] | None = None) -> str:
    decl, fill = f_arrays(p, count, ftype)
    return f_program(p, decl + (extra or []), fill + (pre or []) +
                     f_loop(p, inner, clause, lo, hi) + [f"{FI}print *, {shown}"])


def f_scale(p: Names, v: int) -> str:
    a, i = p.arrays[0], p.i
    upd = (f"{a}({i}) * {p.lit(p.k)} + {p.lit(1)}", f"{a}({i}) + {p.lit(p.k)}",
           f"{a}({i}) - {a}({i}) / {p.lit(p.k)}")[v % 3]
    return f_simple(p, 1, [f"{a}({i}) = {upd}"], f"{a}({p.size} / 2)")


def f_stencil_out(p: Names, v: int) -> str:
    a, b, i = p.arrays[0], p.arrays[1], p.i
    return f_simple(p, 2, [f"{b}({i}) = ({a}({i} - 1) + {a}({i}) + {a}({i} + 1)) / {p.lit(3)}"],
                    f"{b}({p.size} / 2)", lo="2", hi=f"{p.size} - 1")


def f_reduction(p: Names, v: int) -> str:
    a, i, s = p.arrays[0], p.i, p.scalar
    op, init = ("+", p.lit(0)) if v % 2 == 0 else ("max", f"{a}(1)")
    stmt = f"{s} = {s} + {a}({i})" if op == "+" else f"{s} = max({s}, {a}({i}))"
    return f_simple(p, 1, [stmt], s, f" reduction({op}:{s})", extra=[f"{FI}{p.ctype} :: {s}"],
                    pre=[f"{FI}{s} = {init}"])


def f_private_tmp(p: Names, v: int) -> str:
    a, b, i, t = p.arrays[0], p.arrays[1], p.i, p.scalar
    return f_simple(p, 2, [f"{t} = {a}({i}) * {p.lit(p.k)}", f"{b}({i}) = {t} + {t}"],
                    f"{b}(1)", f" private({t})", extra=[f"{FI}{p.ctype} :: {t}"])


def f_critical_count(p: Names, v: int) -> str:
    a, i, c = p.arrays[0], p.i, p.scalar
    guard = ([f"{FI}!$omp critical", f"{FI}{c} = {c} + 1", f"{FI}!$omp end critical"]
             if v % 2 == 0 else [f"{FI}!$omp atomic", f"{FI}{c} = {c} + 1"])
    return f_simple(p, 1, [f"if ({a}({i}) > {p.size} / 2) then", *guard, "end if"], c,
                    extra=[f"{FI}integer :: {c}"], pre=[f"{FI}{c} = 0"])


def f_atomic_hist(p: Names, v: int) -> str:
    a, h, i, nb = p.arrays[0], p.arrays[1], p.i, p.k + 3
    bin_ = f"{h}(mod({a}({i}), {nb}) + 1)"
    return f_simple(p, 1, ["!$omp atomic", f"{bin_} = {bin_} + 1"], f"{h}(1)",
                    extra=[f"{FI}integer :: {h}({nb})"], ftype="integer", pre=[f"{FI}{h} = 0"])


def f_permutation(p: Names, v: int) -> str:
    a, b, i, ix = p.arrays[0], p.arrays[1], p.i, p.index
    perm = (f"mod(({i} - 1) * {coprime_step(p.n, p.k)}, {p.size}) + 1" if v % 2 == 0
            else f"{p.size} + 1 - {i}")
    pre = [f"{FI}do {i} = 1, {p.size}", f"{FI}{FI}{ix}({i}) = {perm}", f"{FI}end do"]
    return f_simple(p, 2, [f"{a}({ix}({i})) = {b}({i}) * {p.lit(p.k)}"], f"{a}(1)",
                    extra=[f"{FI}integer :: {ix}({p.size})"], pre=pre)


def f_nested_private(p: Names, v: int) -> str:
    m, i, j, s = p.arrays[0], p.i, p.j, p.size
    decl = [f"{FI}integer :: {j}", f"{FI}{p.ctype} :: {m}({s}, {s})"]
    body = [f"{FI}{m} = {p.lit(0)}", *f_loop(p, [
        f"do {j} = 1, {s}", f"{FI}{m}({i}, {j}) = {m}({i}, {j}) + {i} * {j}", "end do"],
        f" private({j})"), f"{FI}print *, {m}(2, 2)"]
    return f_program(p, decl, body)


def f_lastprivate(p: Names, v: int) -> str:
    a, i, x = p.arrays[0], p.i, p.scalar
    return f_simple(p, 1, [f"{x} = {a}({i}) * {p.lit(p.k)}"], x, f" lastprivate({x})",
                    extra=[f"{FI}{p.ctype} :: {x}"], pre=[f"{FI}{x} = {p.lit(0)}"])


def f_even_odd(p: Names, v: int) -> str:
    a, i = p.arrays[0], p.i
    return f_simple(p, 1, [f"{a}(2 * {i}) = {a}(2 * {i} - 1) + {p.lit(p.k)}"], f"{a}(2)",
                    hi=f"{p.size} / 2")


def f_forward(p: Names, v: int) -> str:
    a, i = p.arrays[0], p.i
    return f_simple(p, 1, [f"{a}({i} + 1) = {a}({i}) + {p.lit(p.k)}"], f"{a}({p.size})",
                    hi=f"{p.size} - 1")


def f_backward(p: Names, v: int) -> str:
    a, i = p.arrays[0], p.i
    return f_simple(p, 1, [f"{a}({i}) = {a}({i} + 1) * {p.lit(p.k)}"], f"{a}(1)",
                    hi=f"{p.size} - 1")


def f_stencil_in(p: Names, v: int) -> str:
    a, i = p.arrays[0], p.i
    return f_simple(p, 1, [f"{a}({i}) = ({a}({i} - 1) + {a}({i} + 1)) / {p.lit(2)}"],
                    f"{a}({p.size} / 2)", lo="2", hi=f"{p.size} - 1")


def f_shared_sum(p: Names, v: int) -> str:
    a, i, s = p.arrays[0], p.i, p.scalar
    stmt = f"{s} = {s} + {a}({i})" if v % 2 == 0 else f"{s} = {s} + {a}({i}) * {p.lit(p.k)}"
    return f_simple(p, 1, [stmt], s, extra=[f"{FI}{p.ctype} :: {s}"], pre=[f"{FI}{s} = {p.lit(0)}"])


def f_shared_tmp(p: Names, v: int) -> str:
    a, b, i, t = p.arrays[0], p.arrays[1], p.i, p.scalar
    return f_simple(p, 2, [f"{t} = {a}({i}) * {p.lit(p.k)}", f"{b}({i}) = {t} + {t}"],
                    f"{b}(1)", extra=[f"{FI}{p.ctype} :: {t}"])


def f_count(p: Names, v: int) -> str:
    a, i, c = p.arrays[0], p.i, p.scalar
    return f_simple(p, 1, [f"if ({a}({i}) > {p.size} / 2) then", f"{FI}{c} = {c} + 1", "end if"],
                    c, extra=[f"{FI}integer :: {c}"], pre=[f"{FI}{c} = 0"])


def f_hist(p: Names, v: int) -> str:
    a, h, i, nb = p.arrays[0], p.arrays[1], p.i, p.k + 3
    bin_ = f"{h}(mod({a}({i}), {nb}) + 1)"
    return f_simple(p, 1, [f"{bin_} = {bin_} + 1"], f"{h}(1)",
                    extra=[f"{FI}integer :: {h}({nb})"], ftype="integer", pre=[f"{FI}{h} = 0"])


def f_repeated_index(p: Names, v: int) -> str:
    a, b, i, ix = p.arrays[0], p.arrays[1], p.i, p.index
    pre = [f"{FI}do {i} = 1, {p.size}", f"{FI}{FI}{ix}({i}) = mod({i} - 1, {p.k}) + 1",
           f"{FI}end do"]
    return f_simple(p, 2, [f"{a}({ix}({i})) = {a}({ix}({i})) + {b}({i})"], f"{a}(1)",
                    extra=[f"{FI}integer :: {ix}({p.size})"], pre=pre)


def f_shared_last(p: Names, v: int) -> str:
    a, i, x = p.arrays[0], p.i, p.scalar
    return f_simple(p, 1, [f"{x} = {a}({i}) * {p.lit(p.k)}"], x, extra=[f"{FI}{p.ctype} :: {x}"],
                    pre=[f"{FI}{x} = {p.lit(0)}"])


def f_single_element(p: Names, v: int) -> str:
    a, i = p.arrays[0], p.i
    return f_simple(p, 1, [f"{a}({i}) = {a}({i}) + {a}(1)"], f"{a}({p.size})")


FTemplate = Callable[[Names, int], str]
F_TEMPLATES: tuple[tuple[FTemplate, str, str, bool], ...] = (
    (f_scale, "no", "none", False), (f_stencil_out, "no", "none", False),
    (f_reduction, "no", "sum", False), (f_private_tmp, "no", "tmp", False),
    (f_critical_count, "no", "count", False), (f_atomic_hist, "no", "none", False),
    (f_permutation, "no", "none", False), (f_nested_private, "no", "none", True),
    (f_lastprivate, "no", "last", False), (f_even_odd, "no", "none", False),
    (f_forward, "yes", "none", False), (f_backward, "yes", "none", False),
    (f_stencil_in, "yes", "none", False), (f_shared_sum, "yes", "sum", False),
    (f_shared_tmp, "yes", "tmp", False), (f_count, "yes", "count", False),
    (f_hist, "yes", "none", False), (f_repeated_index, "yes", "none", False),
    (f_shared_last, "yes", "last", False), (f_single_element, "yes", "none", False),
)

# programs per template: C enough that a held-out 30 % is over 200 programs (the demo's data
# race metric needs that many to tell a change from noise), all distinct, so a model can only
# do well on held-out programs by reading their structure; Fortran a small sample
VARIANTS = {"c": 32, "fortran": 3}


def shuffled(records: list[Record], tag: str) -> list[Record]:
    """The records in a fixed pseudo-random order (labels interleaved, templates mixed)."""
    random.Random(f"{SEED}:order:{tag}").shuffle(records)
    return records


def data_race(templates: tuple, fortran: bool) -> list[Record]:
    """VARIANTS[lang] distinct programs per template, each with its own seeded names (a draw
    that repeats an earlier program is drawn again); label from the template."""
    prefix, suffix = (F_PREFIX, F_SUFFIX) if fortran else (C_PREFIX, C_SUFFIX)
    lang = "fortran" if fortran else "c"
    records, seen = [], set()
    for template, label, role, two_d in templates:
        for v in range(VARIANTS[lang]):
            for attempt in range(100):
                tag = f"{v}" if attempt == 0 else f"{v}:{attempt}"
                p = pick(random.Random(f"{SEED}:{lang}:{template.__name__}:{tag}"), fortran,
                         role, two_d)
                code = template(p, v) if fortran else c_program(p, template(p, v))
                if code not in seen:
                    break
            else:
                raise SystemExit(f"{template.__name__}: no new program in 100 draws")
            seen.add(code)
            records.append({"instruction": prefix + code + suffix, "input": "", "output": label})
    return shuffled(records, lang)


# ---------------------------------------------------------------------------------------------
# MLPerf-style QA over a FICTIONAL table. These systems, submitters and accelerators do not
# exist and the minutes are made up (scaled from the accelerator count with seeded noise):
# they are NOT MLPerf results. Only the benchmark names are MLPerf Training's.
# ---------------------------------------------------------------------------------------------

# (system, submitter, accelerator, accelerators, framework)
SYSTEMS = (
    ("hargo-node-a", "Example Lab North", "Hargo HX-10", 8, "PyTorch"),
    ("hargo-node-b", "Example Lab North", "Hargo HX-20", 16, "PyTorch"),
    ("hargo-node-c", "Demo Compute Group", "Hargo HX-10", 4, "JAX"),
    ("hargo-node-d", "Demo Compute Group", "Hargo HX-40", 32, "JAX"),
    ("hargo-pod-e", "Sample University HPC", "Hargo HX-20", 64, "PyTorch"),
    ("hargo-pod-f", "Sample University HPC", "Hargo HX-40", 128, "MXNet"),
    ("hargo-node-g", "Fictional Cloud Co", "Hargo HX-10", 2, "TensorFlow"),
    ("hargo-node-h", "Fictional Cloud Co", "Hargo HX-20", 8, "PyTorch"),
    ("hargo-cluster-i", "Example Lab South", "Hargo HX-40", 256, "JAX"),
    ("hargo-cluster-j", "Example Lab South", "Hargo HX-40", 512, "PyTorch"),
)
# minutes on 8 accelerators, before scaling (made up)
BENCHMARKS = {"resnet": 30.0, "bert": 20.0, "ssd": 45.0, "unet3d": 55.0, "rnnt": 60.0,
              "dlrm_dcnv2": 12.0, "gpt3": 900.0}


def mlperf_table() -> list[tuple[str, str, float]]:
    """(system, benchmark, minutes) rows: three benchmarks per system.

    minutes = base(benchmark) * (8 / accelerators) ** 0.8 * noise, noise uniform in
    [0.85, 1.15], rounded to 2 decimals (a made-up sub-linear scaling law).
    """
    rng = random.Random(f"{SEED}:mlperf")
    rows = []
    for system, _, _, count, _ in SYSTEMS:
        for bench in sorted(rng.sample(sorted(BENCHMARKS), 3)):
            minutes = BENCHMARKS[bench] * (8 / count) ** 0.8 * rng.uniform(0.85, 1.15)
            rows.append((system, bench, round(minutes, 2)))
    return rows


def mlperf_markdown() -> str:
    info = {s[0]: s for s in SYSTEMS}
    head = ("system", "submitter", "accelerator", "accelerators", "framework", "benchmark",
            "minutes")
    lines = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    for system, bench, minutes in mlperf_table():
        _, sub, acc, count, fw = info[system]
        lines.append(f"| {system} | {sub} | {acc} | {count} | {fw} | {bench} | {minutes:.2f} |")
    return "\n".join(lines) + "\n"


def mlperf_qa() -> list[Record]:
    rows = mlperf_table()
    qa: list[tuple[str, str]] = []
    for system, sub, acc, count, fw in SYSTEMS:
        qa += [(f"What is the number of accelerators of system {system}?", str(count)),
               (f"Which accelerator does system {system} use?", acc),
               (f"Who is the submitter of system {system}?", sub),
               (f"What is the framework of system {system}?", fw)]
    for system, bench, minutes in rows[::3]:  # one timing question per system
        qa.append((f"How many minutes did system {system} take on the {bench} benchmark?",
                   f"{minutes:.2f}"))
    for bench in sorted({b for _, b, _ in rows}):
        results = [(m, s) for s, b, m in rows if b == bench]
        if len(results) >= 2:
            best = min(results)
            assert sum(m == best[0] for m, _ in results) == 1, bench  # a unique answer
            qa.append((f"Which system has the shortest time on the {bench} benchmark?", best[1]))
    for acc in sorted({s[2] for s in SYSTEMS}):
        qa.append((f"How many systems use the {acc} accelerator?",
                   str(sum(s[2] == acc for s in SYSTEMS))))
    for system, *_ in SYSTEMS[::2]:
        benches = ", ".join(b for s, b, _ in rows if s == system)
        qa.append((f"Which benchmarks did system {system} submit?", benches))
    records = [{"instruction": q, "input": "", "output": a} for q, a in qa]
    return shuffled(records, "mlperf")


# ---------------------------------------------------------------------------------------------
# Programming-language QA: one-sentence answers, written for this project.
# ---------------------------------------------------------------------------------------------

PLP = (
    ("What does the restrict keyword tell a C compiler?",
     "It promises that while the pointer lives the object it points to is reached only through "
     "it, so the compiler may reorder and vectorize the loads and stores."),
    ("What is false sharing in a multithreaded program?",
     "False sharing happens when threads write different variables that sit on one cache line, "
     "so the line bounces between cores although no data is actually shared."),
    ("Why is a Fortran loop over the first array index usually the fastest inner loop?",
     "Fortran stores arrays in column-major order, so consecutive values of the first index are "
     "adjacent in memory and the inner loop walks memory with unit stride."),
    ("What does the OpenMP reduction clause do?",
     "It gives each thread a private copy of the variable, initialized to the operator's "
     "identity, and combines the copies into the original variable at the end of the construct."),
    ("What is the difference between MPI_Reduce and MPI_Allreduce?",
     "MPI_Reduce leaves the combined result only on the root rank, while MPI_Allreduce delivers "
     "the same combined result to every rank of the communicator."),
    ("What is a warp in CUDA?",
     "A warp is a group of 32 threads of a block that the GPU schedules together on the same "
     "instruction, so divergent branches inside a warp are executed one after the other."),
    ("What does memory coalescing mean on a GPU?",
     "Coalescing means that the threads of a warp touch neighbouring addresses, so the hardware "
     "serves the whole warp with a few wide memory transactions instead of many small ones."),
    ("What does the volatile qualifier guarantee in C?",
     "It makes every read and write of the object an access the compiler may not remove or "
     "merge, but it gives neither atomicity nor any ordering between threads."),
    ("What is undefined behavior in C?",
     "Undefined behavior is an operation such as signed overflow or an out-of-bounds read for "
     "which the standard sets no requirement, so the compiler may assume it never happens."),
    ("What does the collapse clause of an OpenMP loop do?",
     "It merges the iteration spaces of several perfectly nested loops into one larger space, "
     "which gives the scheduler more iterations to spread over the threads."),
    ("When is schedule(dynamic) better than schedule(static) in OpenMP?",
     "Dynamic scheduling pays off when iterations take very different times, because idle "
     "threads take new chunks at run time instead of waiting on a fixed split."),
    ("What is static single assignment form?",
     "It is an intermediate representation in which every variable is assigned exactly once, "
     "which makes def-use chains explicit and simplifies many compiler optimizations."),
    ("What is LLVM IR?",
     "LLVM IR is a typed low-level language in SSA form that front ends emit and that the LLVM "
     "optimizer and back ends turn into machine code for many targets."),
    ("What does Amdahl's law state?",
     "If a fraction s of a program is serial, its speedup on p processors is at most "
     "1 / (s + (1 - s) / p), so the serial part bounds the gain however many processors run."),
    ("What is the difference between strong and weak scaling?",
     "Strong scaling keeps the total problem size fixed while adding processors, whereas weak "
     "scaling grows the problem with the processor count so the work per processor stays put."),
    ("What does intent(in) mean for a Fortran dummy argument?",
     "It declares that the procedure only reads the argument, and the compiler rejects any "
     "statement in the procedure body that would assign to it."),
    ("What is RAII in C++?",
     "Resource acquisition is initialization ties a resource to an object's lifetime: the "
     "constructor acquires it and the destructor releases it, even when an exception is thrown."),
    ("What does std::move do in C++?",
     "It is only a cast to an rvalue reference that marks an object as expendable, so overload "
     "resolution can pick a move constructor that takes over its resources."),
    ("What is the global interpreter lock in CPython?",
     "It is a mutex that lets one thread at a time execute Python bytecode, so CPU-bound threads "
     "do not run in parallel although threads waiting on I/O still overlap."),
    ("What does the Rust borrow checker enforce?",
     "It checks at compile time that a value has either one mutable reference or any number of "
     "shared ones at a time, and that no reference outlives the value it refers to."),
    ("What is an abstract syntax tree?",
     "It is a tree whose nodes are the constructs of a program, such as expressions and "
     "statements, without the punctuation and layout details of the concrete syntax."),
    ("What is code clone detection?",
     "Code clone detection decides whether two code fragments implement the same behaviour, "
     "whether their text is nearly identical or they are written quite differently."),
    ("Why is BLEU a weak metric for generated code?",
     "BLEU only counts shared token n-grams, so it rewards surface similarity and can rank a "
     "program that does not compile above a correct one written in another style."),
    ("What is loop unrolling?",
     "Loop unrolling repeats the loop body several times per iteration, which cuts branch and "
     "counter overhead and exposes more independent instructions to the scheduler."),
    ("What does vectorization mean for a compiler?",
     "Vectorization turns the scalar operations of a loop into SIMD instructions that process "
     "several elements at once, which is legal only when the iterations are independent."),
    ("What is a data race?",
     "A data race occurs when two threads access the same memory location concurrently without "
     "synchronization and at least one of the two accesses is a write."),
    ("What is the purpose of an MPI communicator?",
     "A communicator names a group of processes and a private context for their messages, so "
     "operations in one communicator never match messages sent in another."),
    ("What is CUDA shared memory?",
     "It is a small, fast on-chip memory that all threads of a block can read and write, often "
     "used as a cache the programmer manages for data reused within the block."),
    ("What is just-in-time compilation?",
     "Just-in-time compilation translates code to machine instructions while the program runs, "
     "so it can specialize the code for the types and values it actually observes."),
    ("What does a static local variable mean in a C function?",
     "A static local variable keeps its value from one call to the next because it has static "
     "storage duration, while its name stays visible only inside that function."),
    ("What is tail call optimization?",
     "It reuses the caller's stack frame when the last action of a function is a call, so "
     "recursion in tail position runs in constant stack space however deep it goes."),
    ("What does the constexpr specifier mean in C++?",
     "It declares that a variable or function can be evaluated at compile time when its inputs "
     "are constants, so the result can be used where a constant expression is required."),
    ("What is alias analysis in a compiler?",
     "Alias analysis works out whether two pointers or references may denote the same memory, "
     "and its answers decide which loads and stores the optimizer may move or remove."),
    ("What is a cache line?",
     "A cache line is the fixed-size block, commonly 64 bytes on current CPUs, in which data "
     "moves between memory and the caches, so reading one byte brings its neighbours along."),
    ("What is the roofline model?",
     "The roofline model bounds a kernel's attainable performance by the smaller of the peak "
     "compute rate and the memory bandwidth times the kernel's arithmetic intensity."),
    ("What is type inference?",
     "Type inference lets a compiler deduce the types of variables and expressions from how "
     "they are used, so programmers can omit many annotations and keep static checking."),
    ("What does MPI_Barrier do?",
     "MPI_Barrier blocks each calling process until every process of the communicator has "
     "called it, which synchronizes the group without transferring any data."),
    ("What does the launch configuration of a CUDA kernel specify?",
     "It gives the number of thread blocks in the grid and the number of threads per block, "
     "which together decide how many threads execute the kernel."),
)


def plp_qa() -> list[Record]:
    for q, a in PLP:  # one sentence each, of the length of HPC-GPT's PLP answers
        assert 80 <= len(a) <= 220 and a.endswith(".") and ". " not in a, (q, len(a))
    return [{"instruction": q, "input": "", "output": a} for q, a in PLP]


# ---------------------------------------------------------------------------------------------
# GEMM problem shapes
# ---------------------------------------------------------------------------------------------

GEMM_HAND = (
    (256, 256, 256, "dgemm-256", "The paper's problem: square DGEMM of 256, 0.034 GFLOP per call."),
    (128, 128, 128, "dgemm-128",
     "Small square DGEMM: all three matrices fit in a 512 kB L2 cache."),
    (192, 256, 320, "dgemm-192x256x320",
     "Rectangular: M, N and K all differ, so a transposed index shows."),
    (384, 384, 384, "dgemm-384",
     "Larger square DGEMM: 3.5 MB of matrices, beyond most L2 caches."),
    (250, 250, 250, "dgemm-250",
     "Square but no multiple of 4, 8 or 16: every tile and vector has an edge."),
)
GEMM_SIDES = (64, 96, 128, 160, 192, 224, 256)  # small enough that one timing takes milliseconds
GEMM_DRAWN = 43


def gemm_problems() -> list[dict[str, object]]:
    """The hand-written shapes, then GEMM_DRAWN distinct (M, N, K) drawn from GEMM_SIDES."""
    problems: list[dict[str, object]] = [
        {"name": name, "M": m, "N": n, "K": k, "description": text}
        for m, n, k, name, text in GEMM_HAND]
    taken = {(m, n, k) for m, n, k, _, _ in GEMM_HAND}
    draw = random.Random(SEED + 4)
    while len(problems) < len(GEMM_HAND) + GEMM_DRAWN:
        m, n, k = (draw.choice(GEMM_SIDES) for _ in range(3))
        if (m, n, k) in taken:
            continue
        taken.add((m, n, k))
        gflop = 2 * m * n * k / 1e9
        problems.append({"name": f"dgemm-{m}x{n}x{k}", "M": m, "N": n, "K": k,
                         "description": f"DGEMM: {m}x{k} times {k}x{n}, "
                                        f"{gflop:.4f} GFLOP per call."})
    return problems


# ---------------------------------------------------------------------------------------------

def samples() -> dict[str, str]:
    """File name -> the exact text written (JSON, indent 1, trailing newline, ASCII)."""
    built = {"data_race_c.json": data_race(C_TEMPLATES, fortran=False),
             "data_race_fortran.json": data_race(F_TEMPLATES, fortran=True),
             "mlperf_qa.json": mlperf_qa(), "plp_qa.json": plp_qa(),
             "gemm_problems.json": gemm_problems()}
    return {name: json.dumps(records, indent=1, ensure_ascii=True) + "\n"
            for name, records in built.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="exit 1 when the files differ from what would be written")
    parser.add_argument("--table", action="store_true",
                        help="print the fictional MLPerf-style table as Markdown")
    parser.add_argument("--dir", type=Path, default=SAMPLES, help=f"default: {SAMPLES}")
    args = parser.parse_args(argv)
    if args.table:
        sys.stdout.write(mlperf_markdown())
        return 0
    texts = samples()
    if args.check:
        stale = [name for name, text in texts.items()
                 if not (args.dir / name).is_file()
                 or (args.dir / name).read_text(encoding="utf-8") != text]
        for name in stale:
            print(f"stale: {args.dir / name} (run scripts/make_task_samples.py)", file=sys.stderr)
        return 1 if stale else 0
    args.dir.mkdir(parents=True, exist_ok=True)
    for name, text in texts.items():
        tmp = args.dir / f".{name}.tmp"
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(args.dir / name)
        print(f"wrote {args.dir / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
