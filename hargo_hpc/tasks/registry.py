"""The task registry: config names -> task classes, imported on first use.

Each entry names the module and class, so importing the registry loads no task module (and no
embedding model). `register` refuses a name that is taken.
"""

from __future__ import annotations

import importlib

from hargo_hpc.tasks.base import DataError, Task
from hargo_hpc.tasks.settings import RewardSettings

_REGISTRY: dict[str, str] = {}


def register(name: str, target: str) -> None:
    """Add task `name`, defined by `target` ('module:Class'); a name is registered once."""
    if name in _REGISTRY:
        raise ValueError(f"task {name!r} is already registered ({_REGISTRY[name]})")
    _REGISTRY[name] = target


def task_names() -> list[str]:
    """The registered task names, the shipped ones first."""
    return list(_REGISTRY)


def check_name(name: str) -> str:
    """`name` if a task of that name is registered; else a one-line DataError listing them."""
    if name not in _REGISTRY:
        raise DataError(f"unknown task {name!r} (registered: {', '.join(_REGISTRY)})")
    return name


def task_class(name: str) -> type[Task]:
    """The class of task `name`; DataError (a ValueError) naming the known tasks for any other
    name."""
    module, _, cls = _REGISTRY[check_name(name)].partition(":")
    return getattr(importlib.import_module(module), cls)


def get_task(name: str, rewards: RewardSettings | None = None) -> Task:
    """A task instance, with the experiment's reward settings."""
    return task_class(name)(rewards)


register("data_race_c", "hargo_hpc.tasks.data_race:DataRaceC")
register("data_race_fortran", "hargo_hpc.tasks.data_race:DataRaceFortran")
register("mlperf_qa", "hargo_hpc.tasks.qa:MlperfQA")
register("plp_qa", "hargo_hpc.tasks.qa:PlpQA")
register("gemm", "hargo_hpc.tasks.gemm:Gemm")
