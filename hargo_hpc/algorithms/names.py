"""The names users put in experiment files for the algorithms' choices, without torch.

The config validates against these on a login node; the modules that implement each choice
(`advantages.py`, `losses.py`, `hargo_stats.py`) register exactly these names (a test checks
they agree).
"""

ESTIMATOR_NAMES = ("dr_grpo", "gpg", "grpo", "reinforce_pp", "reinforce_pp_baseline", "rloo")
KL_ESTIMATORS = ("k1", "k2", "k3")
AGG_MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm")
LOSS_TYPES = ("ppo", "pg")
RATIO_LEVELS = ("token", "sequence")
# HARGO's switchable statistics (hargo_stats.py; docs/algorithms.md gives the evidence)
DISCRIMINATION_STATS = ("balance", "bimodality", "split", "std_batch")
CONFIDENCE_STATS = ("uncertain_mean", "token_mean", "sum", "min")
