"""Method presets: `algorithm.name` expands to estimator, loss, aggregation, clip and KL
defaults as the papers (and TRL/verl) use them; every field of the config's
`AlgorithmSection` that is set (not None) overrides the preset's value.

`resolve_algorithm(section) -> ResolvedAlgorithm` is the only entry point; it needs only the
section's attributes, so it does not import the config module. No torch here: the config
imports the method names (`PRESETS`) from this module on a login node.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from hargo_hpc.algorithms import registry
from hargo_hpc.algorithms.hargo_params import HargoParams
from hargo_hpc.algorithms.names import AGG_MODES, KL_ESTIMATORS, RATIO_LEVELS

OWN_UPDATES = ("dpo", "sft")  # losses with an update of their own (not a policy loss)
OVERRIDABLE = (
    "estimator", "loss", "agg", "ratio_level", "clip_low", "clip_high", "dual_clip", "kl_coef",
    "kl_estimator", "dynamic_sampling", "refill_rounds", "overlong_buffer", "overlong_penalty",
)
DAPO_BUFFER_FRACTION = 0.2  # DAPO: L_cache = 4096 of L_max = 20480


@dataclass(frozen=True)
class ResolvedAlgorithm:
    """Everything the trainer needs to know about the method, after preset + overrides.

    loss: a policy loss (`registry.POLICY_LOSSES`: ppo, the clipped surrogate; pg, plain
    policy gradient; or one of your own), or dpo / sft (updates of their own, OWN_UPDATES).
    kl_in_reward: the KL penalty is folded into the reward (`kl_penalized_rewards`) instead of
    added to the loss. refill_rounds: generation rounds a step may take to fill its batch with
    informative groups under dynamic sampling (`train.step.refill`; 1 = filter only).
    overlong_buffer: L_cache in tokens; None = a fifth of the generation
    limit (DAPO's ratio), 0 = no overlong shaping. hargo: the HARGO params (only for `hargo`
    and its ablation presets, HARGO_PRESETS).
    """

    name: str
    loss: str = "ppo"
    estimator: str | None = "grpo"
    agg: str = "seq-mean-token-mean"
    ratio_level: str = "token"
    clip_low: float = 0.2
    clip_high: float = 0.2
    dual_clip: float | None = None
    kl_coef: float = 0.0
    kl_estimator: str = "k3"
    kl_in_reward: bool = False
    dynamic_sampling: bool = False
    refill_rounds: int = 1
    overlong_buffer: int | None = 0
    overlong_penalty: float = 1.0
    dpo_beta: float = 0.1
    hargo: HargoParams | None = None

    @property
    def weighting(self) -> str | None:
        """The stateful response weighting the method uses (`weighting.WEIGHTINGS`), None for
        an unweighted one."""
        return "hargo" if self.hargo is not None else None

    @property
    def needs_reference(self) -> bool:
        """Whether the trainer must compute reference log-probs."""
        return self.kl_coef > 0 or self.hargo is not None or self.loss == "dpo"

    def policy_loss_kwargs(self, max_new_tokens: int | None = None) -> dict[str, Any]:
        """Keyword arguments of `policy_loss` (for loss ppo / pg); `max_new_tokens` (the
        generation limit) is Dr.GRPO's constant normaliser L_max, so that it does not change
        with each batch's padding."""
        return {
            "max_length": max_new_tokens,
            "clip_low": self.clip_low,
            "clip_high": self.clip_high,
            "ratio_level": self.ratio_level,
            "kl_coef": 0.0 if self.kl_in_reward else self.kl_coef,
            "kl_estimator": self.kl_estimator,
            "agg": self.agg,
            "loss_type": self.loss,
            "dual_clip": self.dual_clip,
        }

    def overlong_buffer_tokens(self, max_new_tokens: int) -> int:
        """L_cache for a generation limit of `max_new_tokens` (never more than the limit)."""
        if self.overlong_buffer is None:
            return int(max_new_tokens * DAPO_BUFFER_FRACTION)
        return min(self.overlong_buffer, max_new_tokens)


