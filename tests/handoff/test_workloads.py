"""Dispatch: each request to its kind's workload, made once; a kind it cannot run is the
request's infra_error, never a crash."""

from __future__ import annotations

import sys
import types

import pytest

from hargo_hpc.handoff import workloads
from hargo_hpc.handoff.workloads import Dispatch, register_workload


@pytest.fixture
def factories(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Two kinds registered for this test only: `echo` (a factory counting how often it is
    made) and `missing` (a module that does not exist)."""
    made = {"echo": 0}
    module = types.ModuleType("_hargo_test_echo")

    def echo_factory(config):
        made["echo"] += 1
        return lambda request: {"id": request["id"], "status": "ok",
                                "reward": float(request["payload"]["x"]) * config}

    module.echo_factory = echo_factory
    monkeypatch.setitem(sys.modules, "_hargo_test_echo", module)
    monkeypatch.setattr(workloads, "FACTORIES", dict(workloads.FACTORIES))
    register_workload("echo", "_hargo_test_echo:echo_factory")
    register_workload("missing", "_hargo_no_such_module:factory")
    return made


def test_each_kind_is_made_once_with_the_config(factories: dict[str, int]) -> None:
    dispatch = Dispatch(config=2.0)
    rewards = [dispatch({"id": f"r{i}", "kind": "echo", "payload": {"x": i}})["reward"]
               for i in range(3)]
    assert rewards == [0.0, 2.0, 4.0]
    assert factories["echo"] == 1


def test_a_kind_it_cannot_run_is_an_infra_error(factories: dict[str, int],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    dispatch = Dispatch()
    first = dispatch({"id": "a", "kind": "missing", "payload": {}})
    assert first["status"] == "infra_error" and first["request_id"] == "a"
    assert "request kind 'missing' is not available" in first["error"]
    unknown = dispatch({"id": "c", "kind": "nobody", "payload": {}})
    assert unknown["status"] == "infra_error"
    assert "no workload for request kind 'nobody'" in unknown["error"]
    # The reason is kept: the second request does not import again.
    monkeypatch.setattr(workloads, "workload_of", lambda *a, **k: pytest.fail("retried"))
    second = dispatch({"id": "b", "kind": "missing", "payload": {}})
    assert second["status"] == "infra_error" and second["error"] == first["error"]


def test_a_kind_is_registered_once() -> None:
    with pytest.raises(ValueError, match="registered already"):
        register_workload("gemm", "elsewhere:factory")
