"""Reward of each status (the taxonomy itself: `status.py`).

Statuses and default rewards (the seed paper's levels, `BenchSettings.penalties`):

    ok                 shaped GFLOPS (below), or 0 when the run is `suspicious`
    format_violation   -100   no code, wrong/missing gemm, forbidden header/symbol/technique
    compile_error       -40
    timeout             -30   compile or run
    runtime_error       -20   crash, signal, OOM, non-zero exit, output flood, forbidden syscall
    wrong_result        -10   verification failed, or the inputs were modified
    infra_error        None   the harness/machine failed; never scored, the trainer drops it

Shaping of an `ok` run with median GFLOPS g, the speed ratio q to the trusted reference timed in
the same run (interleaved, same threads: reference.py, judge.c; `speed_ratio`), ρ = min(q, 1)
and scale s = `reward_scale`:

    raw     r = s * g                               (machine-dependent: for debugging)
    scaled  r = s * 100 * ρ                          (default: percent of the reference, 0..100)
    log     r = s * 100 * ln(1 + 9 ρ) / ln(10)       (0..100, concave: early gains count more)

A run whose median GFLOPS g exceeds reference_margin x the reference's *best* call of the
same run is flagged `suspicious` and gets reward 0 (a correct kernel does not beat OpenBLAS
by that much; the best call, not the median, so that a reference slowed by other load does not
make an honest kernel look impossible), as is one whose CPU time shows it ran outside the timed
calls. Load on the node and the node's speed slow g and g_ref alike, so ρ cancels them; no
number measured earlier (a stored roof) enters the reward.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from hargo_hpc.bench.settings import BenchSettings
from hargo_hpc.bench.status import UNSCORED


def penalty(status: str, settings: BenchSettings) -> float | None:
    """Reward of a failure status; None for infra_error (not the policy's fault)."""
    if status in UNSCORED:
        return None
    return float(getattr(settings.penalties, status))


def speed_ratio(times: Sequence[float], ref_times: Sequence[float]) -> float:
    """q = median_r (u_r / t_r): the candidate's speed over the reference's, from the pairs of
    calls the judge ran next to each other (t_r the candidate's seconds, u_r the reference's).

    Pairing cancels what drifts between pairs (another job starting, the VM's speed level)
    better than the ratio of the two medians; q estimates g / g_ref (GFLOPS of the same size).
    """
    return statistics.median(u / t for t, u in zip(times, ref_times, strict=True))


def is_suspicious(gflops: float, ref_best: float | None, settings: BenchSettings) -> bool:
    """g > reference_margin x the reference's best call of the run (module docstring)."""
    return ref_best is not None and gflops > settings.reference_margin * ref_best


def shaped_reward(gflops: float, ratio: float | None, settings: BenchSettings) -> float:
    """Reward of an `ok` run from its GFLOPS g and speed ratio q (see the module docstring)."""
    s = settings.reward_scale
    if settings.shaping == "raw" or ratio is None:
        return s * gflops
    rho = min(ratio, 1.0)
    if settings.shaping == "scaled":
        return s * 100.0 * rho
    return s * 100.0 * math.log1p(9.0 * rho) / math.log(10.0)
