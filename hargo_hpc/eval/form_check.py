"""The form check that ends `hargo sft`: does the warm-started model answer in form?

RL learns only from contrast: when all G completions of a yes/no prompt are unparsable they
share one reward, every GRPO-family advantage of the group is 0, and the step learns nothing
from it. So the warm start must first teach the form. After `hargo sft`, `sft.check_examples`
held-out examples of each task (the split training never drew) are answered by the SFT export
and by the model it started from (`model.path`), as `hargo eval` does (the same budgets,
greedy text answers, GEMM kernels sampled and judged by the bench in process), and each task's
form metrics (`Task.form`: yes/no support, QA answer lengths, GEMM kernels compiled and ok) are
printed start → end with their 95 % intervals and the paired change. The evaluation's files go
to `<run dir>/sft/eval/`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from hargo_hpc.eval.evaluate import evaluate, resolve_target
from hargo_hpc.tasks.registry import task_class

Log = Callable[[str], object]


def check_form(sft_dir: Path, examples: int, *, log: Log = print) -> dict[str, Any]:
    """Evaluate the SFT run in `sft_dir` (`RunLayout.sft.root`) on at most `examples`
    held-out examples per task against its starting model; metrics.json's content."""
    target = resolve_target(str(sft_dir))
    return evaluate(target, limit=examples, local_workers=1,
                    handoff_dir=target.out / "handoff", log=log)


def form_lines(metrics: dict[str, Any]) -> list[str]:
    """One line per task and form metric: `form <task> <metric> <start> -> <end> [lo, hi]
    (n N), change +d [lo, hi]`, the change marked `*` when its interval excludes 0."""
    lines = []
    for name, values in metrics["tasks"].items():
        for key in task_class(name).form:
            if key not in values:
                continue
            start = (values.get("baseline") or {}).get(key)
            end, bounds = values.get(key), (values.get("intervals") or {}).get(key) or {}
            text = f"form  {name}  {key}  {_num(start)} -> {_num(end)}"
            if bounds.get("low") is not None:
                text += f" [{_num(bounds['low'])}, {_num(bounds['high'])}]"
            text += f" (n {values.get('n')})"
            change = (values.get("vs_baseline") or {}).get(key) or {}
            if change.get("value") is not None and change.get("low") is not None:
                mark = " *" if change["low"] > 0 or change["high"] < 0 else ""
                text += (f", change {change['value']:+.3f} [{change['low']:+.3f}, "
                         f"{change['high']:+.3f}]{mark}")
            lines.append(text)
    return lines


def _num(value: Any) -> str:
    return "—" if value is None else f"{value:.3f}" if isinstance(value, float) else str(value)
