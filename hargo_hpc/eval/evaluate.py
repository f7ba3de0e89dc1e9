"""`hargo eval MODEL_OR_RUN_DIR`: a model's answers on the held-out split, scored.

`resolve_target` says what is evaluated (a run's export on its own tasks and split, or a model
on the shipped samples), `plan_tasks` how many examples and samples of each task, `evaluate`
answers and scores them (GEMM through the bench) against a baseline, each share and mean with
its 95 % interval and the paired change, and `write_outputs` writes metrics.json, the
predictions and table.md atomically. What each choice is and why: docs/tasks.md, "`hargo eval`".
"""

from __future__ import annotations

import json
import math
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hargo_hpc.config import RESOLVED_NAME, ExperimentConfig, validate_config
from hargo_hpc.eval.intervals import Interval
from hargo_hpc.eval.plans import Answers, EvalError, Log, TaskPlan  # re-exported
from hargo_hpc.files import write_atomic
from hargo_hpc.handoff.settings import STEP_SPAN
from hargo_hpc.runs import RunLayout
from hargo_hpc.tasks.base import DataError, Example, Task
from hargo_hpc.tasks.registry import task_class, task_names
from hargo_hpc.train.checkpoint_hf import checkpoint_of, hf_of_checkpoint
from hargo_hpc.train.model.hub import BUILT_IN

if TYPE_CHECKING:
    from hargo_hpc.eval.compare import UnitMetrics

FORMAT = 2
DEFAULT_EVAL_FRACTION = 0.2
EVAL_STEP = STEP_SPAN - 1  # evaluation's handoff step: the last of a run's span
BASELINE_STEP = EVAL_STEP - 1  # the baseline's kernels, when it is evaluated here
HPCGPT_SAMPLING = {"temperature": 0.2, "top_p": 0.95}  # the HPC-GPT paper's decoding
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
    found = checkpoint_of(path)
    if found is not None and is_run_dir(found[0]):  # a checkpoint: its run's tasks and split
        run_dir, checkpoint = found
        config = read_run_config(run_dir)
        if tasks:
            config = _only_tasks(config, tasks, str(run_dir))
        try:
            model = hf_of_checkpoint(checkpoint, config)
        except ValueError as err:  # CheckpointError, or the run's model.path gone
            raise EvalError(str(err)) from None
        default_out = RunLayout(run_dir).eval.with_name(f"eval-{checkpoint.name}")
        return Target(str(model), config, Path(out) if out else default_out, run_dir=run_dir,
                      baseline=config.model.path, method=config.algorithm.name,
                      seed=config.run.seed)
    if path_or_name in BUILT_IN or is_model_dir(path):
        names = list(tasks or text_tasks())
        config = validate_config({"data": {"tasks": [{"name": n} for n in names],
                                           "eval_fraction": DEFAULT_EVAL_FRACTION}})
        return Target(path_or_name, config, Path(out) if out else Path("eval"))
    raise EvalError(f"{path_or_name}: neither a run directory (no {RESOLVED_NAME}), a run's "
                    "checkpoint, a model directory (no config.json), nor 'tiny' or 'smollm2'")


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
    if path_or_name in BUILT_IN or is_model_dir(path):
        return path_or_name
    raise EvalError(f"--baseline {path_or_name}: neither a run directory nor a model directory")


# ---------------------------------------------------------------- the examples


def eval_size(config: ExperimentConfig, name: str, limit: int | None = None) -> int | None:
    """How many held-out examples of task `name` are evaluated at most: the smallest of the
    caps that are set (not 0): `limit` (`-n`), `eval.max_examples`, and the TaskSpec's
    `eval_examples`, else the task's default `Task.eval_examples`. None: all of them."""
    spec = config.data.spec(name)
    own = spec.eval_examples if spec.eval_examples is not None else (
        task_class(name).eval_examples)
    caps = [c for c in (limit, config.eval.max_examples, own) if c]
    return min(caps) if caps else None


