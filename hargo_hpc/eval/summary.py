"""`hargo eval run RUN_DIR`: the summary of a finished training run, the job `hargo submit`
chains after training.

For now it reads what the trainer wrote (`finished.json`, `metrics.jsonl`) and writes
`<run dir>/eval/summary.json`: the steps, the export, and the last step's reward and per-task
metrics (`tasks/<name>/...`), next to the first step's for the change. Scoring the export on
the held-out split replaces it (the evaluation issue); the job and its place in the chain stay.
Reads JSON only: no torch on the node that runs it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hargo_hpc.files import read_jsonl, write_atomic

SUMMARY = Path("eval") / "summary.json"
HEADLINE = ("reward", "reward_std", "completions/mean_length")


class EvalError(ValueError):
    """The run cannot be summarised (one line naming the file)."""


def summarise(run_dir: str | Path) -> dict[str, Any]:
    """The summary of the finished run in `run_dir` (module docstring); EvalError when the
    run has not finished or its metrics are missing."""
    root = Path(run_dir)
    finished = root / "finished.json"
    try:
        done = json.loads(finished.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise EvalError(f"{finished}: no such file; the run in {root} has not finished") from None
    except (OSError, json.JSONDecodeError) as err:
        raise EvalError(f"{finished}: cannot read it: {err}") from None
    metrics = root / "metrics.jsonl"
    if not metrics.is_file():
        raise EvalError(f"{metrics}: no such file")
    records = read_jsonl(metrics)
    if not records:
        raise EvalError(f"{metrics}: no steps recorded")
    first, last = records[0], records[-1]

    def pick(record: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in record.items() if k in HEADLINE or k.startswith("tasks/")}

    summary = {"run_dir": str(root), "steps": len(records), "export": done.get("export"),
               "checkpoint": done.get("checkpoint"), "first_step": pick(first),
               "last_step": pick(last)}
    (root / SUMMARY).parent.mkdir(exist_ok=True)
    write_atomic(root / SUMMARY, json.dumps(summary, indent=1) + "\n")
    return summary


def format_summary(summary: dict[str, Any]) -> str:
    first, last = summary["first_step"], summary["last_step"]
    lines = [f"{summary['run_dir']}: {summary['steps']} steps, export {summary['export']}"]
    for key in sorted(last):
        now, then = last[key], first.get(key)
        if isinstance(now, (int, float)):
            change = f"  (step 1: {then:.4g})" if isinstance(then, (int, float)) else ""
            lines.append(f"  {key:<40} {now:.4g}{change}")
    return "\n".join(lines)
