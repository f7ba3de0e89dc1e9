"""Bounded costs: a kernel's static data is capped (a clear format_violation, before linking or
caching a binary), and the compile cache is bounded, evicting its least recently used entries
safely while other workers read it."""

from __future__ import annotations

import multiprocessing
import os
import time
from pathlib import Path

import pytest

from hargo_hpc.bench import run_request
from hargo_hpc.bench.cache import EVICT_PREFIX, CompileCache
from hargo_hpc.bench.settings import BenchSettings
from hargo_hpc.bench.validate import Violation, check_static_size, section_table, static_bytes

from .sources import SIG

DOUBLES = 25_000_000  # 200 MB


def body(writable: bool) -> str:
    """A correct kernel that reads (and writes, unless const) the table, so that the compiler
    keeps all of it."""
    store = f"table[((long)i * N + j) % {DOUBLES}] = s;" if writable else ""
    return f"""
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {{
            double s = 0.0;
            for (int k = 0; k < K; k++) s += A[i * K + k] * B[k * N + j];
            C[i * N + j] = s + 0.0 * table[((long)i * N + j) % {DOUBLES}];
            {store}
        }}
"""


@pytest.mark.parametrize(
    ("decl", "flags"),
    [
        (f"static double table[{DOUBLES}] = {{1.0, 2.0}};", []),  # .data
        (f"static double table[{DOUBLES}];", []),  # .bss
        (f"double table[{DOUBLES}];", ["-fcommon"]),  # a common symbol
        (f"static const double table[{DOUBLES}] = {{1.0}};", []),  # .rodata
    ],
    ids=["data", "bss", "common", "rodata"],
)
def test_static_data_over_the_limit_is_a_format_violation(decl, flags, settings, cache_dir,
                                                           run_tmp) -> None:  # fmt: skip
    code = f"```c\n{decl}\n{SIG} {{{body('const' not in decl)}}}\n```\n"
    settings = settings.model_copy(update={"flags": [*settings.flags, *flags]})
    start = time.monotonic()
    rec = run_request({"id": "big", "completion": code}, settings, cache_dir=cache_dir)
    assert rec["status"] == "format_violation", (rec["status"], rec["reason"], rec["output"])
    assert rec["reason"].startswith("static data of 191 MB exceeds the limit of 64 MB"), rec
    assert rec["reward"] == settings.penalties.format_violation
    assert time.monotonic() - start < 20
    again = run_request({"id": "big", "completion": code}, settings, cache_dir=cache_dir)
    assert again["cache_hit"] and again["status"] == "format_violation"
    assert list(run_tmp.iterdir()) == []


def test_a_table_over_the_compiles_file_limit_is_a_format_violation(settings, cache_dir,
                                                                    run_tmp) -> None:  # fmt: skip
    """320 MB of .data: the assembler is stopped by the compile's RLIMIT_FSIZE (256 MB)."""
    code = f"```c\nstatic double table[40000000] = {{1.0}};\n{SIG} {{{body(True)}}}\n```\n"
    rec = run_request({"id": "huge", "completion": code.replace(str(DOUBLES), "40000000")},
                      settings, cache_dir=cache_dir)  # fmt: skip
    assert rec["status"] == "format_violation", (rec["status"], rec["reason"])
    assert "static data over the limit of 64 MB" in rec["reason"]


READELF = """
  [ 1] .text             PROGBITS        0000000000000000 000040 000100 00  AX  0   0 16
  [ 2] .data             PROGBITS        0000000000000000 000140 000800 00  WA  0   0 32
  [ 3] .bss              NOBITS          0000000000000000 000940 3000000 00  WA  0   0 32
  [ 4] myinit            INIT_ARRAY      0000000000000000 000940 000008 08  WA  0   0  8
  [ 5] .comment          PROGBITS        0000000000000000 000948 000028 01  MS  0   0  1
  [ 6] .note.GNU-stack   PROGBITS        0000000000000000 000970 000000 00      0   0  1
     7: 0000000000000020  4096 OBJECT  GLOBAL DEFAULT  COM scratch
"""


def test_section_sizes_and_common_symbols_are_counted() -> None:
    names = [(s.name, s.flags, s.size) for s in section_table(READELF)]
    assert names == [(".text", "AX", 0x100), (".data", "WA", 0x800), (".bss", "WA", 0x3000000),
                     ("myinit", "WA", 8), (".comment", "MS", 0x28),
                     (".note.GNU-stack", "", 0)]  # fmt: skip
    assert static_bytes(READELF) == 0x100 + 0x800 + 0x3000000 + 8 + 4096
    check_static_size(READELF, BenchSettings().static_data_limit_mb << 20)  # 48 MB: within
    with pytest.raises(Violation, match="static data of 48 MB exceeds the limit of 32 MB"):
        check_static_size(READELF, 32 << 20)
    with pytest.raises(Violation, match="section table"):
        section_table("  [ 9] .odd  PROGBITS nonsense\n")


# the compile cache


