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
from hargo_hpc.handoff.layout import Layout, parse_result_name


@dataclass
class Compaction:
    step: int
    results: int
    duplicates: int
    failed_attempts: int
    skipped: int


def compact(root: str | Path, step: int, *, fsync: bool = True) -> Compaction:
    """Merge the results of closed `step` into `compacted.json`; remove results and claims."""
    layout = Layout(root)
    if not layout.closed(step).exists():
        raise HandoffError(f"step {step} is not closed: a trainer may still read it")
    results_dir = layout.results(step)
    if not results_dir.exists() and layout.compacted(step).exists():
        compacted = schema.parse(
            schema.Compacted, read_json(layout.compacted(step)), layout.compacted(step)
        )
        return Compaction(step, len(compacted.results), compacted.duplicates,
                          compacted.failed_attempts, 0)
    results, skipped = [], 0
    for name in sorted(_names(results_dir)):
        rid = parse_result_name(name)
        if rid is None:
            continue
        path = results_dir / name
        try:
            results.append(schema.parse(schema.Result, read_json(path), path))
        except (SchemaError, FileNotFoundError):
            skipped += 1
    duplicates = sum(1 for n in _names(layout.duplicates(step)) if not n.startswith("."))
    failed = sum(
        1 for a in scan_claims(layout.claims(step)).values() for n in a.states
        if a.state(n) == "failed"
    )
    compacted = schema.Compacted(
        step=step, at=time.time(), results=results, duplicates=duplicates,
        failed_attempts=failed,
    )
    write_atomic(layout.compacted(step), schema.dump(compacted), fsync=fsync)
    for sub in (layout.results(step), layout.claims(step), layout.duplicates(step)):
        _remove_tree(sub)
    return Compaction(step, len(results), duplicates, failed, skipped)


def compact_closed(root: str | Path, *, fsync: bool = True) -> list[Compaction]:
    """Compact every closed step that still has a results/ directory."""
    layout = Layout(root)
    done = []
    for step in layout.step_numbers():
        if layout.closed(step).exists() and layout.results(step).exists():
            done.append(compact(root, step, fsync=fsync))
    return done


def prune(root: str | Path, keep: int, *, dry_run: bool = False) -> tuple[list[int], list[int]]:
    """Delete closed steps older than the newest `keep` steps.

    Returns (pruned, left): `left` are old steps not closed, which are never deleted.
    """
    if keep < 0:
        raise ValueError("keep must be >= 0")
    layout = Layout(root)
    steps = layout.step_numbers()
    old = steps[: max(0, len(steps) - keep)]
    pruned, left = [], []
    for step in old:
        if not layout.closed(step).exists():
            left.append(step)
            continue
        pruned.append(step)
        if not dry_run:
            aside = layout.steps / f".pruning-{step}-{secrets.token_hex(3)}"
            try:
                os.rename(layout.step(step), aside)
            except OSError as err:
                raise describe(err, "move aside", layout.step(step)) from None
            _remove_tree(aside)
    return pruned, left


def _names(directory: Path) -> list[str]:
    try:
        return os.listdir(directory)
    except FileNotFoundError:
        return []


def _remove_tree(path: Path) -> None:
    try:
        shutil.rmtree(path)
    except FileNotFoundError:
        pass
    except OSError as err:
        raise describe(err, "remove", path) from None