def eval_examples(config: ExperimentConfig, split: str, limit: int | None,
                  log: Log) -> tuple[dict[str, Task], dict[str, list[Example]]]:
    """The tasks and each task's examples of `split` (eval: the held-out ones; train; all), at
    most `eval_size` per task (the first ones, in the split's order). A task with fewer
    held-out examples than its eval size is evaluated on those it has, and the log says so."""
    from hargo_hpc.tasks.data import load_tasks
    from hargo_hpc.tasks.registry import get_task
    from hargo_hpc.tasks.split import split_examples

    try:
        loaded = load_tasks(config.data.tasks, config.rewards, log=log)
        everything = [e for examples in loaded.values() for e in examples]
        train, held_out = split_examples(everything, config.data.eval_fractions(),
                                         config.split_seed())
    except (DataError, ValueError) as err:
        raise EvalError(str(err)) from None
    chosen = {"eval": held_out, "train": train, "all": everything}[split]
    tasks = {name: get_task(name, config.rewards) for name in loaded}
    by_task = {}
    for name in loaded:
        size = eval_size(config, name, limit)
        items = [e for e in chosen if e.task == name]
        if size is not None and len(items) < size and split == "eval" and not limit:
            log(f"task {name}: {len(items)} held-out examples, fewer than its eval size {size} "
                "(raise its eval_fraction or give it more data): its intervals are wider")
        by_task[name] = items[:size]
    empty = [name for name, items in by_task.items() if not items]
    if empty:
        raise EvalError(f"task {empty[0]}: no examples in the {split} split (data.eval_fraction "
                        f"= {config.data.eval_fraction}); use --split all or more data")
    return tasks, by_task


def plan_tasks(config: ExperimentConfig, examples: dict[str, list[Example]], *,
               sample: bool, stage: Any = None) -> dict[str, TaskPlan]:
    """Each task's `TaskPlan`: its generation budget (`config.generation_budget`, training's),
    `eval_samples` completions per example (the TaskSpec's, else `Task.eval_samples`); more
    than one are sampled at the rollout's temperature and top-p (training's distribution),
    one is greedy, or HPC-GPT's sampling with `sample`. `stage` (an SQD stage): a staged
    task's prompts state it and its requests forbid what it forbids."""
    from hargo_hpc.config import generation_budget

    plans = {}
    for name, items in examples.items():
        spec = config.data.spec(name)
        budget = generation_budget(spec, config.rollout)
        samples = spec.eval_samples or task_class(name).eval_samples
        if samples > 1:
            how: dict[str, Any] = {"do_sample": True, "temperature": config.rollout.temperature,
                                   "top_p": config.rollout.top_p}
        else:
            how = {"do_sample": sample, **(HPCGPT_SAMPLING if sample else {})}
        staged = stage if stage is not None and task_class(name).staged else None
        plans[name] = TaskPlan(items, samples, budget.max_new_tokens, budget.stop, **how,
                               stage=staged)
    return plans


def stage_named(config: ExperimentConfig, name: str | None) -> Any:
    """The SQD stage `name` of the config's schedule (`sqd.stages`); None for None. EvalError
    (one line naming the stages there are) for another name."""
    if name is None:
        return None
    for stage in config.sqd.stages:
        if stage.name == name:
            return stage
    raise EvalError(f"no SQD stage {name!r} in this run's sqd.stages (there are: "
                    f"{', '.join(s.name for s in config.sqd.stages)})")


# ---------------------------------------------------------------- answering


def example_seed(seed: int, example: Example) -> int:
    """The sampling seed of one held-out example: from the evaluation's seed (the split's,
    `config.split_seed`) and the example's task and id; its sample k then draws from
    `derive_seed(example_seed, k)` (`HFGenerateBackend.generate`'s `seeds`). Every (example,
    sample) is its own independent draw, reproducible; the baseline and the run answer an
    example's sample k from the same stream (common random numbers, which pair them)."""
    from hargo_hpc.train.rollout.generate import derive_seed

    return derive_seed(seed, example.task, example.id)