def fill(cache: CompileCache, n: int, *, size: int = 10, start: float = 1e9) -> list[str]:
    """n entries, entry i last used at start + i (oldest first); returns their keys."""
    keys = []
    for i in range(n):
        key = f"{i:02d}" + "k" * 62
        src = cache.root.parent / f"bin-{i}"
        src.write_bytes(b"x" * size)
        entry = cache.store(key, {"verdict": "built", "i": i}, {"kernel.bin": str(src)})
        os.utime(entry / "meta.json", (start + i, start + i))
        keys.append(key)
    return keys


def test_cache_evicts_the_least_recently_used_beyond_its_entry_bound(tmp_path) -> None:
    big = CompileCache(tmp_path / "c", scan_interval_s=1e9)  # no eviction while filling
    keys = fill(big, 12)
    cache = CompileCache(tmp_path / "c", max_entries=10, min_age_s=0, scan_interval_s=0)
    removed = cache.evict()
    assert len(removed) == 3  # back under 90 % of the bound: 9 entries
    assert [cache.load(k) is None for k in keys] == [True] * 3 + [False] * 9
    assert not list((tmp_path / "c").glob(f"*/{EVICT_PREFIX}*"))


def test_cache_evicts_beyond_its_byte_bound_and_spares_recent_entries(tmp_path) -> None:
    cache = CompileCache(tmp_path / "c", scan_interval_s=1e9)
    keys = fill(cache, 6, size=1000)
    now = time.time()
    os.utime(cache.entry(keys[0]) / "meta.json", (now, now))  # the oldest, just used
    bounded = CompileCache(tmp_path / "c", max_bytes=3000, min_age_s=600, scan_interval_s=0)
    bounded.evict()
    kept = [k for k in keys if bounded.load(k) is not None]
    # 6 x (1000 + meta) > 3000: the oldest go until under 2700, but not the one just used
    assert kept == [keys[0], keys[5]]


def test_store_evicts_on_its_own(tmp_path) -> None:
    cache = CompileCache(tmp_path / "c", max_entries=4, min_age_s=0, scan_interval_s=0)
    keys = fill(cache, 8)
    live = [k for k in keys if cache.load(k) is not None]
    assert len(live) <= 4 and keys[-1] in live


def test_a_load_refreshes_the_last_use(tmp_path) -> None:
    cache = CompileCache(tmp_path / "c", scan_interval_s=1e9)
    (key,) = fill(cache, 1)
    assert cache.load(key) is not None
    assert time.time() - (cache.entry(key) / "meta.json").stat().st_mtime < 60


def _reader(root: str, keys: list[str], flags: str) -> tuple[int, int]:
    """Loads every key in a loop while the evictor runs (from its `started` to its `done`)."""
    cache = CompileCache(root, scan_interval_s=1e9)
    hits = misses = 0
    end = time.monotonic() + 30
    while not Path(flags, "started").exists() and time.monotonic() < end:
        time.sleep(0.001)
    while not Path(flags, "done").exists() and time.monotonic() < end:
        for key in keys:
            got = cache.load(key)
            if got is None:
                misses += 1
                continue
            meta, entry = got  # a whole entry (its files were all there), or a miss
            assert meta["verdict"] == "built" and entry.name == key
            hits += 1
    return hits, misses


def _evictor(root: str, flags: str, seconds: float) -> int:
    """Re-publishes and evicts entries in a loop (another worker under a tiny bound)."""
    cache = CompileCache(root, max_entries=3, min_age_s=0, scan_interval_s=0)
    Path(flags, "started").touch()
    end = time.monotonic() + seconds
    rounds = 0
    while time.monotonic() < end or rounds < 5:
        fill(cache, 8, start=time.time() - 100)
        rounds += 1
    Path(flags, "done").touch()
    return rounds


def test_eviction_is_safe_under_concurrent_readers(tmp_path) -> None:
    root = tmp_path / "c"
    flags = tmp_path / "flags"
    flags.mkdir()
    cache = CompileCache(root, scan_interval_s=1e9)
    keys = fill(cache, 8)
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(3) as pool:
        readers = [pool.apply_async(_reader, (str(root), keys, str(flags))) for _ in range(2)]
        evictor = pool.apply_async(_evictor, (str(root), str(flags), 0.5))
        results = [r.get(timeout=60) for r in readers]  # a reader that raised fails here
        assert evictor.get(timeout=60) >= 5
    assert sum(h for h, _ in results) > 0 and sum(m for _, m in results) > 0
    CompileCache(root, max_entries=3, min_age_s=0).evict()
    assert len(CompileCache(root).entries()) <= 3
    assert not list(root.glob(f"*/{EVICT_PREFIX}*"))


def test_stale_leftovers_are_removed(tmp_path) -> None:
    cache = CompileCache(tmp_path / "c", scan_interval_s=1e9)
    fill(cache, 1)
    stale = tmp_path / "c" / "00" / f"{EVICT_PREFIX}dead"
    stale.mkdir()
    os.utime(stale, (1e9, 1e9))
    cache.entries()
    assert not stale.exists()
    assert Path(tmp_path / "c" / "00").is_dir()
