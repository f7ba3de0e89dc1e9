"""Retention: compact closed steps into one file, prune old closed steps.

Only a *closed* step (`closed.json`, written by the trainer once it holds every result) is ever
touched, so no trainer can still be waiting on it. Compaction keeps it readable: the trainer
reads `compacted.json` when `results/` is gone, so a restarted trainer still gets the same
results. Pruning removes whole step directories (renamed aside first, then deleted).
"""

from __future__ import annotations

import os
import secrets
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from hargo_hpc.handoff import schema
from hargo_hpc.handoff.atomic import describe, read_json, write_atomic
from hargo_hpc.handoff.claims import scan_claims
from hargo_hpc.handoff.errors import HandoffError, SchemaError
from hargo_hpc.handoff.layout import TEMP_PREFIX, Layout, list_names, parse_result_name

PRUNING_PREFIX = ".pruning-"
TEMP_MAX_AGE_S = 3600.0  # temp files younger than this may belong to a live writer


@dataclass
class Compaction:
    step: int
    results: int
    duplicates: int
    failed_attempts: int
    skipped: int


def compact(root: str | Path, step: int, *, fsync: bool = True) -> Compaction:
    """Merge the results of closed `step` into `compacted.json`; remove results and claims.

    Safe to re-run after an interruption and to run twice at once: an existing
    `compacted.json` is authoritative. The leftover `results/` files are read *first*, then the
    existing `compacted.json` (a result missing from the listing was removed by a compactor
    that had already written `compacted.json`), the two are merged (existing entries win) and
    written back atomically; only then is anything removed.
    """
    layout = Layout(root)
    if not layout.closed(step).exists():
        raise HandoffError(f"step {step} is not closed: a trainer may still read it")
    results_dir = layout.results(step)
    found: dict[str, schema.Result] = {}
    skipped = 0
    for name in sorted(list_names(results_dir)):
        rid = parse_result_name(name)
        if rid is None:
            continue
        path = results_dir / name
        try:
            result = schema.parse(schema.Result, read_json(path), path)
        except FileNotFoundError:
            continue  # removed by another compactor, which wrote compacted.json first
        except SchemaError:
            skipped += 1
            continue
        found.setdefault(result.request_id, result)
    duplicates = len(list_names(layout.duplicates(step)))
    failed = sum(
        1 for a in scan_claims(layout.claims(step)).values() for n in a.states
        if a.state(n) == "failed"
    )
    existing = _load_compacted(layout, step)
    if existing is not None and not _has_leftovers(layout, step):
        return Compaction(step, len(existing.results), existing.duplicates,
                          existing.failed_attempts, 0)
    merged = {r.request_id: r for r in existing.results} if existing is not None else {}
    for rid, result in found.items():
        merged.setdefault(rid, result)  # existing entries win
    if existing is not None:
        # The first run counted before it removed anything; a re-run may see less.
        duplicates = max(duplicates, existing.duplicates)
        failed = max(failed, existing.failed_attempts)
    compacted = schema.Compacted(
        step=step, at=time.time(), results=list(merged.values()), duplicates=duplicates,
        failed_attempts=failed,
    )
    write_atomic(layout.compacted(step), schema.dump(compacted), fsync=fsync)
    for sub in (layout.results(step), layout.claims(step), layout.duplicates(step)):
        _remove_tree(sub)
    _sweep_temps(layout.step(step))
    return Compaction(step, len(merged), duplicates, failed, skipped)


def _has_leftovers(layout: Layout, step: int) -> bool:
    """Whether the step still has per-request files that compaction removes."""
    return any(sub.exists() for sub in (layout.results(step), layout.claims(step),
                                        layout.duplicates(step)))


def _load_compacted(layout: Layout, step: int) -> schema.Compacted | None:
    path = layout.compacted(step)
    try:
        return schema.parse(schema.Compacted, read_json(path), path)
    except FileNotFoundError:
        return None
    except SchemaError as err:
        # Never overwrite it: it may hold results whose files are already gone.
        raise HandoffError(f"{err}; refusing to rebuild it (move it aside by hand)") from None


def _sweep_temps(directory: Path, older_than_s: float = TEMP_MAX_AGE_S) -> int:
    """Remove temp files (`.tmp-*`) left by killed writers; young ones may still be in use."""
    removed = 0
    now = time.time()
    for name in list_names(directory, hidden=True):
        if not name.startswith(TEMP_PREFIX):
            continue
        path = directory / name
        try:
            if now - os.stat(path).st_mtime >= older_than_s:
                os.unlink(path)
                removed += 1
        except OSError:
            continue
    return removed


def compact_closed(root: str | Path, *, fsync: bool = True) -> list[Compaction]:
    """Compact every closed step that still has a results/ directory."""
    layout = Layout(root)
    done = []
    for step in layout.step_numbers():
        if layout.closed(step).exists() and _has_leftovers(layout, step):
            done.append(compact(root, step, fsync=fsync))
    return done


def prune(root: str | Path, keep: int, *, dry_run: bool = False) -> tuple[list[int], list[int]]:
    """Delete closed steps older than the newest `keep` steps.

    Returns (pruned, left): `left` are old steps not closed, which are never deleted.
    """
    if keep < 0:
        raise ValueError("keep must be >= 0")
    layout = Layout(root)
    if not dry_run:
        _sweep_aside(layout)
    steps = layout.step_numbers()
    old = steps[: max(0, len(steps) - keep)]
    pruned, left = [], []
    for step in old:
        if not layout.closed(step).exists():
            left.append(step)
            continue
        pruned.append(step)
        if not dry_run:
            aside = layout.steps / f"{PRUNING_PREFIX}{step}-{secrets.token_hex(3)}"
            try:
                os.rename(layout.step(step), aside)
            except OSError as err:
                raise describe(err, "move aside", layout.step(step)) from None
            _remove_tree(aside)
    return pruned, left


def _sweep_aside(layout: Layout) -> None:
    """Finish the removal of step directories a killed prune left renamed aside, and remove
    old temp files of steps/."""
    for name in list_names(layout.steps, hidden=True):
        if name.startswith(PRUNING_PREFIX):
            _remove_tree(layout.steps / name)
    _sweep_temps(layout.steps)


def _remove_tree(path: Path) -> None:
    """rmtree that tolerates entries vanishing under it (a second compactor or pruner)."""
    failures: list[OSError] = []

    def on_error(function: object, name: str, exc_info: tuple[type, BaseException, object]) -> None:
        err = exc_info[1]
        if not isinstance(err, FileNotFoundError):
            failures.append(err)  # type: ignore[arg-type]

    shutil.rmtree(path, onerror=on_error)
    if failures:
        raise describe(failures[0], "remove", path)
