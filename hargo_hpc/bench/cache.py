"""Compile cache: one build per distinct (source, compiler, compiler version, flags, driver).

`CompileCache(root, max_bytes, max_entries)` keeps one entry per build key, `<root>/<key[:2]>/
<key>/` (`meta.json`, and `kernel.bin` for a good build): `load` finds one, `store` publishes
one with a single rename and keeps the cache under its bounds by evicting the least recently
used entries. What is cached, the bounds, eviction next to other workers and where the cache
lives: docs/bench.md, "Cache (`cache.py`)".
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from hargo_hpc.files import TEMP_PREFIX, publish_directory

DEFAULT_MAX_BYTES = 2 << 30
DEFAULT_MAX_ENTRIES = 20000
EVICT_PREFIX = ".evict-"
TOUCH_INTERVAL_S = 60.0  # `load` refreshes an entry's last use at most this often
MIN_AGE_S = 900.0  # entries used more recently are never evicted
SCAN_INTERVAL_S = 60.0  # the cache is measured at most this often per process and root
STALE_S = 3600.0  # temporary and evicted directories older than this are removed by a scan
_LAST_SCAN: dict[str, float] = {}
_TOTAL: dict[str, int] = {}  # bytes in the cache by the last scan + this process's stores since


def cache_key(*parts: str) -> str:
    """sha256 over the length-prefixed parts (so no two part lists collide)."""
    h = hashlib.sha256()
    for p in parts:
        b = p.encode()
        h.update(len(b).to_bytes(8, "little"))
        h.update(b)
    return h.hexdigest()


def user_cache_dir() -> Path:
    """`$XDG_CACHE_HOME/hargo-hpc` (default `~/.cache/hargo-hpc`): compile cache and roof."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "hargo-hpc"


def default_cache_root() -> Path:
    return user_cache_dir() / "bench"


@dataclass(frozen=True)
class _Entry:
    path: Path
    used: float  # mtime of meta.json
    size: int  # bytes of its files


class CompileCache:
    """A directory of published build entries (docs/bench.md, "Cache")."""

    def __init__(
        self,
        root: str | os.PathLike[str] | None,
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        min_age_s: float = MIN_AGE_S,
        scan_interval_s: float = SCAN_INTERVAL_S,
    ) -> None:
        self.root = Path(root) if root else default_cache_root()
        self.max_bytes, self.max_entries = max_bytes, max_entries
        self.min_age_s, self.scan_interval_s = min_age_s, scan_interval_s

    def entry(self, key: str) -> Path:
        return self.root / key[:2] / key

    def load(self, key: str) -> tuple[dict, Path] | None:
        """(meta, entry dir) of a complete published entry, or None (also when it is being
        evicted right now)."""
        path = self.entry(key)
        meta_path = path / "meta.json"
        try:
            meta = json.loads(meta_path.read_text())
        except (OSError, ValueError):
            return None
        if any(not (path / name).is_file() for name in meta.get("files", [])):
            return None
        with contextlib.suppress(OSError):  # last use, for eviction (at most once a minute)
            if time.time() - meta_path.stat().st_mtime > TOUCH_INTERVAL_S:
                os.utime(meta_path)
        return meta, path

    def store(self, key: str, meta: dict, files: dict[str, str] | None = None) -> Path | None:
        """Publish an entry atomically; returns the published directory (ours or a winner's),
        or None when the entry does not fit under `max_bytes` (nothing is published).

        `files` maps names inside the entry to paths to copy in; `meta["files"]` lists them.
        Then, at most every `scan_interval_s`, evicts old entries beyond the bounds.
        """
        final = self.entry(key)
        root = str(self.root)
        size = sum(os.path.getsize(src) for src in (files or {}).values()) + 4096  # + meta
        if not self._room(size):
            return None
        with publish_directory(final) as tmp:
            for name, src in (files or {}).items():
                shutil.copy2(src, tmp / name)
            meta = {**meta, "files": sorted(files or {})}
            (tmp / "meta.json").write_text(json.dumps(meta, sort_keys=True))
        _TOTAL[root] = _TOTAL.get(root, 0) + size
        now = time.monotonic()
        if now - _LAST_SCAN.get(root, -1e18) >= self.scan_interval_s:
            _LAST_SCAN[root] = now
            with contextlib.suppress(OSError):
                self.evict(keep=final)
        return final

    def _room(self, size: int) -> bool:
        """Whether `size` more bytes fit under `max_bytes`: by this process's count, else after
        a scan that evicts what may be evicted."""
        root = str(self.root)
        if size > self.max_bytes:
            return False
        if root in _TOTAL and _TOTAL[root] + size <= self.max_bytes:
            return True
        _LAST_SCAN[root] = time.monotonic()
        with contextlib.suppress(OSError):
            self.evict(need=size)
        return _TOTAL.get(root, 0) + size <= self.max_bytes

    def entries(self) -> list[_Entry]:
        """Every published entry with its last use and size (removing stale leftovers)."""
        found = []
        now = time.time()
        for shard in _listdir(self.root):
            if len(shard.name) != 2 or not shard.is_dir():
                continue
            for path in _listdir(shard):
                if path.name.startswith((EVICT_PREFIX, TEMP_PREFIX)):
                    with contextlib.suppress(OSError):
                        if now - path.stat().st_mtime > STALE_S:
                            shutil.rmtree(path, ignore_errors=True)
                    continue
                try:
                    used = (path / "meta.json").stat().st_mtime
                    size = sum(f.stat().st_size for f in _listdir(path))
                except OSError:
                    continue  # half gone (evicted by another worker)
                found.append(_Entry(path, used, size))
        return found

    def evict(self, keep: Path | None = None, need: int = 0) -> list[Path]:
        """Remove least recently used entries until both bounds hold with 10 % to spare, and
        `need` more bytes fit (none used within `min_age_s`, never `keep`); returns the entries
        removed. Records the total left for `store`'s check."""
        entries = self.entries()
        total = sum(e.size for e in entries)
        count = len(entries)
        root = str(self.root)
        _TOTAL[root] = total
        if total + need <= self.max_bytes and count <= self.max_entries:
            return []
        want_bytes = min(int(self.max_bytes * 0.9), self.max_bytes - need)
        want_count = int(self.max_entries * 0.9)
        removed = []
        cutoff = time.time() - self.min_age_s
        for e in sorted(entries, key=lambda e: (e.used, e.path.name)):
            if total <= want_bytes and count <= want_count:
                break
            if e.used > cutoff or e.path == keep:
                continue
            with contextlib.suppress(OSError):
                if (e.path / "meta.json").stat().st_mtime > cutoff:
                    continue  # used since the scan
            aside = e.path.with_name(f"{EVICT_PREFIX}{e.path.name}-{secrets.token_hex(4)}")
            try:
                os.rename(e.path, aside)  # atomic: readers see the entry or a miss
            except OSError:
                continue  # another worker evicted it first
            shutil.rmtree(aside, ignore_errors=True)
            total -= e.size
            count -= 1
            removed.append(e.path)
        _TOTAL[root] = total
        return removed


def _listdir(path: Path) -> list[Path]:
    try:
        return list(path.iterdir())
    except OSError:
        return []
