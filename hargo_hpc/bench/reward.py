"""Reward of each status (the taxonomy itself: `status.py`).

Statuses and default rewards (the seed paper's levels, `BenchSettings.penalties`):

    ok                 shaped GFLOPS (below), or 0 when the run is `suspicious`
    format_violation   -100   no code, wrong/missing gemm, forbidden header/symbol/technique
    compile_error       -40
    timeout             -30   compile or run
    runtime_error       -20   crash, signal, OOM, non-zero exit, output flood, forbidden syscall
    wrong_result        -10   verification failed, or the inputs were modified
    infra_error        None   the harness/machine failed; never scored, the trainer drops it

Shaping of an `ok` run with median GFLOPS g, roof R (measured, `hargo bench calibrate`) and
scale s = `reward_scale`:

    raw     r = s * g
    scaled  r = s * 100 * min(g, R) / R          (default: percent of the roof, 0..100)
    log     r = s * 100 * ln(1 + min(g, R)) / ln(1 + R)

Without a known roof, `scaled` and `log` fall back to `raw`.  A run with g > R * roof_margin is
flagged `suspicious` and gets reward 0 (a correct kernel cannot beat the machine).
"""

from __future__ import annotations

import math

from hargo_hpc.bench.settings import BenchSettings
from hargo_hpc.bench.status import UNSCORED


def penalty(status: str, settings: BenchSettings) -> float | None:
    """Reward of a failure status; None for infra_error (not the policy's fault)."""
    if status in UNSCORED:
        return None
    return float(getattr(settings.penalties, status))


def is_suspicious(gflops: float, roof: float | None, settings: BenchSettings) -> bool:
    return roof is not None and gflops > roof * settings.roof_margin


def shaped_reward(gflops: float, roof: float | None, settings: BenchSettings) -> float:
    """Reward of an `ok` run (see the module docstring)."""
    s = settings.reward_scale
    if settings.shaping == "raw" or roof is None:
        return s * gflops
    g = min(gflops, roof)
    if settings.shaping == "scaled":
        return s * 100.0 * g / roof
    return s * 100.0 * math.log1p(g) / math.log1p(roof)
