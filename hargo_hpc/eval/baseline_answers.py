"""The baseline's answers, computed once and reused by every evaluation that shares them.

A submission's runs all start from one model (the shared SFT export), and each run's
evaluation compares with it on the same held-out examples, decoded the same way: its answers
(and its kernels' bench records) are the same for every run. They are kept in the baseline's
own run directory, `<run>/baseline-answers/<key>/answers.json`, when the baseline is a run's
export (`<run>/export`, with `<run>/config.toml` beside it: what `hargo submit`'s SFT job
writes); another baseline (a checkpoint directory, `smollm2`) is answered by each evaluation.

The key is the SHA-256 of what the answers depend on: the model's directory and the size and
mtime of each file in it, the prompt format, the seed, each task's example ids and decoding
(`TaskPlan.decoding`), the split, the rewards settings and, with a remote task, the bench
settings. The first evaluation to come takes an exclusive lock (`fcntl.flock`) on
`<key>.lock`, computes and writes the answers atomically; the others wait on the lock, then
read them. An unreadable cache entry is computed again.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hargo_hpc.files import write_atomic
from hargo_hpc.runs import RunLayout

if TYPE_CHECKING:
    from hargo_hpc.config import ExperimentConfig
    from hargo_hpc.eval.plans import Answers, Log, TaskPlan

ANSWERS = "answers.json"
WAIT_LOG_S = 60.0  # a waiting evaluation says so this often
POLL_S = 1.0


def cache_root(model: str) -> Path | None:
    """Where answers of `model` are kept: `<run>/baseline-answers/` when `model` is a run's
    export (module docstring), else None (not cached)."""
    path = Path(model)
    run = RunLayout(path.parent)
    if path.name == RunLayout.EXPORT and run.config.is_file() and path.is_dir():
        return run.baseline_answers
    return None


def fingerprint(model: Path) -> list[tuple[str, int, int]]:
    """(name, size, mtime_ns) of every file in the model directory, by name."""
    return sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns)
                  for p in model.iterdir() if p.is_file())


def answers_key(model: str, config: ExperimentConfig, plans: dict[str, TaskPlan],
                split: str) -> str:
    """The cache key (module docstring)."""
    from hargo_hpc.tasks.registry import task_class

    path = Path(model).resolve()
    remote = any(task_class(name).remote for name in plans)
    data = {"model": str(path), "files": fingerprint(path),
            "prompt_format": config.data.prompt_format, "seed": config.split_seed(),
            "split": split, "rewards": config.rewards.model_dump(mode="json"),
            "bench": config.bench.model_dump(mode="json") if remote else None,
            "tasks": {name: {"ids": [e.id for e in plan.examples],
                             "decoding": plan.decoding()} for name, plan in plans.items()}}
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:32]


@contextlib.contextmanager
def _locked(lock: Path, log: Log, what: str, deadline_s: float) -> Iterator[None]:
    """Hold an exclusive flock on `lock`, waiting at most `deadline_s`."""
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "a") as handle:
        started = last_said = time.monotonic()
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                now = time.monotonic()
                if now - started > deadline_s:
                    from hargo_hpc.eval.plans import EvalError

                    raise EvalError(f"{lock}: another evaluation has held this lock on {what}'s "
                                    f"answers for over {deadline_s:.0f} s") from None
                if now - last_said >= WAIT_LOG_S:
                    log(f"waiting for another evaluation computing {what}'s answers ({lock})")
                    last_said = now
                time.sleep(POLL_S)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _read(file: Path, plans: dict[str, TaskPlan]) -> Answers | None:
    """The answers in `file` when it holds one per row of every plan; else None."""
    from hargo_hpc.eval.plans import Answers

    try:
        data = json.loads(file.read_text(encoding="utf-8"))
        texts = {name: list(data["texts"][name]) for name in plans}
        records = {name: list(data["records"][name]) for name in data.get("records", {})
                   if name in plans}
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError):
        return None
    if any(len(texts[name]) != len(plan.rows) for name, plan in plans.items()):
        return None
    return Answers(texts, records)


def cached_answers(model: str, config: ExperimentConfig, plans: dict[str, TaskPlan], *,
                   split: str, log: Log, compute: Callable[[], Answers],
                   deadline_s: float = 6 * 3600.0) -> Answers:
    """`model`'s answers to `plans`: read from its cache, or computed by `compute` (under the
    lock, then written there); computed without a cache for a model that has none."""
    root = cache_root(model)
    if root is None:
        return compute()
    key = answers_key(model, config, plans, split)
    file = root / key / ANSWERS
    with _locked(root / f"{key}.lock", log, model, deadline_s):
        found = _read(file, plans)
        if found is not None:
            log(f"the baseline's answers: reused from {file}")
            return found
        answers = compute()
        payload: dict[str, Any] = {"model": model, "texts": answers.texts,
                                   "records": answers.records}
        file.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(file, json.dumps(payload, ensure_ascii=False) + "\n")
        log(f"the baseline's answers: written to {file}")
        return answers
