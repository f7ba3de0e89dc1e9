"""The task registry: config names -> task classes, imported on first use.

Each entry names the module and class, so importing the registry loads no task module (and no
embedding model). `register` refuses a name that is taken.
"""

from __future__ import annotations

from hargo_hpc._lazy import load_target
from hargo_hpc.tasks.base import DataError, Task
from hargo_hpc.tasks.settings import RewardSettings

_REGISTRY: dict[str, str] = {}
_LOADED: dict[str, type[Task]] = {}  # tasks named by 'module:Class' in an experiment file


def register(name: str, target: str) -> None:
    """Add task `name`, defined by `target` ('module:Class'); a name is registered once."""
    if name in _REGISTRY:
        raise ValueError(f"task {name!r} is already registered ({_REGISTRY[name]})")
    _REGISTRY[name] = target


def task_names() -> list[str]:
    """The registered task names, the shipped ones first."""
    return list(_REGISTRY)


def check_name(name: str) -> str:
    """`name` if a task of that name is registered, or `module:Class` naming a Task that
    imports (registered under that name); else a one-line DataError."""
    if name not in _REGISTRY:
        if ":" not in name:
            raise DataError(f"unknown task {name!r} (registered: {', '.join(_REGISTRY)}; or "
                            "'module:Class' for a Task of your own)")
        _imported(name)
    return name


def _imported(spec: str) -> type[Task]:
    """The Task class `spec` ('module:Class', on the PYTHONPATH) names, as a subclass whose
    `name` is `spec` itself (what the experiment file says, in every job), registered."""
    found = _LOADED.get(spec)
    if found is not None:
        return found
    attr = spec.partition(":")[2]
    try:
        obj = load_target(spec)
    except (ImportError, AttributeError) as err:
        raise DataError(f"task {spec!r}: {type(err).__name__}: {err} (is its module on the "
                        "PYTHONPATH of every node?)") from None
    if not (isinstance(obj, type) and issubclass(obj, Task)):
        raise DataError(f"task {spec!r}: {attr} is not a Task (a subclass of "
                        "hargo_hpc.tasks.base.Task)")
    named = type(obj.__name__, (obj,), {"name": spec, "__module__": obj.__module__})
    _LOADED[spec] = named
    _REGISTRY[spec] = spec
    return named


def task_class(name: str) -> type[Task]:
    """The class of task `name`; DataError (a ValueError) naming the known tasks for any other
    name."""
    target = _REGISTRY[check_name(name)]
    if target == name:  # imported by its 'module:Class' name
        return _imported(name)
    return load_target(target)


def get_task(name: str, rewards: RewardSettings | None = None) -> Task:
    """A task instance, with the experiment's reward settings."""
    return task_class(name)(rewards)


register("data_race_c", "hargo_hpc.tasks.data_race:DataRaceC")
register("data_race_fortran", "hargo_hpc.tasks.data_race:DataRaceFortran")
register("mlperf_qa", "hargo_hpc.tasks.qa:MlperfQA")
register("plp_qa", "hargo_hpc.tasks.qa:PlpQA")
register("gemm", "hargo_hpc.tasks.gemm:Gemm")
