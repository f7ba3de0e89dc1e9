#!/usr/bin/env python3
"""`make paper-table`: the method comparison, `hargo submit jobs/paper.toml --wait`.

Each text task reads its HPC-GPT file from DIR (`--data DIR`, the Makefile's HPCGPT_DIR) when
the file is there, and the project's own sample otherwise (said on one line per task: the
shared copy of HPC-GPT lacks the Fortran split, for one). GEMM uses the project's corpus.
Then it prints the report's table and paths, like `make demo` (scripts/demo.py).

Usage: scripts/paper_table.py [--data DIR] [section.key=value ...]   (needs SLURM_CONF)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from demo import run_job

REPO = Path(__file__).resolve().parents[1]
JOB = REPO / "jobs" / "paper.toml"


def tasks_override(data: Path | None) -> str:
    """The `data.tasks=[...]` override: jobs/paper.toml's tasks as they are, with `path = DIR`
    added to each one whose HPC-GPT file is in DIR (the others read the project's sample)."""
    from hargo_hpc.config import load_config
    from hargo_hpc.tasks.registry import task_class

    tasks = []
    for spec in load_config(JOB).data.tasks:
        fields = spec.model_dump(exclude_unset=True)
        files = task_class(spec.name).files
        if files:  # a text task (GEMM's problems are the project's own)
            if data is not None and any((data / f).is_file() for f in files):
                fields["path"] = str(data)
                print(f"{spec.name}: {data}")
            else:
                where = f"no {' or '.join(files)} in {data}" if data else "no --data"
                print(f"{spec.name}: the project's sample ({where})")
        tasks.append("{" + ",".join(f"{k}={json.dumps(v)}" for k, v in fields.items()) + "}")
    return "data.tasks=[" + ",".join(tasks) + "]"


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