class Answerer:
    """One model, loaded once, answering tasks' prompts (templated as in training); sampled
    answers draw an independent stream per (example, sample) (`example_seed`)."""

    def __init__(self, model_path: str, config: ExperimentConfig, *, batch_size: int,
                 log: Log) -> None:
        from hargo_hpc.tasks.prompts import resolve_format
        from hargo_hpc.train.backend.distributed import job_device
        from hargo_hpc.train.model.models import load_policy
        from hargo_hpc.train.rollout.generate import HFGenerateBackend

        try:
            model, self.tokenizer = load_policy(
                model_path, dtype=config.model.dtype,
                trust_remote_code=config.model.trust_remote_code,
                cache_dir=config.model.cache_dir or None, revision=config.model.revision)
            self.format = resolve_format(config.data.prompt_format, self.tokenizer)
        except ValueError as err:
            raise EvalError(f"{model_path}: {err}") from None
        self.name, self.batch_size, self.log = model_path, batch_size, log
        self.seed = config.split_seed()
        self.backend = HFGenerateBackend(model.to(job_device()), self.tokenizer)

    def __call__(self, tasks: dict[str, Task], plans: dict[str, TaskPlan]
                 ) -> dict[str, list[str]]:
        """The completions of every row of each task's plan (`samples` per example)."""
        import torch

        from hargo_hpc.tasks.prompts import build_prompt
        from hargo_hpc.train.rollout.generate import SamplingParams

        out: dict[str, list[str]] = {}
        with torch.no_grad():
            for name, plan in plans.items():
                params = SamplingParams(
                    max_new_tokens=plan.max_new_tokens, stop=plan.stop,
                    do_sample=plan.do_sample, temperature=plan.temperature, top_p=plan.top_p)
                prompts = [build_prompt(plan.user_text(tasks[name], e), self.format,
                                        self.tokenizer) for e in plan.examples]  # fmt: skip
                seeds = [example_seed(self.seed, e) for e in plan.examples]
                per_call = max(1, self.batch_size // plan.samples)
                texts: list[str] = []
                for lo in range(0, len(prompts), per_call):
                    batch = prompts[lo:lo + per_call]
                    texts.extend(self.backend.generate(batch, plan.samples, params,
                                                       seeds[lo:lo + per_call]).texts)
                    self.log(f"{name}: {len(texts)}/{len(prompts) * plan.samples} answered by "
                             f"{self.name}")
                out[name] = texts
        return out


def bench_records(config: ExperimentConfig, tasks: dict[str, Task],
                  plans: dict[str, TaskPlan], texts: dict[str, list[str]],
                  handoff_dir: Path, local_workers: int, log: Log, step: int = EVAL_STEP
                  ) -> dict[str, list[dict[str, Any]]]:
    """The bench records of the remote tasks' completions (GEMM), through the handoff at
    `handoff_dir` under evaluation's own `step` (EVAL_STEP, or BASELINE_STEP for the
    baseline's: past any training step, plus the run's handoff.step_offset as in training),
    served by the workers on that handoff (a submission's bench array) or by `local_workers`
    started here."""
    from hargo_hpc.train.rollout.local_workers import LocalWorkers
    from hargo_hpc.train.rollout.rewards import RewardRouter

    remote = [name for name in plans if tasks[name].remote]
    if not remote:
        return {}
    rows = [e for name in remote for e in plans[name].rows]
    completions = [t for name in remote for t in texts[name]]
    forbidden = [f for name in remote for f in plans[name].forbidden()]
    workers = LocalWorkers(handoff_dir, local_workers, bench=config.bench,
                           handoff=config.handoff, log=log)
    router = RewardRouter(tasks, handoff_dir=handoff_dir, log=log, progress=False,
                          handoff_settings=config.handoff, liveness=workers.check)
    with workers:
        batch = router.score(step, rows, completions,
                             forbidden=forbidden if any(forbidden) else None)
    out: dict[str, list[dict[str, Any]]] = {}
    at = 0
    for name in remote:
        n = len(plans[name].rows)
        out[name] = [r or {"status": "infra_error"} for r in batch.records[at:at + n]]
        at += n
    return out


# ---------------------------------------------------------------- scoring


def row_rewards(task: Task, plan: TaskPlan, answers: Answers) -> list[float | None] | None:
    """Each row's reward: `Task.reward` of a text task (None for a row it does not score: a
    generic task's function may say so); None for a remote one (GEMM's metrics hold its mean
    reward)."""
    if task.remote:
        return None
    try:
        return [None if r is None else float(r)
                for r in task.reward(plan.rows, answers.texts[task.name])]
    except (DataError, ValueError) as err:
        raise EvalError(f"task {task.name}: reward: {err}") from None


def unit_metrics(task: Task, plan: TaskPlan, answers: Answers) -> UnitMetrics:
    """The task's metrics (and `reward_mean`) on the rows of any examples: what the
    bootstrap resamples (`eval.compare`)."""
    from hargo_hpc.eval.compare import unit_rows

    rows, predictions = plan.rows, answers.predictions(task)
    rewards = row_rewards(task, plan, answers)

    def of(idx: Any) -> dict[str, Any]:
        chosen = unit_rows(idx, plan.samples)
        try:
            values = dict(task.metrics([rows[i] for i in chosen],
                                       [predictions[i] for i in chosen]))
        except (DataError, ValueError) as err:
            raise EvalError(f"task {task.name}: {err}") from None
        if rewards is not None:
            scored = [r for r in (rewards[i] for i in chosen) if r is not None]
            values["reward_mean"] = sum(scored) / len(scored) if scored else 0.0
        return values

    return of


def distinct(texts: Sequence[str]) -> int:
    """How many different completions there are among `texts` (after stripping outer white
    space): next to n, it says how many independent programs or answers the rows hold."""
    return len({t.strip() for t in texts})


def score(tasks: dict[str, Task], plans: dict[str, TaskPlan], ours: Answers,
          theirs: Answers | None = None, *, seed: int = 0) -> dict[str, dict[str, Any]]:
    """Each task's metrics on all its examples (`n` examples, `rows` answers, `distinct`
    different answers among them), the 95 %
    interval of every share and mean (`intervals`), and with a baseline its values
    (`baseline`) and the paired change run − baseline (`vs_baseline`)."""
    from hargo_hpc.eval import compare

    out: dict[str, dict[str, Any]] = {}
    for name, plan in plans.items():
        task, n = tasks[name], len(plan.examples)
        everything = list(range(n))
        ours_of = unit_metrics(task, plan, ours)
        values = _finite(ours_of(everything))
        keys = compare.interval_keys(values, task.points)
        entry: dict[str, Any] = {**values, "n": n, "rows": len(plan.rows),
                                 "distinct": distinct(ours.texts[name]),
                                 "intervals": compare.as_json(
                                     compare.intervals(ours_of, n, keys, seed=seed))}
        if theirs is not None:
            theirs_of = unit_metrics(task, plan, theirs)
            entry["baseline"] = {**_finite(theirs_of(everything)),
                                 "distinct": distinct(theirs.texts[name])}
            entry["vs_baseline"] = compare.as_json(
                compare.paired(theirs_of, ours_of, n, keys, seed=seed))
        out[name] = entry
    return out


def winrates(tasks: dict[str, Task], plans: dict[str, TaskPlan], ours: Answers,
             theirs: Answers, judge_spec: str, *, seed: int = 0) -> dict[str, Any]:
    """WinRate of `ours` against `theirs` per text task and over all their pairs, each with
    its 95 % interval (`interval`: the baseline is beaten, or beats us, when it excludes
    0.5)."""
    from hargo_hpc.eval.intervals import bootstrap, winrate_metric
    from hargo_hpc.tasks.winrate import WinRate, make_judge, win_rate

    def with_interval(result: WinRate) -> dict[str, Any]:
        found = bootstrap(winrate_metric(result.outcomes), result.n, seed=seed)
        return {**result.as_dict(), "interval": found.to_json()}

    per_task: dict[str, Any] = {}
    outcomes: list[Any] = []
    for name, plan in plans.items():
        if tasks[name].remote:
            continue
        try:
            result = win_rate(plan.rows, ours.texts[name], theirs.texts[name],
                              make_judge(judge_spec, tasks[name]))
        except (DataError, ValueError) as err:
            raise EvalError(f"task {name}: WinRate: {err}") from None
        per_task[name] = with_interval(result)
        outcomes.extend(result.outcomes)
    return {"overall": with_interval(WinRate(tuple(outcomes))), "tasks": per_task}


def _finite(values: dict[str, Any]) -> dict[str, Any]:
    """JSON-safe: NaN and inf become None."""
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v)
            for k, v in values.items()}


