"""Lazy package exports (PEP 562): a package `__init__` names what it offers without importing
it, so importing one light submodule (e.g. `hargo_hpc.bench.settings` from the config) never
loads the package's runtime (the sandbox, torch, the handoff worker)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

EXPORTS: dict[str, dict[str, str]] = {}  # package -> {name: defining module}, for tools/tests


def lazy_exports(
    package: str, exports: dict[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]], list[str]]:
    """`(__getattr__, __dir__, __all__)` for `package`; `exports` maps a name to the module
    that defines it, imported on first access."""
    EXPORTS[package] = dict(exports)

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        globals_of_package = importlib.import_module(package).__dict__
        globals_of_package[name] = value  # later lookups skip __getattr__
        return value

    def __dir__() -> list[str]:
        return sorted({*exports, *importlib.import_module(package).__dict__})

    return __getattr__, __dir__, sorted(exports)


def load_target(spec: str) -> Any:
    """The object a `module:attr` spec names (a user's task, tracker, estimator...), imported
    now; ImportError or AttributeError as the import raises them, for the caller to word."""
    module, _, attr = spec.partition(":")
    return getattr(importlib.import_module(module), attr)
