"""Compile cache: one build per distinct (source, compiler, compiler version, flags, driver).

Layout: ``<root>/<key[:2]>/<key>/`` holding ``meta.json`` (the build verdict, compiler output)
and, for a good build, ``gemm.bin``.  An entry is written into a private temporary directory
next to it and published with one ``rename``: readers never see half an entry, and when two
workers build the same key at once the first rename wins and the second just drops its copy.
Only deterministic verdicts are stored (built, compile_error, format_violation), never timeouts.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

from hargo_hpc.files import publish_directory


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


class CompileCache:
    """A directory of published build entries (see module docstring)."""

    def __init__(self, root: str | os.PathLike[str] | None) -> None:
        self.root = Path(root) if root else default_cache_root()

    def entry(self, key: str) -> Path:
        return self.root / key[:2] / key

    def load(self, key: str) -> tuple[dict, Path] | None:
        """(meta, entry dir) of a complete published entry, or None."""
        path = self.entry(key)
        try:
            meta = json.loads((path / "meta.json").read_text())
        except (OSError, ValueError):
            return None
        if any(not (path / name).is_file() for name in meta.get("files", [])):
            return None
        return meta, path

    def store(self, key: str, meta: dict, files: dict[str, str] | None = None) -> Path:
        """Publish an entry atomically; returns the published directory (ours or a winner's).

        `files` maps names inside the entry to paths to copy in; `meta["files"]` lists them.
        """
        final = self.entry(key)
        with publish_directory(final) as tmp:
            for name, src in (files or {}).items():
                shutil.copy2(src, tmp / name)
            meta = {**meta, "files": sorted(files or {})}
            (tmp / "meta.json").write_text(json.dumps(meta, sort_keys=True))
        return final