# ---------------------------------------------------------------- putting it together


def answer(model: str, target: Target, tasks: dict[str, Task], plans: dict[str, TaskPlan], *,
           handoff_dir: Path, workers: int, batch_size: int, log: Log,
           step: int = EVAL_STEP) -> Answers:
    """`model`'s answers to every plan, the remote tasks' scored by the bench (first: its
    workers are waiting)."""
    config = target.config
    answerer = Answerer(model, config, batch_size=batch_size, log=log)
    remote = {n: p for n, p in plans.items() if tasks[n].remote}
    text = {n: p for n, p in plans.items() if not tasks[n].remote}
    found = Answers(answerer(tasks, remote))
    found.records = bench_records(config, tasks, remote, found.texts, handoff_dir, workers,
                                  log, step=step)
    found.texts.update(answerer(tasks, text))
    return found


def evaluate(target: Target, *, split: str = "eval", limit: int | None = None,
             baseline: str | None = None, judge: str = "auto", sample: bool = False,
             batch_size: int = 8, local_workers: int | None = None,
             handoff_dir: Path | None = None, stage: str | None = None,
             log: Log = print) -> dict[str, Any]:
    """Answer, score, compare with the baseline (None: `target.baseline`; '' none) and write
    the outputs (`write_outputs`); returns metrics.json's content. `local_workers` (None: the
    config's handoff.local_workers) bench workers are started for GEMM, on `handoff_dir`
    (None: the run's handoff, or `<out>/handoff` for a bare model or under a stage). The
    baseline's
    answers come from its cache when another evaluation computed them
    (`baseline_answers.cached_answers`). `stage`: the name of an SQD stage of the run's
    schedule whose prompt GEMM is asked under (its requests forbid what it forbids; the
    metrics add forbidden_share and on_stage_share); None: the plain prompt."""
    from hargo_hpc.eval.baseline_answers import cached_answers

    config = target.config
    spec = stage_named(config, stage)
    tasks, examples = eval_examples(config, split, limit, log)
    plans = plan_tasks(config, examples, sample=sample, stage=spec)
    own = handoff_dir is None and (target.run_dir is None or spec is not None)
    if handoff_dir is None:  # a stage's evaluation has its own: its steps are the plain one's
        handoff_dir = target.out / "handoff" if own else config.handoff_dir()
    workers = config.handoff.local_workers if local_workers is None else local_workers
    if own and local_workers is None:
        workers = max(workers, 1)  # no submission's bench array serves this handoff
    common = {"handoff_dir": handoff_dir, "workers": workers, "batch_size": batch_size,
              "log": log}
    ours = answer(target.model, target, tasks, plans, **common)
    base_model = baseline if baseline is not None else target.baseline
    theirs = None
    if base_model:
        theirs = cached_answers(
            base_model, config, plans, split=split, log=log,
            compute=lambda: answer(base_model, target, tasks, plans, step=BASELINE_STEP,
                                   **common))
    seed = config.split_seed()  # the bootstrap's, as the split's and the sampling's
    metrics: dict[str, Any] = {
        "format": FORMAT, "model": target.model,
        "run_dir": None if target.run_dir is None else str(target.run_dir),
        "method": target.method, "seed": config.run.seed, "split": split,
        "baseline": base_model or None,
        "decoding": {name: plan.decoding() for name, plan in plans.items()},
        "tasks": score(tasks, plans, ours, theirs, seed=seed),
        "winrate": None,
    }
    if stage is not None:
        metrics["stage"] = stage
    if theirs is not None and any(not tasks[n].remote for n in plans):
        metrics["winrate"] = {"baseline": base_model, "judge": judge,
                              **winrates(tasks, plans, ours, theirs, judge, seed=seed)}
    write_outputs(target.out, metrics, tasks, plans, ours, theirs)
    return metrics


