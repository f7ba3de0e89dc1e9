"""Staging what another uid needs, for the tests that run the checkout's code as `nobody`.

A user's clone may sit in a 0700 directory (a `mktemp -d`, root's home): a process that has
become another uid (`setpriv --reuid 65534`) cannot traverse it, so neither the checkout's
files nor the venv's site-packages inside it can be read. These helpers copy what that uid
needs into a world-readable directory the test owns (and removes):

- `readable_copy` for a single file (a script);
- `stage_python` for a Python command: the command is run once here, as this uid, with a hook
  that lists the modules it imported; every package of that closure that lies outside the
  standard library (the checkout's `hargo_hpc`, the venv's numpy, click, pydantic, ...) is
  copied, with its `<name>.libs` directory (where wheels keep their bundled shared libraries,
  e.g. numpy's OpenBLAS). The other uid then runs the base interpreter with `PYTHONPATH` at the
  copy.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Sequence
from pathlib import Path

# Runs the command (`python -m MODULE ARGS...`) and writes sys.modules' top-level names with
# their files at exit, whatever the exit code.
_PROBE = """
import atexit, json, runpy, sys
out, module, *args = sys.argv[1:]
def dump():
    found = {}
    for name, mod in list(sys.modules.items()):
        top = name.partition(".")[0]
        path = getattr(sys.modules.get(top), "__file__", None)
        if path:
            found[top] = path
    with open(out, "w") as fh:
        json.dump(found, fh)
atexit.register(dump)
sys.argv = [module, *args]
runpy.run_module(module, run_name="__main__", alter_sys=True)
"""


def readable_copy(source: Path, directory: Path) -> Path:
    """`source` copied into `directory` (made world-traversable), readable and executable by
    any uid."""
    directory.mkdir(parents=True, exist_ok=True)
    os.chmod(directory, 0o755)
    target = directory / source.name
    shutil.copy2(source, target)
    os.chmod(target, 0o755)
    return target


def _outside_stdlib(path: Path) -> bool:
    stdlib = {Path(sysconfig.get_paths()[k]).resolve() for k in ("stdlib", "platstdlib")}
    resolved = path.resolve()
    inside = any(resolved.is_relative_to(d) for d in stdlib)
    in_site = "site-packages" in resolved.parts or "dist-packages" in resolved.parts
    return in_site or not inside


def stage_python(module: str, args: Sequence[str], directory: Path, env: dict[str, str],
                 cwd: Path) -> tuple[list[str], str]:
    """Copy the import closure of `python -m module args...` (run once here, with `env` and
    `cwd`) into `directory`; return the argv prefix (`[interpreter, "-s", "-m", module]`) and
    the PYTHONPATH with which another uid runs the same command."""
    directory.mkdir(parents=True, exist_ok=True)
    os.chmod(directory, 0o755)
    listing = directory / "modules.json"
    done = subprocess.run([sys.executable, "-c", _PROBE, str(listing), module, *args],
                          capture_output=True, text=True, timeout=300, env=env, cwd=cwd)
    if not listing.is_file():
        raise RuntimeError(f"staging probe of {module} listed nothing:\n{done.stderr[-2000:]}")
    site = directory / "site"
    site.mkdir()
    for file in sorted(json.loads(listing.read_text()).values()):
        path = Path(file)
        if not _outside_stdlib(path):
            continue
        if path.name == "__init__.py":  # a package: its whole directory
            package = path.parent
            shutil.copytree(package, site / package.name, symlinks=True,
                            ignore=shutil.ignore_patterns("__pycache__"))
            libs = package.with_name(f"{package.name}.libs")
            if libs.is_dir():
                shutil.copytree(libs, site / libs.name, symlinks=True)
        elif path.suffix in (".py", ".so"):  # a single-file module
            shutil.copy2(path, site / path.name)
    for root, dirs, files in os.walk(site):
        for name in dirs:
            os.chmod(Path(root, name), 0o755)
        for name in files:
            os.chmod(Path(root, name), 0o644 | (os.stat(Path(root, name)).st_mode & 0o111))
    os.chmod(site, 0o755)
    interpreter = getattr(sys, "_base_executable", None) or sys.executable
    return [interpreter, "-s", "-m", module], str(site)
