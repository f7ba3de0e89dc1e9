"""The workloads a bench worker runs, by request kind: each kind names a factory
("module:function", imported on first use) that makes the kind's workload from the experiment
config, a callable request dict -> result record. A request names its kind; `Dispatch`, the
worker's default workload, sends it to its kind's workload. The bench is the kind `gemm`; a
remote reward of your own is a factory and one `register_workload` line (docs/handoff.md, "Kinds").
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from hargo_hpc.handoff.errors import HandoffError
from hargo_hpc.handoff.schema import infra_record

Workload = Callable[[dict[str, Any]], dict[str, Any]]
FACTORIES: dict[str, str] = {}


def register_workload(kind: str, factory: str) -> None:
    """Requests of `kind` are run by the workload `factory(config)` makes ("module:function";
    config: the experiment config the worker read, or None for the defaults)."""
    if kind in FACTORIES and FACTORIES[kind] != factory:
        raise ValueError(f"request kind {kind!r} is registered already ({FACTORIES[kind]})")
    FACTORIES[kind] = factory


def workload_of(kind: str, config: Any = None) -> Workload:
    """The workload of `kind`; HandoffError (one line) when none is registered or it fails to
    load."""
    target = FACTORIES.get(kind)
    if target is None:
        raise HandoffError(f"no workload for request kind {kind!r} (registered: "
                           f"{', '.join(FACTORIES) or 'none'})")
    module, _, name = target.partition(":")
    try:
        factory = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as err:
        raise HandoffError(f"the workload of request kind {kind!r} is not available: "
                           f"{err}") from None
    return factory(config)


class Dispatch:
    """A worker's workload for every kind: each request to its kind's workload, made once (on
    the first request of that kind, with `config`). A kind this worker cannot run is the
    request's `infra_error`, never a crash; the reason is found once and kept."""

    def __init__(self, config: Any = None) -> None:
        self.config = config
        self._made: dict[str, Workload] = {}
        self._unavailable: dict[str, str] = {}

    def __call__(self, request: dict[str, Any]) -> dict[str, Any]:
        kind = str(request.get("kind", ""))
        if kind not in self._made and kind not in self._unavailable:
            try:
                self._made[kind] = workload_of(kind, self.config)
            except HandoffError as err:
                self._unavailable[kind] = str(err)
        if kind in self._unavailable:
            return infra_record(str(request.get("id", "")), self._unavailable[kind])
        return self._made[kind](request)


register_workload("gemm", "hargo_hpc.bench.runner:gemm_workload")