_GRPO = ResolvedAlgorithm(  # DeepSeekMath, arXiv 2402.03300: β = 0.04, k3, 1/|o_i| then 1/G
    name="grpo", estimator="grpo", agg="seq-mean-token-mean", kl_coef=0.04, kl_estimator="k3",
)
PRESETS: dict[str, ResolvedAlgorithm] = {
    "grpo": _GRPO,
    # Dr.GRPO, arXiv 2503.20783: no std, no 1/|o_i| (constant normaliser), no KL
    "dr_grpo": replace(_GRPO, name="dr_grpo", estimator="dr_grpo",
                       agg="seq-mean-token-sum-norm", kl_coef=0.0),
    # DAPO, arXiv 2503.14476: clip-higher, token-mean, dynamic sampling, overlong shaping, no KL
    "dapo": replace(_GRPO, name="dapo", agg="token-mean", clip_high=0.28, kl_coef=0.0,
                    dynamic_sampling=True, overlong_buffer=None, overlong_penalty=1.0),
    # RLOO, arXiv 2402.14740 / TRL: whole-sequence REINFORCE, KL (k1, 0.05) in the reward
    "rloo": replace(_GRPO, name="rloo", estimator="rloo", agg="seq-mean-token-sum",
                    kl_coef=0.05, kl_estimator="k1", kl_in_reward=True),
    # REINFORCE++, arXiv 2501.03262 / OpenRLHF: batch-normalised, token-mean, KL (k1) in reward
    "reinforce_pp": replace(_GRPO, name="reinforce_pp", estimator="reinforce_pp",
                            agg="token-mean", kl_coef=0.01, kl_estimator="k1",
                            kl_in_reward=True),
    # GSPO, arXiv 2507.18071: sequence ratio, clip 3e-4 / 4e-4, sequence mean, no KL
    "gspo": replace(_GRPO, name="gspo", ratio_level="sequence", clip_low=3e-4, clip_high=4e-4,
                    kl_coef=0.0),
    # GPG, arXiv 2504.02546: plain policy gradient, α-scaled group-centred advantage, no KL
    "gpg": replace(_GRPO, name="gpg", loss="pg", estimator="gpg", agg="token-mean",
                   kl_coef=0.0),
    # DPO, arXiv 2305.18290: pairs best-vs-worst of each group, β from algorithm.dpo_beta
    "dpo": replace(_GRPO, name="dpo", loss="dpo", estimator=None, kl_coef=0.0),
    "sft": replace(_GRPO, name="sft", loss="sft", estimator=None, agg="token-mean",
                   kl_coef=0.0),
    # HARGO, arXiv 2607.28301: GRPO + per-response weights (hargo.py)
    "hargo": replace(_GRPO, name="hargo", hargo=HargoParams()),
    # HARGO's ablations (docs/algorithms.md): the first reading of both statistics, each signal
    # off, and the label control (fixed per-task weights: a control, not a method)
    "hargo_std_batch": replace(_GRPO, name="hargo_std_batch", hargo=HargoParams(
        discrimination_stat="std_batch", confidence_stat="token_mean", confidence_scale=1.0)),
    "hargo_no_discrimination": replace(_GRPO, name="hargo_no_discrimination",
                                       hargo=HargoParams(discrimination=False)),
    "hargo_no_confidence": replace(_GRPO, name="hargo_no_confidence",
                                   hargo=HargoParams(confidence=False)),
    "hargo_label_control": replace(_GRPO, name="hargo_label_control",
                                   hargo=HargoParams(label_control=True)),
}
HARGO_PRESETS = tuple(name for name, preset in PRESETS.items() if preset.hargo is not None)


def resolve_algorithm(section: Any) -> ResolvedAlgorithm:
    """The preset of `section.name` with every non-None field of `section` applied on top.

    `section` is the config's AlgorithmSection (or anything with the same attributes).
    Raises a one-line ValueError for an unknown name, estimator, loss, agg, or HARGO key/value.
    """
    name = getattr(section, "name", None)
    if name not in PRESETS:
        raise ValueError(
            f"algorithm.name: unknown method {name!r} (valid: {', '.join(PRESETS)})"
        )
    changes: dict[str, Any] = {}
    for field in OVERRIDABLE:
        value = getattr(section, field, None)
        if value is not None:
            changes[field] = value
    for kind in ("estimator", "loss"):
        try:
            registry.check_name(kind, changes.get(kind, "grpo" if kind == "estimator" else "ppo"))
        except ValueError as err:
            raise ValueError(f"algorithm.{kind}: {err}") from None
    if "loss" in changes and PRESETS[name].loss in OWN_UPDATES:
        raise ValueError(f"algorithm.loss: {name} trains with its own {PRESETS[name].loss} "
                         "loss; a policy loss applies to the RL methods only")
    _check_choice("agg", changes.get("agg"), AGG_MODES)
    _check_choice("ratio_level", changes.get("ratio_level"), RATIO_LEVELS)
    _check_choice("kl_estimator", changes.get("kl_estimator"), KL_ESTIMATORS)
    dual = changes.get("dual_clip")
    if dual is not None and dual <= 1:
        raise ValueError(f"algorithm.dual_clip: must be > 1, got {dual}")
    if changes.get("refill_rounds", 1) > 1 and not changes.get(
            "dynamic_sampling", PRESETS[name].dynamic_sampling):
        raise ValueError("algorithm.refill_rounds > 1 refills a batch with informative groups: "
                         "it needs algorithm.dynamic_sampling = true (or the dapo preset)")
    changes["dpo_beta"] = float(getattr(section, "dpo_beta", 0.1))
    # validated for every method (typos surface early); used only by the HARGO presets
    overrides = hargo_overrides(getattr(section, "hargo", None))
    preset_hargo = PRESETS[name].hargo
    if preset_hargo is not None:
        hargo = HargoParams.from_dict({**preset_hargo.to_dict(), **overrides})
        estimator = changes.get("estimator", PRESETS[name].estimator)
        if estimator != hargo.estimator:
            raise ValueError(
                f"algorithm.estimator {estimator!r} and algorithm.hargo.estimator "
                f"{hargo.estimator!r} differ; HARGO modulates the advantage it is given, so "
                "set both to the same estimator"
            )
        changes["hargo"] = hargo
    return replace(PRESETS[name], **changes)


def hargo_overrides(values: Any) -> dict[str, Any]:
    """The `[algorithm.hargo]` keys that override a HARGO preset's params: exactly the keys
    the experiment file wrote (pydantic's `model_fields_set`; the resolved config saved with a
    run lists only those, `ExperimentConfig.to_dict`), so `confidence = true` on
    `hargo_no_confidence` turns the signal back on and an untouched key keeps the preset's
    value. `values` is the config's HargoParams or a plain mapping (validated: a one-line
    ValueError names a bad key or value)."""
    if values is None:
        return {}
    if isinstance(values, HargoParams):
        return {key: getattr(values, key) for key in values.model_fields_set}
    given = dict(values)
    params = HargoParams.from_dict(given)
    return {key: getattr(params, key) for key in given}


def _check_choice(field: str, value: Any, valid: tuple[str, ...]) -> None:
    if value is not None and value not in valid:
        raise ValueError(f"algorithm.{field}: unknown value {value!r} (valid: {', '.join(valid)})")
