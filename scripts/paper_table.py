#!/usr/bin/env python3
"""`make paper-table`: the method comparison, `hargo submit jobs/paper.toml --wait`.

Each text task reads its HPC-GPT file from DIR (`--data DIR`, the Makefile's HPCGPT_DIR) when
the file is there, and the project's own sample otherwise (said on one line per task: the
shared copy of HPC-GPT lacks the Fortran split, for one). GEMM uses the project's corpus.
Then it prints the report's table and paths, like `make demo` (scripts/demo.py).

Usage: scripts/paper_table.py [--data DIR] [section.key=value ...]   (needs SLURM_CONF)
"""

from __future__ import annotations

import sys
from pathlib import Path

from demo import run_job

REPO = Path(__file__).resolve().parents[1]
JOB = REPO / "jobs" / "paper.toml"
TEXT_TASKS = ("data_race_c", "data_race_fortran", "mlperf_qa", "plp_qa")
MAX_ITEMS = 400


def tasks_override(data: Path | None) -> str:
    """The `data.tasks=[...]` override: each text task on DIR where its file is, else sample."""
    from hargo_hpc.tasks.registry import task_class

    tasks = []
    for name in TEXT_TASKS:
        files = task_class(name).files
        if data is not None and any((data / f).is_file() for f in files):
            tasks.append(f'{{name="{name}",max_items={MAX_ITEMS},path="{data}"}}')
            print(f"{name}: {data}")
        else:
            tasks.append(f'{{name="{name}",max_items={MAX_ITEMS}}}')
            where = f"no {' or '.join(files)} in {data}" if data else "no --data"
            print(f"{name}: the project's sample ({where})")
    return "data.tasks=[" + ",".join([*tasks, '{name="gemm"}']) + "]"


def main(argv: list[str]) -> int:
    data = None
    if argv[:1] == ["--data"]:
        if len(argv) < 2:
            print("error: --data needs a directory", file=sys.stderr)
            return 2
        data = Path(argv[1]).resolve()
        if not data.is_dir():
            print(f"error: --data {argv[1]}: not a directory", file=sys.stderr)
            return 2
        argv = argv[2:]
    return run_job(JOB, [tasks_override(data), *argv], "paper table")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
