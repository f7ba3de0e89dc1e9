"""The task registry: config names -> task classes, imported on first use.

Each entry names the module and class, so importing the registry loads no task module (and no
embedding model). `register` refuses a name that is taken. An experiment file may also name a
Task of its own by `module:Class`, or define a generic task (`define_generic`, from its
`[[data.tasks]]` entry): both are registered when the file is read.
"""

from __future__ import annotations

from hargo_hpc._lazy import load_target
from hargo_hpc.tasks.base import DataError, Task
from hargo_hpc.tasks.settings import RewardSettings

_REGISTRY: dict[str, str] = {}
_LOADED: dict[str, type[Task]] = {}  # tasks named by 'module:Class', and generic tasks
_GENERIC: dict[str, tuple[object, ...]] = {}  # each generic task's definition


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


def define_generic(name: str, *, prompt_field: str, reference_field: str, reward: str,
                   max_new_tokens: int | None) -> str:
    """Register the generic task `name` (`tasks.generic`; every process that reads the
    experiment file defines it the same way); DataError when `name` is another task's."""
    definition = (prompt_field, reference_field, reward, max_new_tokens)
    if _GENERIC.get(name) == definition:
        return name
    if name in _REGISTRY:
        raise DataError(f"task name {name!r} is taken (a registered task, or another generic "
                        "task's): give the generic task another name")
    from hargo_hpc.tasks.generic import generic_task

    _LOADED[name] = generic_task(name, prompt_field=prompt_field,
                                 reference_field=reference_field, reward=reward,
                                 max_new_tokens=max_new_tokens)
    _REGISTRY[name], _GENERIC[name] = name, definition
    return name


def task_class(name: str) -> type[Task]:
    """The class of task `name`; DataError (a ValueError) naming the known tasks for any other
    name."""
    target = _REGISTRY[check_name(name)]
    if target == name:  # named by 'module:Class', or a generic task: made when first read
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
