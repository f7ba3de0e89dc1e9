"""Where every file of the handoff directory lives, and how names are parsed back.

`Layout(root)` gives the path of each file (the stop sentinel, heartbeats, and per step the
request batch, claims and their markers, results, duplicates, `closed.json`,
`compacted.json`); `step_name`, `claim_name`, `result_name` and their `parse_*` inverses map
names to numbers and back; `is_temp` and `list_names` keep readers off temp files. The tree and
how each file is written: docs/handoff.md, "Layout" and "Atomicity without locks".
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from hargo_hpc.handoff.errors import describe

STOP = "STOP"
WORKERS = "workers"
STEPS = "steps"
REQUESTS = "requests.json"
CLAIMS = "claims"
RESULTS = "results"
DUPLICATES = "duplicates"
CLOSED = "closed.json"
COMPACTED = "compacted.json"
TEMP_PREFIX = ".tmp-"

CLAIM_STATES = ("claim", "failed", "released")
REQUEST_ID = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,199}$")
_STEP = re.compile(r"^step-(\d{8,})$")


def is_temp(name: str) -> bool:
    """Temp and hidden names: never a finished file, always skipped by readers."""
    return name.startswith(".")


def valid_request_id(rid: str) -> bool:
    """Request ids become file names: letters, digits, `_ - .`, not starting with a dot."""
    return bool(REQUEST_ID.match(rid)) and not rid.endswith(".json")


def step_name(step: int) -> str:
    if step < 0:
        raise ValueError(f"step must be >= 0, got {step}")
    return f"step-{step:08d}"


def parse_step_name(name: str) -> int | None:
    match = _STEP.match(name)
    return int(match.group(1)) if match else None


def claim_name(rid: str, attempt: int, state: str = "claim") -> str:
    return f"{rid}.{attempt}.{state}"


def parse_claim_name(name: str) -> tuple[str, int, str] | None:
    """(request id, attempt, state) of a claims/ entry, or None for anything else."""
    if is_temp(name):
        return None
    parts = name.rsplit(".", 2)
    if len(parts) != 3 or parts[2] not in CLAIM_STATES or not parts[0]:
        return None
    if not (parts[1].isascii() and parts[1].isdigit()):
        return None
    return parts[0], int(parts[1]), parts[2]


def result_name(rid: str) -> str:
    return f"{rid}.json"


def parse_result_name(name: str) -> str | None:
    if is_temp(name) or not name.endswith(".json"):
        return None
    return name[: -len(".json")]


class Layout:
    """Paths inside one handoff directory."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self._dirs: dict[tuple[int, str], Path] = {}

    @property
    def stop(self) -> Path:
        return self.root / STOP

    @property
    def workers(self) -> Path:
        return self.root / WORKERS

    @property
    def steps(self) -> Path:
        return self.root / STEPS

    def step(self, step: int) -> Path:
        return self._dir(step, "")

    def requests(self, step: int) -> Path:
        return self.step(step) / REQUESTS

    def claims(self, step: int) -> Path:
        return self._dir(step, CLAIMS)

    def results(self, step: int) -> Path:
        return self._dir(step, RESULTS)

    def duplicates(self, step: int) -> Path:
        return self._dir(step, DUPLICATES)

    def closed(self, step: int) -> Path:
        return self.step(step) / CLOSED

    def compacted(self, step: int) -> Path:
        return self.step(step) / COMPACTED

    def _dir(self, step: int, sub: str) -> Path:
        """Directories of a step, built once (the hot paths join names to them)."""
        key = (step, sub)
        found = self._dirs.get(key)
        if found is None:
            found = self.steps / step_name(step)
            if sub:
                found = found / sub
            self._dirs[key] = found
        return found

    def result(self, step: int, rid: str) -> Path:
        return self.results(step) / result_name(rid)

    def claim(self, step: int, rid: str, attempt: int, state: str = "claim") -> Path:
        return self.claims(step) / claim_name(rid, attempt, state)

    def step_numbers(self) -> list[int]:
        """Every step present, ascending; [] when there is no steps/ yet."""
        names = list_names(self.steps)
        return sorted(n for n in map(parse_step_name, names) if n is not None)


def list_names(directory: Path, *, hidden: bool = False) -> list[str]:
    """The names in `directory` ([] when it does not exist); temp and hidden names only with
    `hidden`. HandoffError (one line) for any other error (ESTALE, EIO, EACCES)."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    except OSError as err:
        raise describe(err, "list", directory) from None
    return names if hidden else [name for name in names if not is_temp(name)]
