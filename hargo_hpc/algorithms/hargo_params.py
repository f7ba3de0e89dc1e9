"""HARGO's hyperparameters: the `[algorithm.hargo]` table of an experiment file.

Declared once, here, without torch: the config composes this model as its `algorithm.hargo`
section, and `hargo.py` computes the signals from it. The formulas each field enters are in
`hargo.py`'s docstring.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StrictBool, ValidationError

from hargo_hpc.algorithms.names import ESTIMATOR_NAMES


def _number(value: Any) -> Any:
    """Floats accept ints, never strings or bools (TOML `true` is no weight)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError("must be a number")
    return value


Number = Annotated[float, BeforeValidator(_number)]


class HargoParams(BaseModel):
    """HARGO's hyperparameters (docs/algorithms.md).

    discrimination        use the discrimination signal D_g (ablation switch)
    confidence            use the confidence signal C_i (ablation switch)
    estimator             base advantage estimator (a name in ESTIMATOR_NAMES)
    discrimination_power  p in D_g = (σ_g / σ̄)^p; 0 = GRPO's per-group scale, 1 = batch scale
    confidence_scale      β in C_i = exp(−β sign(A_i) u_i), u_i in nats per token
    max_weight            W: each signal lies in [W^−¼, W^¼]; every weight in [1/W, W],
                          and max w / min w ≤ W
    contrast_momentum     m: σ̄ ← m σ̄_previous + (1 − m) σ̄_batch (0 = this batch only)
    eps                   lower bound of σ̄ (the divisor of the discrimination signal)
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    discrimination: StrictBool = Field(True, description="ablation switch: group reward contrast")
    confidence: StrictBool = Field(True, description="ablation switch: reference confidence")
    estimator: Literal[ESTIMATOR_NAMES] = "grpo"  # type: ignore[valid-type]
    discrimination_power: Number = Field(0.5, ge=0)
    confidence_scale: Number = Field(1.0, ge=0)
    max_weight: Number = Field(9.0, ge=1, allow_inf_nan=False)
    contrast_momentum: Number = Field(0.0, ge=0, lt=1)
    eps: Number = Field(1e-6, gt=0)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> HargoParams:
        """Validated params from a plain dict; a one-line ValueError names the bad key/value."""
        try:
            return cls.model_validate(values)
        except ValidationError as err:
            first = err.errors()[0]
            key = ".".join(str(p) for p in first["loc"])
            if first["type"] == "extra_forbidden":
                raise ValueError(
                    f"algorithm.hargo: unknown key {key!r} (valid: {', '.join(cls.model_fields)})"
                ) from None
            message = str(first["msg"]).removeprefix("Value error, ")
            raise ValueError(
                f"algorithm.hargo: {key}: bad value {first.get('input')!r}: {message}"
            ) from None

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump()


HARGO_DEFAULTS = HargoParams()
