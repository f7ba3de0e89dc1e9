"""`hargo eval MODEL_OR_RUN_DIR`: a model's answers on the held-out split, scored.

What is evaluated (`resolve_target`):

- a **run directory** (it holds the trainer's `config.toml`): its HF export (`export/`, or
  `sft/export/` for an SFT-only run), on the tasks and data of its config, the held-out split
  of its `data.eval_fraction` and `run.seed` (the examples training never drew), scored with
  its reward settings; GEMM through its handoff and the bench like training. The baseline for
  WinRate is the model the run started from (`model.path`: the SFT export when the run was
  warm-started by `hargo submit`'s SFT job). Outputs go to `<run dir>/eval/`.
- a **model directory** (an HF checkpoint, or `tiny` / `smollm2`): the four text tasks on the
  shipped samples (or `--tasks`), split with seed 0 and eval fraction 0.2; outputs to `--out`.

Answers are greedy by default (`do_sample = False`), `rollout.max_new_tokens` long, one per
prompt, in batches (`batch_size`); `--sample` uses HPC-GPT's sampling settings (temperature
0.2, top-p 0.95). Each task's metrics are its own (`Task.metrics`, issue G): data-race F1 and
adjusted F1, MLPerf exact match / token F1 / share over 40 characters, PLP similarity, GEMM's
share ok and best GFLOPS / share of the in-run reference. WinRate (`tasks.winrate`) pools the
text tasks' pairs, each judged in both orders.

Written (`write_outputs`): `metrics.json` (format 1, read by `hargo report`), one predictions
file per task as JSONL in the format `hargo eval score` reads (`output`, `prediction`,
`instruction`, `input`; GEMM lines also carry the bench `record`), the baseline's next to it
(`<task>.baseline.jsonl`), and `table.md`. Every file is written atomically.
"""

from __future__ import annotations

import json
import math
import tomllib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hargo_hpc.config import RESOLVED_NAME, ExperimentConfig, validate_config
from hargo_hpc.errors import HargoError
from hargo_hpc.files import write_atomic
from hargo_hpc.handoff.settings import STEP_SPAN
from hargo_hpc.runs import RunLayout
from hargo_hpc.tasks.base import DataError, Example, Task
from hargo_hpc.tasks.registry import task_class, task_names

FORMAT = 1
DEFAULT_EVAL_FRACTION = 0.2
EVAL_STEP = STEP_SPAN - 1  # evaluation's handoff step: the last of a run's span
HPCGPT_SAMPLING = {"temperature": 0.2, "top_p": 0.95}  # the HPC-GPT paper's decoding
Log = Callable[[str], object]


class EvalError(HargoError, ValueError):
    """The evaluation cannot run (one line naming the path or option)."""


@dataclass
class Target:
    """What is evaluated: the model directory (or name), the config its tasks come from, where
    the outputs go, and the default baseline."""

    model: str
    config: ExperimentConfig
    out: Path
    run_dir: Path | None = None
    baseline: str | None = None
    method: str | None = None
    seed: int | None = None


@dataclass
class Answers:
    """One model's answers per task, in the order of the examples."""

    texts: dict[str, list[str]] = field(default_factory=dict)
    records: dict[str, list[dict[str, Any] | None]] = field(default_factory=dict)


# ---------------------------------------------------------------- what is evaluated


def is_run_dir(path: Path) -> bool:
    return (path / RESOLVED_NAME).is_file()


def is_model_dir(path: Path) -> bool:
    return (path / "config.json").is_file()


def run_export(run_dir: Path) -> Path:
    """The model a run produced: `export/`, else (an SFT-only run) `sft/export/`."""
    layout = RunLayout(run_dir)
    for candidate in (layout.export, layout.sft.export):
        if is_model_dir(candidate):
            return candidate
    raise EvalError(f"{run_dir}: the run has no exported model yet (no export/config.json): "
                    "has its training finished?")


def read_run_config(run_dir: Path) -> ExperimentConfig:
    path = run_dir / RESOLVED_NAME
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as err:
        raise EvalError(f"{path}: cannot read the run's config: {err}") from None
    try:
        return validate_config(raw, str(path))
    except ValueError as err:
        raise EvalError(str(err)) from None


def text_tasks() -> list[str]:
    """The registered tasks rewarded in process (not `Task.remote`), in registry order: what a
    bare model is evaluated on by default."""
    return [name for name in task_names() if not task_class(name).remote]


