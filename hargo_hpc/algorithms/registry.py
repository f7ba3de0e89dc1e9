"""The algorithms' extension points by name: advantage estimators and policy losses.

Each name maps to "module:function", imported on first use, so the config checks names on a
login node without torch. Adding one is a function in a module and one line below (or, from
your own package, `register_estimator` / `register_policy_loss`, or the "module:function" spec
itself as the name in an experiment file). The contracts and a worked example:
docs/algorithms.md, "Adding an estimator or a policy loss".
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from pydantic import AfterValidator

from hargo_hpc._lazy import load_target

ESTIMATORS: dict[str, str] = {}
POLICY_LOSSES: dict[str, str] = {}
UNGROUPED: set[str] = set()  # estimators that need no group index (one baseline per batch)


def register_estimator(name: str, target: str, *, grouped: bool = True) -> None:
    """Add estimator `name` = `target` ("module:function"); `grouped`: it reads the group index
    (per-prompt statistics), so the trainer keeps each prompt's completions together."""
    _add(ESTIMATORS, "advantage estimator", name, target)
    if not grouped:
        UNGROUPED.add(name)


def register_policy_loss(name: str, target: str) -> None:
    """Add policy loss `name` = `target` ("module:function")."""
    _add(POLICY_LOSSES, "policy loss", name, target)


def _add(table: dict[str, str], kind: str, name: str, target: str) -> None:
    if name in table and table[name] != target:
        raise ValueError(f"{kind} {name!r} is registered already ({table[name]})")
    if ":" in name or ":" not in target:
        raise ValueError(f"{kind} {name!r}: a plain name and a 'module:function' target, "
                         f"got {target!r}")
    table[name] = target


def check_name(kind: str, name: str) -> str:
    """`name` if it is a registered `kind` ("estimator" or "loss") or a "module:function"
    spec; else a one-line ValueError listing the registered names."""
    table = ESTIMATORS if kind == "estimator" else POLICY_LOSSES
    if name in table or _is_spec(name):
        return name
    raise ValueError(f"unknown {_KINDS[kind]} {name!r} (registered: {', '.join(table)}; or "
                     "'package.module:function' of your own)")


def estimator(name: str) -> Callable[..., Any]:
    """The estimator function of a registered name or a "module:function" spec."""
    return _load(ESTIMATORS.get(name, name), "estimator")


def policy_loss(name: str) -> Callable[..., Any]:
    """The policy loss function of a registered name or a "module:function" spec."""
    return _load(POLICY_LOSSES.get(name, name), "loss")


def is_grouped(name: str) -> bool:
    """Whether estimator `name` reads the group index (a spec's function may say
    `grouped = False` as an attribute)."""
    if name in ESTIMATORS:
        return name not in UNGROUPED
    return bool(getattr(estimator(name), "grouped", True))


_KINDS = {"estimator": "advantage estimator", "loss": "policy loss"}
# the config's types of the two names (checked by `check_name`)
EstimatorName = Annotated[str, AfterValidator(lambda name: check_name("estimator", name))]
PolicyLossName = Annotated[str, AfterValidator(lambda name: check_name("loss", name))]


def _is_spec(name: str) -> bool:
    module, _, attr = name.partition(":")
    return bool(module) and attr.isidentifier()


def _load(target: str, kind: str) -> Callable[..., Any]:
    check_name(kind, target)
    try:
        found = load_target(target)
    except (ImportError, AttributeError) as err:
        raise ValueError(f"{_KINDS[kind]} {target!r}: cannot load it ({err})") from None
    if not callable(found):
        raise ValueError(f"{_KINDS[kind]} {target!r}: not a function")
    return found


register_estimator("grpo", "hargo_hpc.algorithms.advantages:grpo")
register_estimator("dr_grpo", "hargo_hpc.algorithms.advantages:dr_grpo")
register_estimator("rloo", "hargo_hpc.algorithms.advantages:rloo")
register_estimator("reinforce_pp", "hargo_hpc.algorithms.advantages:reinforce_pp",
                   grouped=False)
register_estimator("reinforce_pp_baseline",
                   "hargo_hpc.algorithms.advantages:reinforce_pp_baseline")
register_estimator("gpg", "hargo_hpc.algorithms.advantages:gpg")
register_policy_loss("ppo", "hargo_hpc.algorithms.losses:clipped_surrogate")
register_policy_loss("pg", "hargo_hpc.algorithms.losses:plain_policy_gradient")
