"""Pure tensor functions of the RL algorithms: advantage estimators (GRPO family), policy
losses with KL and aggregation, DAPO helpers, DPO/SFT, HARGO weights, and method presets.

Shapes: [B] per response, [B, T] per token with `mask` marking completion tokens; groups are
given explicitly by `group_index` [B]. No I/O, no models. Formulas: docs/algorithms.md.
"""

from hargo_hpc.algorithms.advantages import ESTIMATORS, compute_advantages
from hargo_hpc.algorithms.dapo import dynamic_sampling_filter, overlong_penalty
from hargo_hpc.algorithms.hargo import (
    HARGO_DEFAULTS,
    HargoParams,
    HargoSignals,
    hargo_signals,
    hargo_weights,
)
from hargo_hpc.algorithms.losses import (
    AGG_MODES,
    KL_ESTIMATORS,
    aggregate,
    kl_penalized_rewards,
    kl_penalty,
    policy_loss,
)
from hargo_hpc.algorithms.preference import dpo_loss, dpo_pairs, sft_loss
from hargo_hpc.algorithms.presets import PRESETS, ResolvedAlgorithm, resolve_algorithm

__all__ = [
    "AGG_MODES",
    "ESTIMATORS",
    "HARGO_DEFAULTS",
    "KL_ESTIMATORS",
    "PRESETS",
    "HargoParams",
    "HargoSignals",
    "ResolvedAlgorithm",
    "aggregate",
    "compute_advantages",
    "dpo_loss",
    "dpo_pairs",
    "dynamic_sampling_filter",
    "hargo_signals",
    "hargo_weights",
    "kl_penalized_rewards",
    "kl_penalty",
    "overlong_penalty",
    "policy_loss",
    "resolve_algorithm",
    "sft_loss",
]