def resolve_target(path_or_name: str, *, out: str | None = None,
                   tasks: Sequence[str] | None = None) -> Target:
    """The `Target` of MODEL_OR_RUN_DIR (module docstring); EvalError for anything else."""
    path = Path(path_or_name)
    if is_run_dir(path):
        config = read_run_config(path)
        if tasks:
            config = _only_tasks(config, tasks, str(path))
        return Target(str(run_export(path)), config, Path(out) if out else RunLayout(path).eval,
                      run_dir=path, baseline=config.model.path,
                      method=config.algorithm.name, seed=config.run.seed)
    if path_or_name in ("tiny", "smollm2") or is_model_dir(path):
        names = list(tasks or text_tasks())
        config = validate_config({"data": {"tasks": [{"name": n} for n in names],
                                           "eval_fraction": DEFAULT_EVAL_FRACTION}})
        return Target(path_or_name, config, Path(out) if out else Path("eval"))
    raise EvalError(f"{path_or_name}: neither a run directory (no {RESOLVED_NAME}) nor a model "
                    "directory (no config.json), nor 'tiny' or 'smollm2'")


def _only_tasks(config: ExperimentConfig, names: Sequence[str], where: str) -> ExperimentConfig:
    known = [spec.name for spec in config.data.tasks]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise EvalError(f"{where}: the run has no task {unknown[0]!r} (its tasks: "
                        f"{', '.join(known)})")
    raw = config.to_dict()
    raw["data"]["tasks"] = [t for t in raw["data"]["tasks"] if t["name"] in names]
    return validate_config(raw)


def baseline_target(path_or_name: str, evaluated: Target) -> str:
    """The model directory (or name) of `--baseline`; a run directory gives its export. A
    baseline run whose tasks differ from the evaluated ones is refused (EvalError)."""
    path = Path(path_or_name)
    if is_run_dir(path):
        theirs = {spec.name for spec in read_run_config(path).data.tasks}
        ours = {spec.name for spec in evaluated.config.data.tasks}
        if not ours <= theirs:
            missing = sorted(ours - theirs)
            raise EvalError(f"--baseline {path}: its run has no task {missing[0]!r}; a "
                            "baseline is scored on the same examples")
        return str(run_export(path))
    if path_or_name in ("tiny", "smollm2") or is_model_dir(path):
        return path_or_name
    raise EvalError(f"--baseline {path_or_name}: neither a run directory nor a model directory")


# ---------------------------------------------------------------- the examples


def eval_examples(config: ExperimentConfig, split: str, limit: int | None,
                  log: Log) -> tuple[dict[str, Task], dict[str, list[Example]]]:
    """The tasks and each task's examples of `split` (eval: the held-out ones; train; all), at
    most `limit` per task (the first ones, in the split's order)."""
    from hargo_hpc.tasks.data import load_tasks
    from hargo_hpc.tasks.registry import get_task
    from hargo_hpc.tasks.split import split_examples

    try:
        loaded = load_tasks(config.data.tasks, config.rewards, log=log)
        everything = [e for examples in loaded.values() for e in examples]
        train, held_out = split_examples(everything, config.data.eval_fractions(),
                                         config.run.seed)
    except (DataError, ValueError) as err:
        raise EvalError(str(err)) from None
    chosen = {"eval": held_out, "train": train, "all": everything}[split]
    tasks = {name: get_task(name, config.rewards) for name in loaded}
    by_task = {name: [e for e in chosen if e.task == name][:limit] for name in loaded}
    empty = [name for name, items in by_task.items() if not items]
    if empty:
        raise EvalError(f"task {empty[0]}: no examples in the {split} split (data.eval_fraction "
                        f"= {config.data.eval_fraction}); use --split all or more data")
    return tasks, by_task


# ---------------------------------------------------------------- answering


class Answerer:
    """One model, loaded once, answering tasks' prompts (templated as in training)."""

    def __init__(self, model_path: str, config: ExperimentConfig, *, sample: bool,
                 batch_size: int, log: Log) -> None:
        from hargo_hpc.tasks.prompts import resolve_format
        from hargo_hpc.train.model.models import load_policy
        from hargo_hpc.train.rollout.generate import HFGenerateBackend, SamplingParams

        try:
            model, self.tokenizer = load_policy(
                model_path, dtype=config.model.dtype,
                trust_remote_code=config.model.trust_remote_code,
                cache_dir=config.model.cache_dir or None)
            self.format = resolve_format(config.data.prompt_format, self.tokenizer)
        except ValueError as err:
            raise EvalError(f"{model_path}: {err}") from None
        self.name, self.batch_size, self.log = model_path, batch_size, log
        self.backend = HFGenerateBackend(model, self.tokenizer)
        self.params = SamplingParams(max_new_tokens=config.rollout.max_new_tokens,
                                     stop=tuple(config.rollout.stop), seed=config.run.seed,
                                     do_sample=sample, **(HPCGPT_SAMPLING if sample else {}))

    def __call__(self, tasks: dict[str, Task], examples: dict[str, list[Example]]
                 ) -> dict[str, list[str]]:
        """The completion of every example's prompt, per task."""
        import torch

        from hargo_hpc.tasks.prompts import build_prompt

        out: dict[str, list[str]] = {}
        with torch.no_grad():
            for name, items in examples.items():
                prompts = [build_prompt(tasks[name].user_text(e), self.format, self.tokenizer)
                           for e in items]
                texts: list[str] = []
                for lo in range(0, len(prompts), self.batch_size):
                    batch = prompts[lo:lo + self.batch_size]
                    texts.extend(self.backend.generate(batch, 1, self.params).texts)
                    self.log(f"{name}: {len(texts)}/{len(prompts)} answered by {self.name}")
                out[name] = texts
        return out