def write_outputs(out: Path, metrics: dict[str, Any], tasks: dict[str, Task],
                  plans: dict[str, TaskPlan], ours: Answers, theirs: Answers | None) -> None:
    """metrics.json, predictions/<task>.jsonl (and .baseline.jsonl), table.md, atomically."""
    predictions = out / "predictions"
    predictions.mkdir(parents=True, exist_ok=True)
    for name, plan in plans.items():
        for answers, suffix in ((ours, ""), (theirs, ".baseline")):
            if answers is None:
                continue
            write_atomic(predictions / f"{name}{suffix}.jsonl",
                         _jsonl(plan, answers, row_rewards(tasks[name], plan, answers)))
    write_atomic(out / "table.md", format_table(metrics))
    write_atomic(out / RunLayout.EVAL_METRICS,
                 json.dumps(metrics, indent=1, allow_nan=False) + "\n")


def _jsonl(plan: TaskPlan, answers: Answers,
           rewards: Sequence[float | None] | None) -> str:
    name = plan.examples[0].task if plan.examples else ""
    records = answers.records.get(name)
    lines = []
    for i, (e, text) in enumerate(zip(plan.rows, answers.texts[name], strict=True)):
        row: dict[str, Any] = {"id": e.id, "sample": i % plan.samples,
                               "instruction": e.instruction, "input": e.input,
                               "output": e.output, "prediction": text}
        if rewards is not None:
            row["reward"] = rewards[i]
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


