"""File names and versioned schemas."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hargo_hpc.handoff import layout, schema
from hargo_hpc.handoff.errors import SchemaError


def test_names_round_trip() -> None:
    assert layout.parse_claim_name(layout.claim_name("r.1-x", 12, "failed")) == ("r.1-x", 12,
                                                                                 "failed")
    assert layout.parse_claim_name(".tmp-abc") is None
    assert layout.parse_claim_name("r1.claim") is None
    assert layout.parse_result_name("r1.json") == "r1"
    assert layout.parse_result_name(".tmp-123") is None
    assert layout.parse_step_name(layout.step_name(42)) == 42
    assert layout.parse_step_name(".pruning-42-aa") is None


@pytest.mark.parametrize("rid", ["", ".hidden", "a/b", "x.json", "a b", "é", "x" * 201])
def test_bad_request_ids_are_rejected(rid: str) -> None:
    with pytest.raises(ValueError):
        schema.Request(id=rid, completion="c")


def test_unsupported_version_is_named() -> None:
    obj = {"kind": "result", "version": 1, "step": 0}  # a version this hargo no longer reads
    with pytest.raises(SchemaError,
                       match=r"unsupported result schema version 1 \(this hargo reads version 2\)"):
        schema.parse(schema.Result, obj, "f.json")


def test_wrong_kind_and_bad_fields() -> None:
    with pytest.raises(SchemaError, match="expected a 'claim' file"):
        schema.parse(schema.Claim, {"kind": "stop", "version": 2}, "x")
    with pytest.raises(SchemaError, match=r"record\.status"):
        schema.parse(schema.Result, {
            "kind": "result", "version": 2, "step": 0, "request_id": "a", "attempt": 1,
            "worker_id": "w", "written_at": 0.0,
            "record": {"request_id": "a", "status": "", "reward": 1},  # a kind says something
        }, "x")


def test_every_kind_has_a_json_schema_with_version() -> None:
    schemas = schema.json_schemas()
    assert set(schemas) == set(schema.KINDS)
    for kind, item in schemas.items():
        assert "version" in item["properties"], kind
        assert item["properties"]["kind"]["const"] == kind


@given(
    rid=st.from_regex(r"[A-Za-z0-9_-][A-Za-z0-9_.-]{0,40}", fullmatch=True),
    attempt=st.integers(min_value=1, max_value=10**6),
    state=st.sampled_from(layout.CLAIM_STATES),
)
def test_claim_names_round_trip_for_every_valid_id(rid: str, attempt: int, state: str) -> None:
    if not layout.valid_request_id(rid):
        return
    assert layout.parse_claim_name(layout.claim_name(rid, attempt, state)) == (rid, attempt, state)
    assert layout.parse_result_name(layout.result_name(rid)) == rid
