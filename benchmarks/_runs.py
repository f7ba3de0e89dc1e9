"""Training runs for the benchmarks that compare two configurations end to end: a job file
from a few settings, and `hargo train` on it in its own process (its cache in the work
directory, never ~/.cache), returning the metrics records after the warm-up steps."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


def job_toml(run_dir: Path, name: str, model: str, tasks: Sequence[Mapping[str, Any]],
             sections: Mapping[str, Mapping[str, Any]]) -> str:
    """A job file: `[run]` (seed 0), `[model]`, one `[[data.tasks]]` a task (its keys as
    given), then each of `sections` with its keys (strings quoted, numbers as they are)."""
    def table(values: Mapping[str, Any]) -> str:
        return "".join(f"{key} = {json.dumps(value)}\n" for key, value in values.items())

    text = (f"[run]\n{table({'name': name, 'dir': str(run_dir), 'seed': 0})}\n"
            f"[model]\n{table({'path': model, 'max_prompt_tokens': 640})}")
    text += "".join(f"\n[[data.tasks]]\n{table(task)}" for task in tasks)
    return text + "".join(f"\n[{section}]\n{table(values)}"
                          for section, values in sections.items())


def train(work: Path, name: str, toml: str, warmup: int = 1) -> list[dict[str, Any]]:
    """`hargo train` of `toml` (written to work/<name>.toml, its run in work/<name>); the
    metrics records after the first `warmup` steps. SystemExit with the run's last lines when
    it fails."""
    root = work / name
    job = root.with_suffix(".toml")
    job.write_text(toml)
    done = subprocess.run([sys.executable, "-m", "hargo_hpc", "train", str(job)],
                          capture_output=True, text=True,
                          env=dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1",
                                   XDG_CACHE_HOME=str(work / "cache")))  # not ~/.cache
    if done.returncode != 0:
        raise SystemExit(f"{name} run failed (exit {done.returncode}):\n"
                         + "\n".join(done.stderr.splitlines()[-20:]))
    run = next(root.glob("*/metrics.jsonl"))
    return [json.loads(line) for line in run.read_text().splitlines()][warmup:]
