"""The form check that ends `hargo sft`: does the warm-started model answer in form?

RL learns only from contrast: when all G completions of a yes/no prompt are unparsable they
share one reward, every GRPO-family advantage of the group is 0, and the step learns nothing
from it. So the warm start must first teach the form. After `hargo sft`, `sft.check_examples`
held-out examples of each task (the split training never drew) are answered by the SFT export
and by the model it started from (`model.path`), as `hargo eval` does (the same budgets,
greedy text answers, GEMM kernels sampled and judged by the bench in process), and each task's
form metrics (`Task.form`: yes/no support, QA answer lengths, GEMM kernels compiled and ok) are
printed start → end with their 95 % intervals and the paired change. The evaluation's files go
to `<run dir>/sft/eval/`. When the warm start was taught SQD's stage prompts
(`sft.stage_prompts`), GEMM is checked again under each stage prompt (`STAGE_FORM`: compiled,
ok, using a forbidden technique, ok on its stage), into `<run dir>/sft/eval-<stage>/`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hargo_hpc.eval.evaluate import evaluate, resolve_target
from hargo_hpc.eval.plans import Log
from hargo_hpc.eval.summary import change_lines
from hargo_hpc.tasks.registry import task_class

STAGE_FORM = ("compiled_share", "ok_share", "forbidden_share", "on_stage_share")


def check_form(sft_dir: Path, examples: int, *, stage: str | None = None,
               log: Log = print) -> dict[str, Any]:
    """Evaluate the SFT run in `sft_dir` (`RunLayout.sft.root`) on at most `examples`
    held-out examples per task against its starting model; metrics.json's content. `stage`:
    GEMM only, under that SQD stage's prompt (`evaluate`'s `stage`)."""
    target = resolve_target(str(sft_dir))
    if stage is not None:
        staged = [spec.name for spec in target.config.data.tasks if task_class(spec.name).staged]
        target = resolve_target(str(sft_dir), out=str(sft_dir / f"eval-{stage}"), tasks=staged)
    return evaluate(target, limit=examples, local_workers=1, stage=stage,
                    handoff_dir=target.out / "handoff", log=log)


def stage_names(sft_dir: Path) -> list[str]:
    """The SQD stages the warm start in `sft_dir` was taught (`sft.stage_prompts`, default:
    when sqd.enabled) other than an open one: those the form check asks again; [] when it was
    taught none or has no staged task."""
    config = resolve_target(str(sft_dir)).config
    taught = config.sft.stage_prompts
    if not (config.sqd.enabled if taught is None else taught):
        return []
    if not any(task_class(spec.name).staged for spec in config.data.tasks):
        return []
    return [s.name for s in config.sqd.stages if not s.open]


def form_lines(metrics: dict[str, Any], stage: str | None = None) -> list[str]:
    """One line per task and form metric (`Task.form`; under a stage `STAGE_FORM`), start ->
    end (`change_lines`)."""
    if stage is None:
        return change_lines(metrics, lambda name: task_class(name).form, prefix="form  ")
    return change_lines(metrics, lambda name: STAGE_FORM, prefix=f"form@{stage}  ")


def check_generalisation(run_dir: Path, examples: int, *, log: Log = print
                         ) -> list[dict[str, Any]]:
    """The model of the run in `run_dir` (its export; an SFT run's `sft/export`) answers at
    most `examples` training and held-out examples of each text task (greedy, as `hargo eval`
    does; no baseline); `summary.generalisation_gap` of the two. Its files go to
    `<run dir>/eval-train/` and `<run dir>/eval-held-out/`. A task whose held-out value lies
    below its training value beyond the interval is `memorised`."""
    from hargo_hpc.eval.evaluate import text_tasks
    from hargo_hpc.eval.summary import generalisation_gap

    names = [n for n in text_tasks()
             if n in {spec.name for spec in resolve_target(str(run_dir)).config.data.tasks}]
    if not names:
        return []
    found = {}
    for split, directory in (("train", "eval-train"), ("eval", "eval-held-out")):
        target = resolve_target(str(run_dir), out=str(run_dir / directory), tasks=names)
        found[split] = evaluate(target, split=split, limit=examples, baseline="", log=log)
    return generalisation_gap(found["train"], found["eval"])
