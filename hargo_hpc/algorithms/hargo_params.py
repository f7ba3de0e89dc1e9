"""HARGO's hyperparameters: the `[algorithm.hargo]` table of an experiment file.

Declared once, here, without torch: the config composes this model as its `algorithm.hargo`
section, and `hargo.py` computes the signals from it. The formula each field enters is in the
docstring of the `hargo.py` function that uses it; the whole chain: docs/algorithms.md, "HARGO".
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    ValidationError,
)

from hargo_hpc.algorithms.names import CONFIDENCE_STATS, DISCRIMINATION_STATS
from hargo_hpc.algorithms.registry import EstimatorName


def _number(value: Any) -> Any:
    """Floats accept ints, never strings or bools (TOML `true` is no weight)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError("must be a number")
    return value


Number = Annotated[float, BeforeValidator(_number)]


class HargoParams(BaseModel):
    """HARGO's hyperparameters (docs/algorithms.md).

    discrimination          use the discrimination signal D_g (ablation switch)
    confidence              use the confidence signal C_i (ablation switch)
    estimator               base advantage estimator (registry.py)
    discrimination_stat     what D_g is computed from (DISCRIMINATION_STATS): "balance"
                            (default) b_g = (mean|r − r̄| / sd)², "bimodality" m2²/m4, "split"
                            4q(1 − q), each invariant to r → a r + c of one group and free of
                            the batch mix, D_g = clip(s_g^(p/2), W^−½, 1); "std_batch" (the
                            first reading) D_g = clip((σ_g / σ̄)^p, W^−¼, W^¼)
    discrimination_power    p; 0 = GRPO's per-group scale; on 0/1 rewards every statistic
                            gives D_g ∝ σ_g^p
    confidence_stat         what c_i is (CONFIDENCE_STATS): "uncertain_mean" (default) the
                            mean log π_ref over the tokens with π_ref < confidence_threshold,
                            "token_mean" (the first reading) the mean over all tokens; "sum",
                            "min" ablation rows
    confidence_threshold    τ of "uncertain_mean", a probability in (0, 1)
    confidence_standardise  u_i ← u_i / sd_g(c) (0 where sd_g(c) ≤ 1e-6 nats)
    confidence_scale        β in C_i = exp(−β sign(A_i) u_i), u_i in nats (per token for the
                            means); 0.5 with uncertain_mean (the first reading: 1 with
                            token_mean, whose differences are about half as large)
    max_weight              W: each signal's max / min ≤ √W; every weight in [1/W, W], and
                            max w / min w ≤ W
    contrast_momentum       m (std_batch only): σ̄ ← m σ̄_previous + (1 − m) σ̄_batch
    eps                     lower bound of σ̄ (the divisor of std_batch's signal)
    label_control           ABLATION CONTROL ONLY: replace the label-free weights by fixed
                            per-task-label weights (hargo_labels.label_control_weights); needs
                            the task labels, which no other setting ever sees
    label_momentum          momentum of the control's running per-label mean weight
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    discrimination: StrictBool = Field(True, description="ablation switch: group reward contrast")
    confidence: StrictBool = Field(True, description="ablation switch: reference confidence")
    estimator: EstimatorName = "grpo"
    discrimination_stat: Literal[DISCRIMINATION_STATS] = "balance"  # type: ignore[valid-type]
    discrimination_power: Number = Field(0.5, ge=0)
    confidence_stat: Literal[CONFIDENCE_STATS] = "uncertain_mean"  # type: ignore[valid-type]
    confidence_threshold: Number = Field(0.9, gt=0, lt=1)
    confidence_standardise: StrictBool = False
    confidence_scale: Number = Field(0.5, ge=0)
    max_weight: Number = Field(9.0, ge=1, allow_inf_nan=False)
    contrast_momentum: Number = Field(0.0, ge=0, lt=1)
    eps: Number = Field(1e-6, gt=0)
    label_control: StrictBool = Field(False, description="ablation control: per-label weights")
    label_momentum: Number = Field(0.9, ge=0, lt=1)

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