def bench_records(config: ExperimentConfig, tasks: dict[str, Task],
                  examples: dict[str, list[Example]], texts: dict[str, list[str]],
                  handoff_dir: Path, local_workers: int, log: Log
                  ) -> dict[str, list[dict[str, Any]]]:
    """The bench records of the remote tasks' completions (GEMM), through the handoff at
    `handoff_dir` under evaluation's own step (EVAL_STEP, past any training step, plus the
    run's handoff.step_offset as in training), served by the workers on that handoff (a
    submission's bench array) or by `local_workers` started here."""
    from hargo_hpc.train.rollout.local_workers import LocalWorkers
    from hargo_hpc.train.rollout.rewards import RewardRouter

    remote = [name for name in examples if tasks[name].remote]
    if not remote:
        return {}
    rows = [e for name in remote for e in examples[name]]
    completions = [t for name in remote for t in texts[name]]
    workers = LocalWorkers(handoff_dir, local_workers, bench=config.bench,
                           handoff=config.handoff, log=log)
    router = RewardRouter(tasks, handoff_dir=handoff_dir, log=log, progress=False,
                          handoff_settings=config.handoff, liveness=workers.check)
    with workers:
        batch = router.score(EVAL_STEP, rows, completions)
    out: dict[str, list[dict[str, Any]]] = {}
    at = 0
    for name in remote:
        n = len(examples[name])
        out[name] = [r or {"status": "infra_error"} for r in batch.records[at:at + n]]
        at += n
    return out


# ---------------------------------------------------------------- scoring


def score(tasks: dict[str, Task], examples: dict[str, list[Example]],
          answers: Answers) -> dict[str, dict[str, Any]]:
    """Each task's metrics (`Task.metrics`) of the answers; GEMM's over its bench records."""
    out: dict[str, dict[str, Any]] = {}
    for name, items in examples.items():
        task = tasks[name]
        predictions: list[Any] = (answers.records[name] if task.remote
                                  else answers.texts[name])
        try:
            out[name] = _finite({"n": len(items), **task.metrics(items, predictions)})
        except (DataError, ValueError) as err:
            raise EvalError(f"task {name}: {err}") from None
    return out


def winrates(tasks: dict[str, Task], examples: dict[str, list[Example]], ours: Answers,
             theirs: Answers, judge_spec: str) -> dict[str, Any]:
    """WinRate of `ours` against `theirs` per text task and over all their pairs."""
    from hargo_hpc.tasks.winrate import WinRate, make_judge, win_rate

    per_task: dict[str, Any] = {}
    outcomes: list[Any] = []
    for name, items in examples.items():
        if tasks[name].remote:
            continue
        try:
            result = win_rate(items, ours.texts[name], theirs.texts[name],
                              make_judge(judge_spec, tasks[name]))
        except (DataError, ValueError) as err:
            raise EvalError(f"task {name}: WinRate: {err}") from None
        per_task[name] = result.as_dict()
        outcomes.extend(result.outcomes)
    return {"overall": WinRate(tuple(outcomes)).as_dict(), "tasks": per_task}


def _finite(values: dict[str, Any]) -> dict[str, Any]:
    """JSON-safe: NaN and inf become None."""
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v)
            for k, v in values.items()}


# ---------------------------------------------------------------- putting it together