def with_interval(values: dict[str, Any], key: str) -> str:
    """`0.575 [0.430, 0.710]` (the value and its interval), `0.575` without one, `—` for
    none; a change against the baseline follows as `Δ +0.025 [−0.175, +0.225]`, marked `*`
    when its interval excludes 0."""
    shown = _fmt(values.get(key))
    found = (values.get("intervals") or {}).get(key)
    if found and found.get("low") is not None:
        shown += f" [{_fmt(found['low'])}, {_fmt(found['high'])}]"
    change = (values.get("vs_baseline") or {}).get(key)
    if change and change.get("value") is not None:
        shown += f", Δ {Interval.from_json(change).change_text('+.4g')}"
    return shown


def format_table(metrics: dict[str, Any]) -> str:
    """The markdown table of one evaluation: task, examples, its headline metrics with their
    intervals and changes against the baseline, WinRate."""
    rates = (metrics.get("winrate") or {}).get("tasks", {})
    lines = [f"Evaluation of {metrics['model']} ({metrics['split']} split); 95 % intervals "
             "over the examples; Δ = this model − the baseline on the same examples, * where "
             "its interval excludes 0", "",
             "| task | n | metrics | WinRate vs baseline |", "|---|---|---|---|"]
    for name, values in metrics["tasks"].items():
        keys = headline(name) or tuple(k for k, v in values.items()
                                       if isinstance(v, float))[:3]
        keys = (*keys, *(("reward_mean",) if "reward_mean" in values
                         and "reward_mean" not in keys else ()))
        shown = "; ".join(f"{k} {with_interval(values, k)}" for k in keys)
        rate = rates.get(name)
        lines.append(f"| {name} | {values.get('n', '')} | {shown} | "
                     f"{'' if rate is None else _rate_text(rate)} |")
    overall = (metrics.get("winrate") or {}).get("overall")
    if overall:
        lines += ["", f"WinRate vs {metrics['winrate']['baseline']} ({metrics['winrate']['judge']}"
                      f" judge): {_rate_text(overall)} over {overall['n']} pairs "
                      f"({overall['wins']} wins, {overall['ties']} ties, "
                      f"{overall['losses']} losses)"]
    return "\n".join(lines) + "\n"


def _rate_text(rate: dict[str, Any]) -> str:
    """`48.75 % [41.2, 56.3]`, marked `*` when the interval excludes 50 %."""
    shown = f"{100 * rate['win_rate']:.2f} %"
    found = rate.get("interval") or {}
    if found.get("low") is not None:
        low, high = found["low"], found["high"]
        shown += f" [{100 * low:.1f}, {100 * high:.1f}]" + (
            " *" if low > 0.5 or high < 0.5 else "")
    return shown


def _fmt(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)
