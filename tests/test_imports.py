"""A light core, no import cycles, and every import running down a floor.

`import hargo_hpc.config` is what a login node does to read an experiment file: it must not load
torch, the sandbox, the handoff's runtime, submitit, jinja2 or rich. The expected set of the
package's own modules is written out by hand, so that a new import shows up here as a diff.
"""

from __future__ import annotations

import ast
import importlib
import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import hargo_hpc
from hargo_hpc import _lazy

PACKAGE_DIR = Path(hargo_hpc.__file__).parent

CONFIG_LOADS = {
    "hargo_hpc", "hargo_hpc._lazy", "hargo_hpc.errors", "hargo_hpc.files", "hargo_hpc.config",
    "hargo_hpc.algorithms", "hargo_hpc.algorithms.names", "hargo_hpc.algorithms.hargo_params",
    "hargo_hpc.algorithms.presets", "hargo_hpc.algorithms.registry",
    "hargo_hpc.bench", "hargo_hpc.bench.settings", "hargo_hpc.bench.techniques",
    "hargo_hpc.config.evaluation", "hargo_hpc.config.experiment", "hargo_hpc.config.training",
    "hargo_hpc.handoff", "hargo_hpc.handoff.settings", "hargo_hpc.runs", "hargo_hpc.sqd",
    "hargo_hpc.sqd.schedule",
    "hargo_hpc.tasks", "hargo_hpc.tasks.base", "hargo_hpc.tasks.names", "hargo_hpc.tasks.registry",
    "hargo_hpc.tasks.settings",
}
HEAVY = ("torch", "numpy", "transformers", "deepspeed", "submitit", "jinja2", "rich", "ctypes",
         "psutil", "click")


def modules_loaded_by(statement: str) -> list[str]:
    code = (f"import sys, json; before = set(sys.modules); {statement}; "
            "print(json.dumps(sorted(set(sys.modules) - before)))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=True)
    return json.loads(done.stdout)


def test_importing_the_config_loads_only_the_light_core() -> None:
    loaded = modules_loaded_by("import hargo_hpc.config")
    assert {m for m in loaded if m.startswith("hargo_hpc")} == CONFIG_LOADS
    assert not [m for m in loaded if m.split(".")[0] in HEAVY]


def test_the_handoff_protocol_knows_no_kind_of_work() -> None:
    """The handoff carries {id, kind, payload}: neither its schema nor its worker imports the
    bench (the worker meets the bench only through the kind `gemm`'s registered factory)."""
    for module in ("hargo_hpc.handoff.schema", "hargo_hpc.handoff.worker"):
        loaded = modules_loaded_by(f"import {module}")
        assert not [m for m in loaded if m.startswith("hargo_hpc.bench")], module
        assert not [m for m in loaded if m.startswith("hargo_hpc.tasks")], module


def test_lazy_package_exports_resolve() -> None:
    for package in ("hargo_hpc.algorithms", "hargo_hpc.bench", "hargo_hpc.handoff"):
        importlib.import_module(package)
    assert set(_lazy.EXPORTS) >= {"hargo_hpc.algorithms", "hargo_hpc.bench", "hargo_hpc.handoff"}
    for package, exports in _lazy.EXPORTS.items():
        module = importlib.import_module(package)
        for name, home in exports.items():
            assert getattr(module, name) is getattr(importlib.import_module(home), name)
        assert set(exports) <= set(dir(module))


def _module_names() -> list[str]:
    names = ["hargo_hpc"]
    for info in pkgutil.walk_packages([str(PACKAGE_DIR)], prefix="hargo_hpc."):
        names.append(info.name)
    return names


def _imports_of(module: str) -> set[str]:
    """Every hargo_hpc module `module` imports, anywhere in its body (function-level imports
    included: a cycle through a function is still a cycle), through lazy exports too."""
    path = PACKAGE_DIR.joinpath(*module.split(".")[1:])
    file = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
    tree = ast.parse(file.read_text())
    package = module if file.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, *([base] if base else [])])
            for alias in node.names:
                target = f"{base}.{alias.name}"
                if target in MODULES:
                    found.add(target)
                elif alias.name in _lazy.EXPORTS.get(base, {}):
                    found.add(_lazy.EXPORTS[base][alias.name])
                else:
                    found.add(base)
    return {name for name in found if name in MODULES and name != module}


MODULES = set(_module_names())


def test_no_import_cycles() -> None:
    for package in _lazy.EXPORTS.copy():
        importlib.import_module(package)
    graph = {module: _imports_of(module) for module in sorted(MODULES)}
    # packages' lazy __init__s import nothing of their own at import time
    state: dict[str, str] = {}
    path: list[str] = []

    def visit(node: str) -> None:
        state[node] = "open"
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                cycle = [*path[path.index(nxt):], nxt]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if nxt not in state:
                visit(nxt)
        path.pop()
        state[node] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module)
    assert len(graph) > 40  # the walk found the package


# The floors, lowest first: a folder (or top-level module) imports only from floors below its
# own, or from itself. The config composes the settings of the packages below it and is read
# by those above; the command line sits on top (docs/layout.md).
FLOORS = (
    ("hargo_hpc", "_lazy", "errors", "files"),
    ("bench",),
    ("algorithms",),
    ("tasks",),
    ("sqd",),
    ("handoff",),
    ("runs",),
    ("config",),
    ("train",),
    ("eval",),
    ("report",),
    ("slurm",),
    ("examples",),
    ("doctor",),
    ("cli",),
    ("__main__",),
)
FLOOR = {unit: level for level, units in enumerate(FLOORS) for unit in units}


def _unit(module: str) -> str:
    """The folder or top-level module that `module` belongs to."""
    return module.split(".")[1] if "." in module else module


def test_every_import_runs_down_a_floor() -> None:
    for package in _lazy.EXPORTS.copy():
        importlib.import_module(package)
    units = {_unit(module) for module in MODULES}
    assert units == set(FLOOR), f"give each unit a floor: {sorted(units ^ set(FLOOR))}"
    upward = sorted(f"{module} -> {target}" for module in MODULES
                    for target in _imports_of(module)
                    if _unit(target) != _unit(module)
                    and FLOOR[_unit(target)] >= FLOOR[_unit(module)])
    assert not upward, "imports that run up a floor:\n" + "\n".join(upward)