def evaluate(target: Target, *, split: str = "eval", limit: int | None = None,
             baseline: str | None = None, judge: str = "auto", sample: bool = False,
             batch_size: int = 8, local_workers: int | None = None,
             log: Log = print) -> dict[str, Any]:
    """Answer, score, compare with the baseline (None: `target.baseline`; '' none) and write
    the outputs (`write_outputs`); returns metrics.json's content. `local_workers` (None: the
    config's handoff.local_workers) bench workers are started for GEMM."""
    config = target.config
    tasks, examples = eval_examples(config, split, limit, log)
    handoff_dir = config.handoff_dir() if target.run_dir is not None else target.out / "handoff"
    workers = config.handoff.local_workers if local_workers is None else local_workers
    if target.run_dir is None and local_workers is None:
        workers = max(workers, 1)  # a bare model has no submission's bench array
    remote = {n: items for n, items in examples.items() if tasks[n].remote}
    text = {n: items for n, items in examples.items() if not tasks[n].remote}
    answerer = Answerer(target.model, config, sample=sample, batch_size=batch_size, log=log)
    ours = Answers(answerer(tasks, remote))  # the bench's first: its workers are waiting
    ours.records = bench_records(config, tasks, remote, ours.texts, handoff_dir, workers, log)
    ours.texts.update(answerer(tasks, text))
    base_model = baseline if baseline is not None else target.baseline
    theirs = None
    if base_model and text:
        theirs = Answers(Answerer(base_model, config, sample=sample, batch_size=batch_size,
                                  log=log)(tasks, text))
    metrics: dict[str, Any] = {
        "format": FORMAT, "model": target.model,
        "run_dir": None if target.run_dir is None else str(target.run_dir),
        "method": target.method, "seed": target.seed, "split": split,
        "decoding": {"do_sample": sample, "max_new_tokens": config.rollout.max_new_tokens,
                     **(HPCGPT_SAMPLING if sample else {})},
        "tasks": score(tasks, examples, ours),
        "winrate": None,
    }
    if theirs is not None:
        metrics["winrate"] = {"baseline": base_model, "judge": judge,
                              **winrates(tasks, examples, ours, theirs, judge)}
    write_outputs(target.out, metrics, tasks, examples, ours, theirs)
    return metrics


def write_outputs(out: Path, metrics: dict[str, Any], tasks: dict[str, Task],
                  examples: dict[str, list[Example]], ours: Answers,
                  theirs: Answers | None) -> None:
    """metrics.json, predictions/<task>.jsonl (and .baseline.jsonl), table.md, atomically."""
    predictions = out / "predictions"
    predictions.mkdir(parents=True, exist_ok=True)
    for name, items in examples.items():
        write_atomic(predictions / f"{name}.jsonl",
                     _jsonl(items, ours.texts[name], ours.records.get(name)))
        if theirs is not None and name in theirs.texts:
            write_atomic(predictions / f"{name}.baseline.jsonl",
                         _jsonl(items, theirs.texts[name], None))
    write_atomic(out / "table.md", format_table(metrics))
    write_atomic(out / RunLayout.EVAL_METRICS,
                 json.dumps(metrics, indent=1, allow_nan=False) + "\n")


def _jsonl(items: Sequence[Example], texts: Sequence[str],
           records: Sequence[dict[str, Any] | None] | None) -> str:
    lines = []
    for i, (e, text) in enumerate(zip(items, texts, strict=True)):
        row: dict[str, Any] = {"id": e.id, "instruction": e.instruction, "input": e.input,
                               "output": e.output, "prediction": text}
        if records is not None:
            row["record"] = records[i]
        lines.append(json.dumps(row, ensure_ascii=False))
    return "".join(line + "\n" for line in lines)


def headline(name: str) -> tuple[str, ...]:
    """The metrics task `name`'s table row shows (`Task.headline`); () for a task that is not
    registered or names none."""
    try:
        return task_class(name).headline
    except ValueError:
        return ()


def format_table(metrics: dict[str, Any]) -> str:
    """The markdown table of one evaluation: task, examples, its headline metrics, WinRate."""
    rates = (metrics.get("winrate") or {}).get("tasks", {})
    lines = [f"Evaluation of {metrics['model']} ({metrics['split']} split)", "",
             "| task | n | metrics | WinRate vs baseline |", "|---|---|---|---|"]
    for name, values in metrics["tasks"].items():
        keys = headline(name) or tuple(k for k, v in values.items()
                                       if isinstance(v, int | float))[:3]
        shown = ", ".join(f"{k} {_fmt(values.get(k))}" for k in keys)
        rate = rates.get(name)
        lines.append(f"| {name} | {values.get('n', '')} | {shown} | "
                     f"{'' if rate is None else _fmt(100 * rate['win_rate']) + ' %'} |")
    overall = (metrics.get("winrate") or {}).get("overall")
    if overall:
        lines += ["", f"WinRate vs {metrics['winrate']['baseline']} ({metrics['winrate']['judge']}"
                      f" judge): {100 * overall['win_rate']:.2f} % over {overall['n']} pairs "
                      f"({overall['wins']} wins, {overall['ties']} ties, "
                      f"{overall['losses']} losses)"]
    return "\n".join(lines) + "\n"


def _fmt(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)
