"""A built wheel works on its own: installed into a fresh virtual environment (no network), it
renders batch scripts, copies the example jobs and benchmarks a shipped kernel, all from
outside the source tree."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow

PROBE = """
import importlib.metadata, json, sys
import hargo_hpc
print(json.dumps({
    "module": hargo_hpc.__file__,
    "dist": str(importlib.metadata.distribution("hargo-hpc").locate_file("")),
    "finders": [type(f).__module__ + "." + type(f).__qualname__ for f in sys.meta_path],
    "loaded": sorted(name for name in sys.modules if "editable" in name),
    "path": sys.path,
}))
"""

LOAD_JOBS = """
import sys
from hargo_hpc.config import load_config
for path in sys.argv[1:]:
    print(load_config(path).run.name)
"""

KERNEL = """
from importlib.resources import files
print(files("hargo_hpc.bench") / "kernels" / "naive.c")
"""


def run(argv: list[str], cwd: Path, env: dict[str, str],
        timeout: float = 120) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(argv, capture_output=True, text=True, cwd=cwd, env=env,
                          timeout=timeout)
    assert done.returncode == 0, f"{argv}: {done.stdout}{done.stderr}"
    return done


def test_wheel_installs_and_works_outside_the_tree(tmp_path: Path) -> None:
    # a copy of what the wheel is built from, so the build leaves nothing in the checkout
    src = tmp_path / "src"
    src.mkdir()
    shutil.copytree(REPO / "hargo_hpc", src / "hargo_hpc",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    # pip runs from the main venv; its own home, since it runs `rustc --version` (rustup's
    # proxy writes ~/.rustup) for its user agent
    host = {**os.environ, "HOME": str(tmp_path / "pip-home"), "PIP_NO_CACHE_DIR": "1",
            "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
         "--no-index", "-q", str(src), "-w", str(tmp_path / "dist")], tmp_path, host)
    (wheel,) = (tmp_path / "dist").glob("hargo_hpc-*.whl")
    shipped = set(zipfile.ZipFile(wheel).namelist())
    for data in ("hargo_hpc/slurm/templates/base.sh.j2",
                 "hargo_hpc/slurm/templates/bench_worker.sh.j2",
                 "hargo_hpc/slurm/templates/_select.sh.j2",
                 "hargo_hpc/slurm/templates/train.sh.j2",
                 "hargo_hpc/examples/jobs/demo.toml", "hargo_hpc/bench/kernels/naive.c",
                 "hargo_hpc/tasks/samples/data_race_c.json",
                 "hargo_hpc/tasks/samples/gemm_problems.json",
                 "hargo_hpc/tasks/gemm_corpus/plain_ikj.c"):
        assert data in shipped

    # a fresh venv with the wheel; its dependencies come from the main venv's site-packages
    # through a .pth line (a directory a .pth names has its own .pth files ignored, so the
    # main venv's editable hargo_hpc finder is not installed)
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp_path, host)
    python = venv / "bin" / "python"
    run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps",
         "--no-index", "-q", str(wheel)], tmp_path, host)
    site = Path(run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()"
                     "['purelib'])"], tmp_path, host).stdout.strip())
    assert site.is_relative_to(venv)
    main_dirs = dict.fromkeys(sysconfig.get_paths()[key] for key in ("purelib", "platlib"))
    (site / "zz_main_venv_deps.pth").write_text("".join(f"{d}\n" for d in main_dirs))

    outside = tmp_path / "elsewhere"
    home = tmp_path / "home"
    outside.mkdir()
    home.mkdir()
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("PYTHON", "VIRTUAL_ENV", "HARGO_", "XDG_"))}
    env.update(PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '/usr/bin:/bin')}",
               HOME=str(home), PYTHONNOUSERSITE="1",
               XDG_CACHE_HOME=str(tmp_path / "cache"),
               HARGO_ROOF_FILE=str(tmp_path / "cache" / "roof.json"),
               HARGO_UID_LEASE_DIR=str(tmp_path / "uid-leases"),
               HARGO_CPU_LOCK_DIR=str(tmp_path / "cpu-locks"))

    probe = json.loads(run([str(python), "-c", PROBE], outside, env).stdout)
    assert Path(probe["module"]).is_relative_to(venv), probe["module"]
    assert Path(probe["dist"]).resolve() == site.resolve()
    assert probe["loaded"] == [] and not any("editable" in f for f in probe["finders"])
    assert str(REPO) not in probe["path"]

    hargo = str(venv / "bin" / "hargo")
    done = run([hargo, "init", "proj"], outside, env)
    written = [line.removeprefix("wrote ") for line in done.stdout.splitlines()
               if line.startswith("wrote ")]
    assert len(written) == 6
    names = run([str(python), "-c", LOAD_JOBS, *written], outside, env).stdout.split()
    assert names == ["demo", "gemm-sqd", "hpcgpt-mix-hargo", "paper", "sweep", "tiny"]

    # the batch templates come from the installed package, not from a source tree
    gemm = next(path for path in written if path.endswith("gemm_sqd.toml"))
    run([hargo, "render", gemm, "-o", "scripts"], outside, env)
    scripts = outside / "scripts"
    assert sorted(p.name for p in scripts.glob("*.sh")) == ["bench.sh", "eval.sh", "report.sh",
                                                           "stop.sh", "train.sh"]
    bench = (scripts / "bench.sh").read_text()
    assert bench.startswith("#!/bin/bash\n#SBATCH --job-name=gemm-sqd-bench\n")
    assert "#SBATCH --signal=B:USR1@120\n" in bench and 'exec "${CMD[@]}"' in bench
    assert "#SBATCH --requeue\n" in (scripts / "train.sh").read_text()
    for script in scripts.glob("*.sh"):
        run(["bash", "-n", str(script)], outside, env)

    kernel = Path(run([str(python), "-c", KERNEL], outside, env).stdout.strip())
    assert kernel.is_relative_to(venv) and kernel.is_file()
    done = run([hargo, "bench", "run", str(kernel), "--size", "64", "--reps", "3",
                "--threads", "1", "--json"], outside, env, timeout=180)
    record = json.loads(done.stdout)
    assert record["status"] == "ok", record
    assert record["gflops"]["median"] > 0
    assert list(home.iterdir()) == []  # nothing written under $HOME
