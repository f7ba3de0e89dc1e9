"""Versioned schemas of every handoff file kind.

Each file is one JSON object with `kind` and `version`. A reader accepts exactly the versions it
knows (`VERSION`) and rejects any other with a `SchemaError` naming the file, the kind and the
versions it reads; it never guesses. `json_schemas()` gives the JSON Schema of each kind (the
documentation in docs/handoff.md is generated from the same models).
"""

from __future__ import annotations

import time
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from hargo_hpc.handoff.errors import SchemaError
from hargo_hpc.handoff.layout import valid_request_id

VERSION = 2  # 2: a request is {id, kind, payload}, the kind's own data opaque here
KIND_NAME = r"^[a-z][a-z0-9_]{0,63}$"
INFRA_ERROR = "infra_error"  # the one status the protocol reads: not scored, retried


class _File(BaseModel):
    model_config = ConfigDict(extra="forbid")

    version: int = VERSION


class Request(BaseModel):
    """One item of remote work: `id` (unique within the step; a file name), `kind` (the remote
    reward that runs it: `handoff.kinds`) and `payload` (that kind's own data, opaque here: the
    kind checks and versions it). Passed to the worker's workload as a plain dict."""

    model_config = ConfigDict(extra="forbid")

    id: str
    kind: str = Field(pattern=KIND_NAME, description="the remote reward kind (handoff.kinds)")
    payload: dict[str, Any] = Field(default_factory=dict, description="the kind's own data")

    @field_validator("id")
    @classmethod
    def _id_is_a_name(cls, value: str) -> str:
        if not valid_request_id(value):
            raise ValueError(
                f"request id {value!r} must be 1-200 of [A-Za-z0-9_.-], not start with '.'"
            )
        return value


class RequestBatch(_File):
    """steps/step-N/requests.json: every request of one RL step, written once by the trainer."""

    kind: Literal["request_batch"] = "request_batch"
    step: int = Field(ge=0)
    created_at: float
    requests: list[Request]


class Claim(_File):
    """steps/step-N/claims/<rid>.<n>.claim: attempt n is held; its mtime is the lease."""

    kind: Literal["claim"] = "claim"
    worker_id: str
    nonce: str = Field(description="random per worker process; tells same-id workers apart")
    claimed_at: float


class AttemptFailed(_File):
    """steps/step-N/claims/<rid>.<n>.failed: attempt n failed for an infrastructure reason."""

    kind: Literal["attempt_failed"] = "attempt_failed"
    worker_id: str
    error: str
    at: float


class Released(_File):
    """steps/step-N/claims/<rid>.<n>.released: attempt n was given back (signal, stop)."""

    kind: Literal["released"] = "released"
    worker_id: str
    reason: str
    at: float


class Record(BaseModel):
    """A kind's result record (any extra fields are kept as they are). `status` is the kind's
    own word for the outcome; the protocol reads one: `infra_error`, never scored."""

    model_config = ConfigDict(extra="allow")

    request_id: str
    status: str = Field(min_length=1)
    reward: float | None = None


class Result(_File):
    """steps/step-N/results/<rid>.json: the one accepted result (first writer wins)."""

    kind: Literal["result"] = "result"
    step: int = Field(ge=0)
    request_id: str
    attempt: int = Field(ge=0, description="0 = written by the trainer (timeout)")
    worker_id: str
    written_at: float
    record: Record


class Heartbeat(_File):
    """workers/<worker-id>.<nonce>.json: rewritten while the worker lives."""

    kind: Literal["heartbeat"] = "heartbeat"
    worker_id: str
    nonce: str
    host: str
    pid: int
    slurm: dict[str, str] = Field(default_factory=dict)
    started_at: float
    updated_at: float
    state: Literal["running", "exited"]
    interval_s: float = Field(10.0, gt=0, description="seconds between two heartbeats")
    exit_reason: str = ""
    held: list[str] = Field(default_factory=list, description="step/request of held claims")
    counts: dict[str, int] = Field(default_factory=dict)
    first_infra_error: str = Field("", description="the first workload run that was infra_error")


class Stop(_File):
    """STOP: the sentinel; every worker exits at its next look."""

    kind: Literal["stop"] = "stop"
    reason: str = ""
    at: float


class Closed(_File):
    """steps/step-N/closed.json: the trainer holds every result; the step may be compacted."""

    kind: Literal["closed"] = "closed"
    step: int = Field(ge=0)
    at: float
    results: int
    failed: int = Field(0, description="results with status infra_error")


class Compacted(_File):
    """steps/step-N/compacted.json: results/ of a closed step merged into one file."""

    kind: Literal["compacted"] = "compacted"
    step: int = Field(ge=0)
    at: float
    results: list[Result]
    duplicates: int = 0
    failed_attempts: int = 0


T = TypeVar("T", bound=_File)

KINDS: dict[str, type[_File]] = {
    "request_batch": RequestBatch,
    "claim": Claim,
    "attempt_failed": AttemptFailed,
    "released": Released,
    "result": Result,
    "heartbeat": Heartbeat,
    "stop": Stop,
    "closed": Closed,
    "compacted": Compacted,
}


def parse(model: type[T], obj: dict[str, Any], source: object) -> T:
    """Validate `obj` as `model`; SchemaError (one line) for a wrong kind, version or field."""
    kind = model.model_fields["kind"].default
    if obj.get("kind") != kind:
        raise SchemaError(f"{source}: expected a {kind!r} file, got kind {obj.get('kind')!r}")
    if obj.get("version") != VERSION:
        raise SchemaError(
            f"{source}: unsupported {kind} schema version {obj.get('version')!r} "
            f"(this hargo reads version {VERSION})"
        )
    try:
        return model.model_validate(obj)
    except ValidationError as err:
        raise SchemaError(f"{source}: {kind}: {first_error(err)}") from None


def first_error(err: ValidationError, top: str = "top level") -> str:
    """`field.path: message` of the first validation error (one line)."""
    first = err.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or top
    return f"{where}: {first['msg']}"


def result_envelope(
    step: int, rid: str, attempt: int, worker_id: str, record: dict[str, Any]
) -> dict[str, Any]:
    """The plain data of a `Result` file (built without validation: on the hot path)."""
    return {
        "kind": "result", "version": VERSION, "step": step, "request_id": rid,
        "attempt": attempt, "worker_id": worker_id, "written_at": time.time(), "record": record,
    }


def infra_record(rid: str, error: str) -> dict[str, Any]:
    """The record of a request that failed for infrastructure reasons (never scored)."""
    return {"request_id": rid, "status": INFRA_ERROR, "reward": None, "error": error}


def dump(item: BaseModel) -> dict[str, Any]:
    return item.model_dump(mode="json")


def json_schemas() -> dict[str, dict[str, Any]]:
    """The JSON Schema of every file kind, keyed by kind."""
    return {kind: model.model_json_schema() for kind, model in KINDS.items()}
