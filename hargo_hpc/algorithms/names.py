"""The fixed choices users name in experiment files, without torch: the config validates
against these on a login node (the estimators and policy losses, which a user may add to, are
in `registry.py`).
"""

KL_ESTIMATORS = ("k1", "k2", "k3")
AGG_MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm")
RATIO_LEVELS = ("token", "sequence")
# HARGO's switchable statistics (hargo_stats.py; docs/algorithms.md gives the evidence)
DISCRIMINATION_STATS = ("balance", "bimodality", "split", "std_batch")
CONFIDENCE_STATS = ("uncertain_mean", "token_mean", "sum", "min")
