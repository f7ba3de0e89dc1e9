"""What a resume needs beyond the engine's own state, and the checkpoint layout on disk.

A checkpoint root holds one directory per saved step and a `latest` pointer in DeepSpeed's own
format; a save goes to `.partial-<tag>` and is renamed once every rank is done, so a `kill -9`
at any moment leaves `latest` on a complete checkpoint. `TrainerState` is what the loop keeps
besides the engine (step, sampler, weighting, handoff step, SQD, config hash); `check_resume`
refuses a resume under another config. The layout and each rule: docs/engine.md, "Checkpoints".
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from hargo_hpc.errors import HargoError
from hargo_hpc.files import write_atomic

LATEST = "latest"
STATE_FILE = "hargo_state.json"
PARTIAL_PREFIX = ".partial-"
FORMAT = 1


class CheckpointError(HargoError, ValueError):
    """A checkpoint that cannot be used (missing, another experiment's, another world size)."""


def config_hash(resolved_config_toml: str) -> str:
    """SHA-256 (hex, first 16 digits) of the resolved config's TOML text."""
    return hashlib.sha256(resolved_config_toml.encode("utf-8")).hexdigest()[:16]


@dataclass
class TrainerState:
    """The loop's part of a checkpoint. Opaque dicts must be JSON-serialisable."""

    step: int
    config_hash: str
    sampler: dict[str, Any] = field(default_factory=dict)
    hargo: dict[str, Any] = field(default_factory=dict)
    handoff_step: int = 0
    sqd: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrainerState:
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        missing = {"step", "config_hash"} - known.keys()
        if missing:
            raise CheckpointError(f"trainer state lacks {', '.join(sorted(missing))}")
        return cls(**known)


# ---------------------------------------------------------------- RNG states


def capture_rng() -> dict[str, Any]:
    """Python `random`, NumPy's global generator, torch CPU and (when present) CUDA states."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state(legacy=True)
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": (kind, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, gauss),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    kind, keys, pos, has_gauss, gauss = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, gauss))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def rng_file(checkpoint: Path, rank: int) -> Path:
    return checkpoint / f"rng_rank{rank}.pt"


# ---------------------------------------------------------------- layout


def partial_dir(root: Path, tag: str) -> Path:
    return root / f"{PARTIAL_PREFIX}{tag}"


def check_tag(tag: str) -> str:
    if not tag or tag.startswith(".") or "/" in tag or tag == LATEST or tag.strip() != tag:
        raise CheckpointError(f"bad checkpoint tag {tag!r} (a plain name, not 'latest')")
    return tag


def prepare_partial(root: Path, tag: str) -> Path:
    """(Rank 0, before the others write.) An empty `.partial-<tag>`; a stale one is removed."""
    path = partial_dir(root, tag)
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path


def write_state(
    partial: Path, *, tag: str, world_size: int, zero_stage: int, client_state: dict[str, Any]
) -> None:
    """(Rank 0.) `hargo_state.json`: the client state and who wrote the checkpoint."""
    record = {
        "format": FORMAT, "tag": tag, "world_size": world_size, "zero_stage": zero_stage,
        "saved_at_ns": time.time_ns(), "client_state": client_state,
    }
    try:
        text = json.dumps(record, indent=1, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as err:
        raise CheckpointError(f"client state is not JSON-serialisable: {err}") from None
    write_atomic(partial / STATE_FILE, text)


def write_rng(partial: Path, rank: int) -> None:
    """(Every rank.) This rank's RNG states."""
    tmp = partial / f".tmp-rng_rank{rank}.pt"
    torch.save(capture_rng(), tmp)
    os.replace(tmp, rng_file(partial, rank))


def loop_file(checkpoint: Path, rank: int) -> Path:
    return checkpoint / f"loop_rank{rank}.pt"


def write_loop_state(partial: Path, rank: int, state: dict[str, Any]) -> None:
    """(Every rank that has one.) This rank's tensors of the loop (the in-flight step of
    rollout.max_staleness 1): tensors, lists, strings and numbers only."""
    tmp = partial / f".tmp-loop_rank{rank}.pt"
    torch.save(state, tmp)
    os.replace(tmp, loop_file(partial, rank))


def read_loop_state(checkpoint: Path, rank: int) -> dict[str, Any] | None:
    """This rank's loop state of `checkpoint`, None when it has none."""
    path = loop_file(checkpoint, rank)
    if not path.is_file():
        return None
    try:
        return dict(torch.load(path, weights_only=True))
    except Exception as err:  # a torn or foreign file: say which
        raise CheckpointError(f"{path} is not a loop state: {err}") from None


def publish(root: Path, tag: str) -> Path:
    """(Rank 0, after every rank finished writing.) Rename `.partial-<tag>` into place under a
    free name (`tag`, else `tag.1`, `tag.2`, ...) and point `latest` at it; returns its path."""
    name, n = tag, 0
    while (root / name).exists():
        n += 1
        name = f"{tag}.{n}"
    if name != tag:
        record = json.loads((partial_dir(root, tag) / STATE_FILE).read_text())
        record["tag"] = name
        write_atomic(partial_dir(root, tag) / STATE_FILE, json.dumps(record, indent=1))
    final = root / name
    os.rename(partial_dir(root, tag), final)
    write_atomic(root / LATEST, name)
    return final


PRUNED_PREFIX = ".pruned-"


def prune(root: Path, keep: int) -> list[str]:
    """(Rank 0, after a publish.) Remove all but the `keep` newest complete checkpoints (by
    their `saved_at_ns`), never the one `latest` names; returns the names removed. Each goes
    first by one rename to `.pruned-<name>` (no longer complete, never resumed from), then its
    files; a removal a kill interrupted is finished by the next call. keep 0 keeps all."""
    if keep <= 0 or not root.is_dir():
        return []
    for stale in root.glob(f"{PRUNED_PREFIX}*"):
        shutil.rmtree(stale, ignore_errors=True)
    latest = latest_checkpoint(root)
    complete = sorted((p for p in root.iterdir() if p.is_dir() and _complete(p)),
                      key=lambda p: (read_state(p).get("saved_at_ns", 0), p.name))
    removed = []
    for path in complete[:-keep]:
        if latest is not None and path.name == latest.name:
            continue
        gone = root / f"{PRUNED_PREFIX}{path.name}"
        os.rename(path, gone)
        shutil.rmtree(gone, ignore_errors=True)
        removed.append(path.name)
    return removed


def _complete(path: Path) -> bool:
    return not path.name.startswith(".") and (path / STATE_FILE).is_file()


def latest_checkpoint(root: str | os.PathLike[str]) -> Path | None:
    """The newest complete checkpoint under `root`: `latest`'s target, else (no pointer yet, or
    its target gone) the complete checkpoint saved last; None when there is none."""
    root = Path(root)
    try:
        tag = (root / LATEST).read_text().strip()
    except OSError:
        tag = ""
    if tag and _complete(root / tag):
        return root / tag
    found = [p for p in root.iterdir() if p.is_dir() and _complete(p)] if root.is_dir() else []
    if not found:
        return None
    return max(found, key=lambda p: read_state(p).get("saved_at_ns", 0))


def read_state(checkpoint: Path) -> dict[str, Any]:
    """The `hargo_state.json` record of a checkpoint directory."""
    path = checkpoint / STATE_FILE
    try:
        record = json.loads(path.read_text())
    except OSError:
        raise CheckpointError(f"{checkpoint} is not a checkpoint (no {STATE_FILE})") from None
    except json.JSONDecodeError as err:
        raise CheckpointError(f"{path} is not valid JSON: {err}") from None
    if record.get("format") != FORMAT:
        raise CheckpointError(f"{path}: unknown checkpoint format {record.get('format')!r}")
    return record


def load_rng(checkpoint: Path, rank: int) -> None:
    """Restore this rank's RNG states from `checkpoint`."""
    path = rng_file(checkpoint, rank)
    if not path.is_file():
        raise CheckpointError(f"{checkpoint} has no RNG state for rank {rank}")
    restore_rng(torch.load(path, weights_only=True))


def check_resume(
    root: str | os.PathLike[str], current_hash: str, run_dir: str | os.PathLike[str] | None = None
) -> Path:
    """The checkpoint a resume continues from; CheckpointError (one line) when there is none or
    when its config hash differs from `current_hash` (another experiment's checkpoints)."""
    checkpoint = latest_checkpoint(root)
    if checkpoint is None:
        raise CheckpointError(f"nothing to resume: no complete checkpoint in {root}")
    saved = read_state(checkpoint)["client_state"].get("config_hash")
    if saved != current_hash:
        here = f"the config of {run_dir}" if run_dir is not None else "this run's config"
        raise CheckpointError(
            f"refusing to resume: checkpoint {checkpoint} has config hash {saved}, "
            f"{here} hashes to {current_hash}"
        )
    return checkpoint
