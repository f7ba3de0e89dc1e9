"""Stateful response weightings, in a registry keyed by name like the advantage estimators.

A weighting turns one step's rewards, groups, reference log-probs and base advantages into
per-response importance weights [B] (positive, mean 1) and carries what it needs from step to
step: the loop holds one object per run (`make_weighting(algorithm)`, None for an unweighted
method), calls it once per step in the `adv` phase, and saves `state_dict()` with the
checkpoint (`load_state_dict` on resume), so adding a weighting touches only this registry.

    hargo   HargoWeighting: `hargo.hargo_weights` with its running state, σ̄ of earlier steps
            (`running_contrast`, used when contrast_momentum > 0) and, under the label control
            only, the per-label running mean weights (`label_means`)

Labels reach a weighting only for the label control (an ablation; `hargo_labels`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from torch import Tensor

from hargo_hpc.algorithms.hargo import hargo_weights
from hargo_hpc.algorithms.hargo_params import HargoParams
from hargo_hpc.algorithms.presets import ResolvedAlgorithm


class Weighting(Protocol):
    """Per-response weights of one step, and the state they carry to the next."""

    @property
    def needs_labels(self) -> bool:
        """Whether `__call__` must get the rows' task labels (the label control only)."""
        ...

    def __call__(self, rewards: Tensor, group_index: Tensor, ref_logprobs: Tensor,
                 mask: Tensor, *, advantages: Tensor, labels: Sequence[str] | None = None,
                 ) -> tuple[Tensor, dict[str, Any]]:
        """(weights [B], stats): stats are floats for the metrics record."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """What a resume needs (JSON values)."""
        ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore `state_dict()`'s values."""
        ...


WEIGHTINGS: dict[str, Callable[[ResolvedAlgorithm], Weighting]] = {}


def register(name: str) -> Callable[[Callable[[ResolvedAlgorithm], Weighting]],
                                     Callable[[ResolvedAlgorithm], Weighting]]:
    """Register a weighting's constructor (from the resolved preset) under `name`, the value
    of `ResolvedAlgorithm.weighting` that selects it."""

    def add(make: Callable[[ResolvedAlgorithm], Weighting]
            ) -> Callable[[ResolvedAlgorithm], Weighting]:
        WEIGHTINGS[name] = make
        return make

    return add


def make_weighting(algorithm: ResolvedAlgorithm) -> Weighting | None:
    """A fresh weighting for the preset's `weighting` (None: the method is unweighted)."""
    name = algorithm.weighting
    if name is None:
        return None
    if name not in WEIGHTINGS:
        raise ValueError(f"unknown weighting {name!r} (valid: {', '.join(sorted(WEIGHTINGS))})")
    return WEIGHTINGS[name](algorithm)


@register("hargo")
class HargoWeighting:
    """HARGO's weights (`hargo.hargo_weights`, formulas in `hargo.py`) and their running state.

    running_contrast: σ̄ = `contrast_ref` of the last step (None before the first), passed back
    as `running_contrast` (used when contrast_momentum > 0). label_means: the label control's
    running per-label mean weights m_ℓ (`hargo_labels.label_control_weights`), {} otherwise.
    """

    def __init__(self, algorithm: ResolvedAlgorithm) -> None:
        if algorithm.hargo is None:
            raise ValueError(f"algorithm {algorithm.name} has no HARGO parameters")
        self.params: HargoParams = algorithm.hargo
        self.running_contrast: float | None = None
        self.label_means: dict[str, float] = {}

    @property
    def needs_labels(self) -> bool:
        return bool(self.params.label_control)

    def __call__(self, rewards: Tensor, group_index: Tensor, ref_logprobs: Tensor,
                 mask: Tensor, *, advantages: Tensor, labels: Sequence[str] | None = None,
                 ) -> tuple[Tensor, dict[str, Any]]:
        """w_i = D_g C_i / mean_j D_g(j) C_j (hargo.py); then σ̄ ← this step's contrast_ref
        and, under the label control, m_ℓ ← the returned label means."""
        control: dict[str, Any] = {}
        if self.needs_labels:  # the label control (an ablation only) is the one use of labels
            control = {"labels": labels, "label_means": self.label_means}
        weights, stats = hargo_weights(rewards, group_index, ref_logprobs, mask,
                                       advantages=advantages,
                                       running_contrast=self.running_contrast,
                                       **control, **self.params.to_dict())
        self.running_contrast = float(stats["contrast_ref"])
        self.label_means = stats.get("label_means", self.label_means)
        return weights, stats

    def state_dict(self) -> dict[str, Any]:
        """`{"running_contrast": σ̄}` once there is one, plus `label_means` when not empty."""
        state: dict[str, Any] = ({} if self.running_contrast is None
                                 else {"running_contrast": self.running_contrast})
        if self.label_means:
            state["label_means"] = self.label_means
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.running_contrast = state.get("running_contrast")
        self.label_means = dict(state.get("label_means") or {})
