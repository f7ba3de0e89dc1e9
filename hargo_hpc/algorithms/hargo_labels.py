"""Task labels next to HARGO's weights: per-task shares for the log, and the label control.

THIS IS THE ONLY MODULE OF `algorithms/` THAT SEES TASK LABELS. HARGO itself never does
(`hargo.hargo_signals` has no labels argument; DESIGN.md: task identity is for metrics and logs
only). The two functions here are for

1. logging: `task_weight_shares`, what each task's rows weigh in the update;
2. an ABLATION CONTROL, not a method: `label_control_weights` replaces HARGO's label-free
   weights by one fixed weight per task label, the running mean of what the label-free signal
   gave that label. It answers "does HARGO do more than a per-task reweighting?": if training
   with it matches HARGO, HARGO's effect is a covert task weighting; if HARGO beats it, the
   within-task (per group, per response) variation matters. Only the `hargo_label_control`
   preset (HargoParams.label_control = true) uses it.

No torch here (the trainer's tensors and plain lists both work: anything with `.tolist()`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any


def _floats(values: Any, name: str) -> list[float]:
    """A plain list of finite floats from a list, tuple or tensor (via `.tolist()`)."""
    raw = values.tolist() if hasattr(values, "tolist") else list(values)
    out = [float(v) for v in raw]
    if any(not math.isfinite(v) for v in out):
        raise ValueError(f"{name} contains NaN or inf")
    return out


def _check_length(labels: Sequence[str], values: list[float], name: str) -> None:
    if len(values) != len(labels):
        raise ValueError(f"{name} must have one value per label ({len(labels)}), got "
                         f"{len(values)}")


def label_control_weights(
    labels: Sequence[str],
    label_free_weights: Any,
    label_means: Mapping[str, float] | None = None,
    momentum: float = 0.9,
) -> tuple[Any, dict[str, float]]:
    """ABLATION CONTROL ONLY. (weights, updated running means): one weight per task label.

    For each label ℓ of the batch, with w_i the label-free HARGO weights of its rows:

        m̂_ℓ = mean_{i: ℓ_i = ℓ} w_i
        m_ℓ ← μ · m_ℓ + (1 − μ) · m̂_ℓ      (m_ℓ = m̂_ℓ for a label not in `label_means`)
        v_i = m_{ℓ_i} / mean_j m_{ℓ_j}      (mean 1 over the batch, as HARGO's weights)

    μ = `momentum` in [0, 1) (0: this batch's means only). Labels absent from the batch keep
    their running mean. The state is passed in and returned, never held here: store it with the
    checkpoint next to HARGO's running contrast for an exact resume. Returns the weights as the
    type they came in (a tensor of the same dtype and device via `new_tensor`, else a list)
    and a new dict of running means.
    """
    if not 0.0 <= momentum < 1.0:
        raise ValueError(f"label_control_weights: momentum must be in [0, 1), got {momentum}")
    free = _floats(label_free_weights, "label_free_weights")
    _check_length(labels, free, "label_free_weights")
    if any(v <= 0 for v in free):
        raise ValueError("label_free_weights must be positive")
    means = dict(label_means or {})
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    for label, w in zip(labels, free, strict=True):
        sums[label] = sums.get(label, 0.0) + w
        counts[label] = counts.get(label, 0) + 1
    for label, total in sums.items():
        batch_mean = total / counts[label]
        previous = means.get(label)
        means[label] = batch_mean if previous is None else (
            momentum * float(previous) + (1.0 - momentum) * batch_mean)
    values = [means[label] for label in labels]
    if values:
        centre = sum(values) / len(values)
        values = [v / centre for v in values]
    if hasattr(label_free_weights, "new_tensor"):
        return label_free_weights.new_tensor(values), means
    return values, means


def task_weight_shares(
    labels: Sequence[str],
    weights: Any,
    advantages: Any,
    keep: Any = None,
) -> dict[str, dict[str, float]]:
    """Per task label, over the kept rows (`keep[i]` true; None = all rows):

        share_ℓ       = Σ_{i kept, ℓ_i=ℓ} |w_i A_i| / Σ_{i kept} |w_i A_i|   (HARGO's share)
        adv_share_ℓ   = Σ_{i kept, ℓ_i=ℓ} |A_i|     / Σ_{i kept} |A_i|       (GRPO's share)
        mean_weight_ℓ = mean_{i kept, ℓ_i=ℓ} w_i
        rows_ℓ        = #{i kept, ℓ_i = ℓ}

    `weights` None means w ≡ 1 (then share = adv_share). A share is 0.0 when its denominator
    is 0 (no advantage in the kept rows). Labels without kept rows are left out; labels are
    sorted. For the log only: labels never feed back into the weights here.
    """
    adv = _floats(advantages, "advantages")
    _check_length(labels, adv, "advantages")
    w = [1.0] * len(adv) if weights is None else _floats(weights, "weights")
    _check_length(labels, w, "weights")
    kept = [True] * len(adv) if keep is None else [bool(k) for k in (
        keep.tolist() if hasattr(keep, "tolist") else keep)]
    _check_length(labels, [float(k) for k in kept], "keep")
    rows = [i for i, k in enumerate(kept) if k]
    total_wa = sum(abs(w[i] * adv[i]) for i in rows)
    total_a = sum(abs(adv[i]) for i in rows)
    out: dict[str, dict[str, float]] = {}
    for label in sorted({labels[i] for i in rows}):
        mine = [i for i in rows if labels[i] == label]
        wa = sum(abs(w[i] * adv[i]) for i in mine)
        a = sum(abs(adv[i]) for i in mine)
        out[label] = {
            "share": wa / total_wa if total_wa > 0 else 0.0,
            "adv_share": a / total_a if total_a > 0 else 0.0,
            "mean_weight": sum(w[i] for i in mine) / len(mine),
            "rows": float(len(mine)),
        }
    return out
