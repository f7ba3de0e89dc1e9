"""Pure tensor functions of the RL algorithms: advantage estimators (GRPO family), policy
losses with KL and aggregation, DAPO helpers, DPO/SFT, HARGO weights, the stateful weightings
that carry them from step to step (`weighting`), and method presets.

Shapes: [B] per response, [B, T] per token with `mask` marking completion tokens; groups are
given explicitly by `group_index` [B]. No I/O, no models. Formulas: docs/algorithms.md.
The names below are imported on first use: `names`, `registry`, `hargo_params` and `presets`
need no torch.
"""

from hargo_hpc._lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "ESTIMATORS": "hargo_hpc.algorithms.registry",
    "POLICY_LOSSES": "hargo_hpc.algorithms.registry",
    "register_estimator": "hargo_hpc.algorithms.registry",
    "register_policy_loss": "hargo_hpc.algorithms.registry",
    "compute_advantages": "hargo_hpc.algorithms.advantages",
    "dynamic_sampling_filter": "hargo_hpc.algorithms.dapo",
    "overlong_penalty": "hargo_hpc.algorithms.dapo",
    "HARGO_DEFAULTS": "hargo_hpc.algorithms.hargo_params",
    "HargoParams": "hargo_hpc.algorithms.hargo_params",
    "HargoSignals": "hargo_hpc.algorithms.hargo",
    "hargo_signals": "hargo_hpc.algorithms.hargo",
    "hargo_weights": "hargo_hpc.algorithms.hargo",
    "AGG_MODES": "hargo_hpc.algorithms.names",
    "KL_ESTIMATORS": "hargo_hpc.algorithms.names",
    "aggregate": "hargo_hpc.algorithms.losses",
    "kl_penalized_rewards": "hargo_hpc.algorithms.losses",
    "kl_penalty": "hargo_hpc.algorithms.losses",
    "policy_loss": "hargo_hpc.algorithms.losses",
    "truncated_importance_weights": "hargo_hpc.algorithms.losses",
    "dpo_loss": "hargo_hpc.algorithms.preference",
    "dpo_pairs": "hargo_hpc.algorithms.preference",
    "sft_loss": "hargo_hpc.algorithms.preference",
    "PRESETS": "hargo_hpc.algorithms.presets",
    "ResolvedAlgorithm": "hargo_hpc.algorithms.presets",
    "resolve_algorithm": "hargo_hpc.algorithms.presets",
    "WEIGHTINGS": "hargo_hpc.algorithms.weighting",
    "make_weighting": "hargo_hpc.algorithms.weighting",
})
