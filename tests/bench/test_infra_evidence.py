"""Infra or policy, decided by evidence: text the completion controls (a `#warning`, a comment
on an erroring line) never makes an `infra_error`; only the toolchain's own lines can suggest
one, and a known-good probe compile (the shipped naive kernel) confirms it. A genuinely broken
toolchain is `infra_error` and never cached; a failure the toolchain does not share is the
completion's `compile_error` (uncached when not located in kernel.c)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hargo_hpc.bench import build as build_mod
from hargo_hpc.bench import run_request
from hargo_hpc.bench.cache import CompileCache
from hargo_hpc.bench.reference import kernel_source
from hargo_hpc.bench.settings import BenchSettings

from .sources import SIG

ENOSPC = "No space left on device"


def request(code: str, settings: BenchSettings, cache: str) -> dict:
    return run_request({"id": "e", "completion": f"```c\n{code}```\n"}, settings, cache_dir=cache)


@pytest.fixture(autouse=True)
def _fresh_probes(monkeypatch):
    monkeypatch.setattr(build_mod, "_PROBES", {})


@pytest.mark.parametrize(
    "code",
    [
        f"#warning {ENOSPC}\n{SIG} {{ int x = ; }}\n",
        f"{SIG} {{\n    int x = ; // {ENOSPC}\n}}\n",
        f"{SIG} {{\n    C[0] = missing_name; /* {ENOSPC}, Too many open files */\n}}\n",
    ],
    ids=["warning", "comment", "block-comment"],
)
def test_the_completions_text_never_makes_an_infra_error(code, settings, cache_dir,
                                                         run_tmp) -> None:  # fmt: skip
    cache = cache_dir
    rec = request(code, settings, cache)
    assert rec["status"] == "compile_error", (rec["status"], rec["reason"], rec["output"])
    assert rec["reward"] == settings.penalties.compile_error
    again = request(code, settings, cache)  # located in kernel.c: deterministic, cached
    assert again["status"] == "compile_error" and again["cache_hit"]


def fake_compiler(directory: Path, name: str, body: str) -> str:
    """A compiler script: the real gcc for the version, the target options and the harness
    (judge.c, kernel_main.c: trusted, outside the sandbox), `body` for everything else. It has
    gcc's identity, so the tests give it sources of their own (`unique`): none is cached."""
    path = directory / name
    path.write_text(
        "#!/bin/sh\nfor a in \"$@\"; do case \"$a\" in\n"
        "  --version|--help=target|judge.c|kernel_main.c) exec gcc \"$@\";;\nesac; done\n"
        + body
    )
    os.chmod(path, 0o755)
    return str(path)


def unique(name: str) -> str:
    return f"/* {name} */\n" + kernel_source("naive")


def test_a_broken_toolchain_is_infra_and_not_cached(settings, cache_dir, run_tmp) -> None:
    cc = fake_compiler(run_tmp, "gcc-broken", f'echo "cc1: fatal error: kernel.s: {ENOSPC}" >&2\n'
                       "exit 1\n")  # fmt: skip
    broken = settings.model_copy(update={"compiler": cc})
    for _ in range(2):
        rec = request(unique("broken"), broken, cache_dir)
        assert rec["status"] == "infra_error" and rec["reward"] is None, rec["reason"]
        assert ENOSPC in rec["reason"] and "naive kernel does not build" in rec["reason"]
        assert not rec["cache_hit"]


def test_a_failure_the_probe_does_not_share_is_the_completions(settings, cache_dir,
                                                               run_tmp) -> None:  # fmt: skip
    """The toolchain lines name a machine failure, but only for this completion's code: the
    naive kernel builds through the same compiler, so it is the completion's compile_error,
    not cached (nothing located in kernel.c)."""
    cc = fake_compiler(run_tmp, "gcc-picky", (
        'case " $* " in *" kernel.c "*) if grep -q HARGO_BREAK kernel.c; then\n'
        f'  echo "cc1: fatal error: kernel.s: {ENOSPC}" >&2; exit 1; fi;;\nesac\n'
        'exec gcc "$@"\n'))
    picky = settings.model_copy(update={"compiler": cc})
    for _ in range(2):
        rec = request(unique("HARGO_BREAK"), picky, cache_dir)
        assert rec["status"] == "compile_error", (rec["status"], rec["reason"])
        assert not rec["cache_hit"]
    assert request(unique("picky but fine"), picky, cache_dir)["status"] == "ok"


def test_missing_static_libraries_are_infra_naming_them(settings, cache_dir, run_tmp) -> None:
    cc = fake_compiler(run_tmp, "gcc-nolib", (
        'for a in "$@"; do [ "$a" = kernel_main.o ] && exec gcc "$@" -lhargo_missing; done\n'
        'exec gcc "$@"\n'))
    rec = request(unique("nolib"), settings.model_copy(update={"compiler": cc}), cache_dir)
    assert rec["status"] == "infra_error", (rec["status"], rec["reason"])
    assert "libhargo_missing.a" in rec["reason"] and "static" in rec["reason"], rec["reason"]


def test_a_link_failure_of_the_completion_alone_is_a_compile_error(settings, cache_dir,
                                                                   run_tmp) -> None:  # fmt: skip
    cc = fake_compiler(run_tmp, "gcc-linkpicky", (
        'for a in "$@"; do [ "$a" = kernel_main.o ] && grep -q HARGO_NOLINK kernel.c && '
        'exec gcc "$@" -lhargo_missing; done\nexec gcc "$@"\n'))
    picky = settings.model_copy(update={"compiler": cc})
    rec = request(unique("HARGO_NOLINK"), picky, cache_dir)
    assert rec["status"] == "compile_error" and "link" in rec["reason"], rec["reason"]
    assert not request(unique("HARGO_NOLINK"), picky, cache_dir)["cache_hit"]


def test_the_probe_is_remembered(settings, cache_dir, run_tmp, monkeypatch) -> None:
    calls = []
    real = build_mod._attempt
    monkeypatch.setattr(build_mod, "_attempt", lambda *a: calls.append(1) or real(*a))
    gcc = build_mod.resolve_compiler(settings.compiler)
    main = build_mod.harness(CompileCache(cache_dir), gcc).kernel_main
    tc = build_mod._Toolchain(gcc, list(settings.flags), "probe-test", None, main, None,
                              settings.compile_memory_limit_mb, 256, 4096,
                              settings.static_data_limit_mb << 20)  # fmt: skip
    assert build_mod._probe(tc, 20.0) is None and build_mod._probe(tc, 20.0) is None
    assert len(calls) == 1
