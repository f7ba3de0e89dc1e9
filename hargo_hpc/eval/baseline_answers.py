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
settings. No lock (flock fails on Lustre without its `flock` mount option and is node-local
with `localflock`): the first evaluation to come claims the key as the handoff claims a
request, by creating `<key>.claim.<attempt>` with O_EXCL, renews its lease by touching it
while it computes, writes the answers atomically and removes its claim; the others wait and
read them. A claim whose mtime stands still for a lease (its holder died) is taken over by
creating the next attempt's claim (docs/handoff.md, "Leases and the lease clock"). An
unreadable cache entry is computed again.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hargo_hpc.files import write_atomic
from hargo_hpc.handoff.atomic import open_exclusive, touch
from hargo_hpc.handoff.claims import LeaseObserver
from hargo_hpc.runs import RunLayout

if TYPE_CHECKING:
    from hargo_hpc.config import ExperimentConfig
    from hargo_hpc.eval.plans import Answers, Log, TaskPlan

ANSWERS = "answers.json"
WAIT_LOG_S = 60.0  # a waiting evaluation says so this often
POLL_S = 1.0
LEASE_S = 120.0  # a claim unchanged this long (the holder renews every quarter) is taken over


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


def _attempts(root: Path, key: str) -> list[int]:
    """The attempt numbers of `key`'s claims in `root`, in increasing order."""
    prefix = f"{key}.claim."
    found = [name.removeprefix(prefix) for name in (p.name for p in root.glob(f"{prefix}*"))]
    return sorted(int(n) for n in found if n.isdigit())


@contextlib.contextmanager
def _renewing(claim: Path, lease_s: float) -> Iterator[None]:
    """Touch `claim` every lease_s / 4 from a thread while the body runs; remove it after."""
    stop = threading.Event()

    def renew() -> None:
        while not stop.wait(lease_s / 4):
            with contextlib.suppress(OSError):
                touch(claim)

    thread = threading.Thread(target=renew, name=f"renew {claim.name}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        claim.unlink(missing_ok=True)


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
                   deadline_s: float = 6 * 3600.0, lease_s: float = LEASE_S) -> Answers:
    """`model`'s answers to `plans`: read from its cache, or computed by `compute` (under this
    evaluation's claim of the key, then written there); computed without a cache for a model
    that has none."""
    root = cache_root(model)
    if root is None:
        return compute()
    key = answers_key(model, config, plans, split)
    file = root / key / ANSWERS
    root.mkdir(parents=True, exist_ok=True)
    observer = LeaseObserver(lease_s)
    started = last_said = time.monotonic()
    while True:
        found = _read(file, plans)
        if found is not None:
            log(f"the baseline's answers: reused from {file}")
            return found
        attempts = _attempts(root, key)
        latest = attempts[-1] if attempts else 0
        if latest == 0 or observer.expired(root / f"{key}.claim.{latest}"):
            claim = root / f"{key}.claim.{latest + 1}"
            if open_exclusive(claim, {"model": model, "attempt": latest + 1}):
                with _renewing(claim, lease_s):
                    return _compute_and_write(model, file, plans, compute, log)
            continue  # another evaluation took it first
        now = time.monotonic()
        if now - started > deadline_s:
            from hargo_hpc.eval.plans import EvalError

            raise EvalError(f"{root / key}: another evaluation has computed {model}'s answers "
                            f"for over {deadline_s:.0f} s (claim {latest})")
        if now - last_said >= WAIT_LOG_S:
            log(f"waiting for another evaluation computing {model}'s answers "
                f"({root / f'{key}.claim.{latest}'})")
            last_said = now
        time.sleep(POLL_S)


def _compute_and_write(model: str, file: Path, plans: dict[str, TaskPlan],
                       compute: Callable[[], Answers], log: Log) -> Answers:
    """`compute` the answers (again, if a damaged entry is there) and write them atomically."""
    found = _read(file, plans)  # written by an earlier holder just before its claim went
    if found is not None:
        return found
    answers = compute()
    payload: dict[str, Any] = {"model": model, "texts": answers.texts,
                               "records": answers.records}
    file.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(file, json.dumps(payload, ensure_ascii=False) + "\n")
    log(f"the baseline's answers: written to {file}")
    return answers
