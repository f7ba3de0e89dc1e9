"""The machine's roof: DGEMM GFLOPS of a trusted OpenBLAS, measured by calibration for reports.

Stored as JSON at ``$HARGO_ROOF_FILE`` if set, else ``$XDG_CACHE_HOME/hargo-hpc/roof.json``
(``~/.cache/hargo-hpc/roof.json``), one entry per ``<hostname>/threads=<t>/size=<n>``:

    {"node1/threads=2/size=256": {"gflops": 58.1, "median": 55.0, "measured_at": "...",
                                   "library": "/.../libscipy_openblas64_....so"}}

The trusted path is numpy's bundled OpenBLAS (numpy >= 2 wheels ship scipy-openblas64, whose
symbols carry the ``scipy_`` prefix and ``64_`` suffix) called from kernels/openblas.c; a system
OpenBLAS (``libopenblas-dev``) works too with HARGO_OPENBLAS=/path/libopenblas.so.
"""

from __future__ import annotations

import glob
import json
import os
import socket
import time
from pathlib import Path

from hargo_hpc.bench.cache import user_cache_dir
from hargo_hpc.files import write_atomic


def roof_file() -> Path:
    if os.environ.get("HARGO_ROOF_FILE"):
        return Path(os.environ["HARGO_ROOF_FILE"])
    return user_cache_dir() / "roof.json"


def roof_key(threads: int, shape: str) -> str:
    return f"{socket.gethostname()}/threads={threads}/size={shape}"


def load_roof(threads: int, shape: str) -> float | None:
    """The stored roof for this host, thread count and problem shape ("256" or "MxNxK")."""
    try:
        data = json.loads(roof_file().read_text())
        return float(data[roof_key(threads, shape)]["gflops"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def store_roof(threads: int, shape: str, record: dict) -> Path:
    """Merge one entry into the roof file (atomically)."""
    path = roof_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        data = {}
    data[roof_key(threads, shape)] = {**record, "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                          time.gmtime())}
    write_atomic(path, json.dumps(data, indent=1, sort_keys=True))
    return path


def openblas_library() -> tuple[str, str] | None:
    """(shared library path, C symbol of cblas_dgemm with 64-bit ints) of a trusted OpenBLAS."""
    env = os.environ.get("HARGO_OPENBLAS")
    if env:
        return env, os.environ.get("HARGO_OPENBLAS_SYMBOL", "cblas_dgemm")
    try:
        import numpy
    except ImportError:
        return None
    libs = Path(numpy.__file__).parent.parent / "numpy.libs"
    for lib in sorted(glob.glob(str(libs / "libscipy_openblas64_*.so"))):
        return lib, "scipy_cblas_dgemm64_"
    for lib in sorted(glob.glob(str(libs / "libscipy_openblas_*.so"))):
        return lib, "scipy_cblas_dgemm"
    return None
